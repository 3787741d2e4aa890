"""An example git history to bisect (docs/since-when.md): ``toyeng``, a small engine package
(FSDP2 with a fault: the gradients multiplied by 2 before the optimizer step from commit
``--fault-at`` on, and a commit that does not import, a syntax error mended by the next
one, at ``--broken-at``), one commit per step.

    python examples/toy_history.py /tmp/toyhist     # 9 commits; then the recipe it prints

Every commit has a fixed author, committer and date, so its id is the same on every
machine (the ids docs/since-when.md shows); the first commit is tagged ``step-0`` and the
branch is ``master``, so the recipe names no id. The bisect sweeper's tests build their
histories with :func:`make_repo` (``tests/helpers/toy_history.py``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
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

PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "toyeng"
version = "0.0.1"
"""

WHO = {"GIT_AUTHOR_NAME": "toy", "GIT_AUTHOR_EMAIL": "toy@example.com",
       "GIT_COMMITTER_NAME": "toy", "GIT_COMMITTER_EMAIL": "toy@example.com"}


def _git(repo: Path, *args: str, date: Optional[str] = None) -> str:
    env = {**os.environ, **WHO}
    if date is not None:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    config = ["-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", "-c", "core.autocrlf=false",
              "-c", "init.defaultBranch=master"]
    return subprocess.run(["git", "-C", str(repo), *config, *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def make_repo(root: Path, n: int = 9, fault_at: int = 6, broken_at: Optional[int] = 4,
              packaged: bool = False) -> List[str]:
    """A repo at ``root`` (created; it must not hold one) with ``n`` commits (subjects
    ``step <i>: ...``) on branch ``master``, the first tagged ``step-0``; returns their
    shas, oldest first. Commit ``i`` (0-based) doubles the gradients if ``i >= fault_at``;
    commit ``broken_at`` has a syntax error (``None``: none has); ``packaged``: with a
    ``pyproject.toml`` (pip installs it). Commit ``i`` is dated 2026-01-01 plus ``i`` hours.

    Raises:
        subprocess.CalledProcessError: git failed (``root`` already a repo with commits).
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q")
    _git(root, "symbolic-ref", "HEAD", "refs/heads/master")
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
        _git(root, "commit", "-q", "-m", subject, date=f"2026-01-01T{i % 24:02d}:00:00+00:00")
        shas.append(_git(root, "rev-parse", "HEAD"))
    _git(root, "tag", "step-0", shas[0], date="2026-01-01T00:00:00+00:00")
    return shas


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python examples/toy_history.py", description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="the folder to create the history in, e.g. /tmp/toyhist")
    parser.add_argument("--commits", type=int, default=9)
    parser.add_argument("--fault-at", type=int, default=6, help="the first commit that doubles the gradients")
    parser.add_argument("--broken-at", type=int, default=4, help="a commit that does not import (-1: none)")
    args = parser.parse_args(argv)
    if (args.repo / ".git").exists():
        print(f"error: {args.repo} already holds a git repository; give a new folder", file=sys.stderr)
        return 2
    make_repo(args.repo, args.commits, args.fault_at, None if args.broken_at < 0 else args.broken_at)
    print(_git(args.repo, "log", "--oneline", "--abbrev=10", "--decorate"))
    print(f"\nbisect it from the clone's root:\n  python -m sweep -m hydra/sweeper=bisect hydra.sweeper.repo={args.repo} "
          "hydra.sweeper.good=step-0 hydra.sweeper.bad=master engine.impl.torch=toyeng.Engine optimizer=sgd steps=6")
    return 0


if __name__ == "__main__":
    sys.exit(main())
