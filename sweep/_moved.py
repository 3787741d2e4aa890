"""Module paths that moved when the package was laid out in wings (config, run, launch,
analysis, report): each old path still imports, as the module at its new path, with a
``DeprecationWarning`` naming the new one, and ``python -m OLD`` still runs.

One table, one import hook (a :pep:`451` meta path finder) instead of a file per old
path, so the package's top level shows its wings, not their former rooms.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any, Optional, Sequence

# old dotted path -> new dotted path
MOVED = {
    "sweep.schema": "sweep.config.schema",
    "sweep.enums": "sweep.config.enums",
    "sweep.factories": "sweep.config.factories",
    "sweep.data": "sweep.models.data",
    "sweep.job": "sweep.run.job",
    "sweep.pool": "sweep.run.pool",
    "sweep.cluster": "sweep.run.cluster",
    "sweep.sweep_dir": "sweep.run.sweep_dir",
    "sweep.baseline": "sweep.run.baseline",
    "sweep.callbacks": "sweep.run.callbacks",
    "sweep.forkserver": "sweep.launch.forkserver",
    "sweep.topology": "sweep.launch.topology",
    "sweep.train.fork_launch": "sweep.launch.fork_launch",
    "sweep.compare": "sweep.analysis.compare",
    "sweep.trace": "sweep.analysis.trace",
    "sweep.attribution": "sweep.analysis.attribution",
    "sweep.isolate": "sweep.analysis.isolate",
    "sweep.summary": "sweep.report.summary",
    "sweep.plots": "sweep.report.plots",
    "sweep.junit": "sweep.report.junit",
    "sweep.against": "sweep.report.against",
    "sweep.frame": "sweep.report.frame",
    "sweep.isolate_report": "sweep.report.isolate_report",
    "sweep.html_report": "sweep.report.page",
    "sweep.golden": "sweep.report.golden",
    "sweep.train.torch_observe": "sweep.train.observers.module_trace",
}


def _warn(old: str, new: str, stacklevel: int) -> None:
    warnings.warn(f"{old} moved to {new}; import {new} instead (the old path goes in a later release)",
                  DeprecationWarning, stacklevel=stacklevel)


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new path (the same module object)."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new
        self._spec: Any = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        _warn(self.old, self.new, stacklevel=2)
        module = importlib.import_module(self.new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._spec  # the import system set the old path's spec; keep the real one

    def get_code(self, fullname: str) -> Any:
        """``python -m OLD``: the new module's code (runpy asks the loader for it)."""
        print(f"note: python -m {self.old} is now python -m {self.new}", file=sys.stderr)
        spec = importlib.util.find_spec(self.new)
        return spec.loader.get_code(self.new)  # type: ignore[union-attr]


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of :data:`MOVED`; every other name is left to the next finder."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Any = None) -> Any:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(fullname, new))


def install() -> None:
    """Put :class:`MovedFinder` first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedFinder())
