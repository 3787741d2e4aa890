"""What a job says when its processes fail: its time limit, its logs' tails, the cause in one line.

Shared by the built-in job (``sweep.run.job``) and ``runner=command`` (``sweep.run.command``).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Dict, List, Optional

from omegaconf import DictConfig

from sweep.config.schema import world_size
from sweep.layout import LAUNCHER_LOG, JobDir

TAIL_LINES = 15


def timeout_s(cfg: DictConfig) -> float:
    """``execution.timeout_s`` or ``base_timeout_s + per_step_s * steps * world_size`` seconds."""
    if cfg.execution.timeout_s is not None:
        return float(cfg.execution.timeout_s)
    return float(cfg.execution.base_timeout_s + cfg.execution.per_step_s * cfg.steps * world_size(cfg))


def log_tails(job_dir: Path, lines: int = TAIL_LINES, launcher_log: Optional[Path] = None) -> Dict[str, str]:
    """Last ``lines`` lines of every log of the job, by file name; ``launcher_log`` is the
    shared launch's log when the job ran in one (``sweep.run.pool``), and the worker logs
    beside it (a rank that died before it took the job) come as ``pool <name>``."""
    tails = {}
    named = [(p.name, p) for p in sorted(JobDir(job_dir).logs.glob("*.log"))]
    if launcher_log:
        named.append((launcher_log.name, launcher_log))
        named += [(f"pool {p.name}", p) for p in sorted(launcher_log.parent.glob("worker_*.log"))]
    for name, path in named:
        text = path.read_text(errors="replace").splitlines()
        tails[name] = "\n".join(text[-lines:])
    return tails


def failure_cause(returncode: Optional[int], tails: Dict[str, str]) -> str:
    """What the logs say about a crash, in one line: the launcher's exit code or signal,
    torchrun's per-rank ``exitcode``/signal lines, and the last exception line of each
    worker log."""
    if returncode is None:
        parts = ["launcher killed"]
    elif returncode < 0:
        parts = [f"launcher killed by {signal.Signals(-returncode).name}"]
    else:
        parts = [f"launcher exited with code {returncode}"]
    for name, text in tails.items():
        lines = text.splitlines()
        if name == LAUNCHER_LOG:
            hits = [line.strip() for line in lines if re.search(r"exitcode|Signal \d+|rank\s*:", line)]
            parts.extend(hits[:6])
        else:
            errors = [i for i, line in enumerate(lines) if re.search(r"Error|Exception|Traceback|error:", line)]
            if errors:
                parts.append(f"{name}: {_exception_text(lines, errors[-1])[:300]}")
    return "; ".join(parts)


def _exception_text(lines: List[str], index: int) -> str:
    """The exception line ``lines[index]``, and, when its message is empty (MindSpore puts
    it on the lines after ``TypeError:``, between rules of dashes), the message lines that
    follow, up to the next blank line or its C++ call stack."""
    head = lines[index].strip()
    if not head.endswith(":"):
        return head
    body = []
    for line in lines[index + 1:]:
        if line.strip() and set(line.strip()) <= {"-"}:
            continue  # a rule of dashes
        text = line.strip().lstrip("- ").strip()
        if (not text and body) or "Call Stack" in text:
            break
        if text:
            body.append(text)
    return " ".join([head, *body])

