"""A git history of a small engine package, ``toyeng``, for the bisect sweeper's tests: one
commit per step, a fault (the gradients doubled before the optimizer step) from commit
``fault_at`` on, and a commit that does not import (a syntax error, mended by the next
commit) at ``broken_at``."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import List, Optional

ENGINE = '''from sweep.engines.torch_fsdp2 import TorchFSDP2

STEP = {step}
SCALE = {scale}


class Engine(TorchFSDP2):
    """FSDP2, with the gradients multiplied by SCALE before the optimizer step."""

    def optimizer_step(self, optimizer, grads=None, *, scaler=None):
        if SCALE != 1.0:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.mul_(SCALE)
        super().optimizer_step(optimizer, grads, scaler=scaler)
'''


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=toy@example.com", "-c", "user.name=toy", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "toyeng"
version = "0.0.1"
"""


def make_repo(root: Path, n: int = 8, fault_at: int = 5, broken_at: Optional[int] = None,
              packaged: bool = False) -> List[str]:
    """A repo at ``root`` with ``n`` commits (subjects ``step <i>: ...``); returns their shas,
    oldest first. Commit ``i`` (0-based) doubles the gradients if ``i >= fault_at``; commit
    ``broken_at`` has a syntax error; ``packaged``: with a ``pyproject.toml`` (pip installs it)."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q")
    if packaged:
        (root / "pyproject.toml").write_text(PYPROJECT)
    shas = []
    for i in range(n):
        text = ENGINE.format(step=i, scale=2.0 if i >= fault_at else 1.0)
        subject = f"step {i}: " + ("double the gradients before the step" if i == fault_at else "tidy")
        if i == broken_at:
            text = text.replace("class Engine(TorchFSDP2):", "class Engine(TorchFSDP2)")  # no colon
            subject = f"step {i}: a change that does not import"
        (root / "toyeng").mkdir(exist_ok=True)
        (root / "toyeng" / "__init__.py").write_text(text)
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "-m", subject)
        shas.append(_git(root, "rev-parse", "HEAD"))
    return shas
