"""A git history of a small engine package, ``toyeng``, for the bisect sweeper's tests: the
example the docs bisect (``examples/toy_history.py``, one implementation), with this module's
defaults (no commit that does not import unless asked)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import List, Optional

_SPEC = importlib.util.spec_from_file_location(
    "toy_history_example", Path(__file__).resolve().parents[2] / "examples" / "toy_history.py")
example = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(example)


def make_repo(root: Path, n: int = 8, fault_at: int = 5, broken_at: Optional[int] = None,
              packaged: bool = False) -> List[str]:
    """``examples/toy_history.make_repo``: a repo at ``root`` with ``n`` commits; returns
    their shas, oldest first (see there)."""
    return example.make_repo(root, n, fault_at, broken_at, packaged)
