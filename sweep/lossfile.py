"""The loss file a ``runner=command`` job's script writes and the job reads: one JSON object a line.

A script swept with ``runner=command`` (``sweep.run.command``) may report its losses
through :func:`log_loss` instead of printing lines for regexes: the job sets
``SWEEP_LOSS_FILE`` (where to append), ``SWEEP_COPY`` (``distributed``, or
``standalone`` for a ``runner.baseline_command``) and the framework launcher sets the
rank (``RANK``: torchrun; ``RANK_ID``: msrun). Standard library only, so a script can
``import sweep`` and call ``sweep.log_loss`` without the tool's dependencies being
imported (no torch, MindSpore, numpy or Hydra).

Each line: ``{"step": int, "loss": float or "nan"/"inf"/"-inf", "copy":
"standalone"|"distributed", "rank": int or null}``. Appends of one line each are
atomic between the ranks of one host (``O_APPEND``, one ``write`` of under
``PIPE_BUF`` bytes; POSIX ``write(2)``).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

ENV_FILE = "SWEEP_LOSS_FILE"
ENV_COPY = "SWEEP_COPY"
COPIES = ("standalone", "distributed")
_RANK_VARS = ("RANK", "RANK_ID", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")


def _rank_from_env() -> Optional[int]:
    for name in _RANK_VARS:
        value = os.environ.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return None


def _loss_value(loss: Any) -> Any:
    """A float, or ``"nan"``/``"inf"``/``"-inf"``. Takes a Python number, a 0-d or one-element
    tensor or array (``.item()``) or a MindSpore Tensor (``.asnumpy()``)."""
    if hasattr(loss, "asnumpy"):
        loss = loss.asnumpy()
    if hasattr(loss, "item"):
        loss = loss.item()
    value = float(loss)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def log_loss(step: int, loss: Any, copy: Optional[str] = None, rank: Optional[int] = None,
             path: Optional[str] = None) -> None:
    """Append one loss to the job's loss file (``$SWEEP_LOSS_FILE``); a no-op when the
    script runs outside ``sweep`` (the variable unset, no ``path``).

    Args:
        step: the optimizer step, counted from 0 (or 1: the job takes the first step
            reported as the first).
        loss: the step's loss: a number, or a 0-d tensor (torch, numpy, MindSpore).
        copy: ``"standalone"`` or ``"distributed"``; default ``$SWEEP_COPY`` (the job sets
            it: ``distributed`` for ``runner.command``, ``standalone`` for
            ``runner.baseline_command``).
        rank: the reporting rank; default the launcher's (``RANK``, ``RANK_ID``), else ``None``.
        path: the file; default ``$SWEEP_LOSS_FILE``.

    Raises:
        ValueError: a ``copy`` other than ``standalone`` or ``distributed``, a negative step.
    """
    target = path or os.environ.get(ENV_FILE)
    if not target:
        return
    copy = copy or os.environ.get(ENV_COPY) or "distributed"
    if copy not in COPIES:
        raise ValueError(f"copy={copy!r}: must be one of {', '.join(COPIES)}")
    if int(step) < 0:
        raise ValueError(f"step={step}: must be >= 0")
    entry = {"step": int(step), "loss": _loss_value(loss), "copy": copy,
             "rank": int(rank) if rank is not None else _rank_from_env()}
    line = (json.dumps(entry) + "\n").encode()
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_loss_file(path: Path | str) -> List[Dict[str, Any]]:
    """The entries of a loss file, in file order; ``[]`` when it does not exist.

    Raises:
        ValueError: a line that is not such an object (its number and text).
    """
    path = Path(path)
    if not path.exists():
        return []
    entries = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            ok = (isinstance(entry, dict) and entry.get("copy") in COPIES and isinstance(entry.get("step"), int)
                  and (entry.get("rank") is None or isinstance(entry.get("rank"), int)))
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"{path}:{number}: not a loss entry ({line[:120]!r}); expected "
                             '{"step": 0, "loss": 1.0, "copy": "distributed", "rank": 0}')
        loss = entry.get("loss")
        entries.append({"step": entry["step"], "loss": float(loss), "copy": entry["copy"], "rank": entry.get("rank")})
    return entries
