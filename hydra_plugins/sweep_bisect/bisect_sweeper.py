"""The ``bisect`` sweeper: the first commit of a library whose job fails where its
parent's passes.

A thin :class:`hydra.plugins.sweeper.Sweeper`; the work is in ``_core.py`` (plugin
discovery imports every module here whose name does not start with an underscore) and the
algorithm in :mod:`sweep.analysis.bisect`.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class BisectSweeper(Sweeper):
    """Bisects ``good..bad`` of the git checkout ``repo``: each probe is the command line's
    job (or grid) at one commit, made runnable by export (``runtime.pythonpath``) or by
    ``install`` into a venv per commit (``runtime.python``); writes ``bisect.json`` and
    ``bisect.md`` beside the probes' grid report.

    Arguments are the fields of ``config.BisectSweeperConf``.

    Raises:
        ValueError: ``repo``, ``good`` or ``bad`` not given.
    """

    def __init__(self, repo: Optional[str] = None, good: Optional[str] = None, bad: Optional[str] = None,
                 path: str = "", install: Optional[str] = None, cache: Optional[str] = None,
                 params: Optional[dict] = None) -> None:
        super().__init__()
        missing = [name for name, value in (("repo", repo), ("good", good), ("bad", bad)) if not value]
        if missing:
            raise ValueError("hydra/sweeper=bisect needs " + ", ".join(f"hydra.sweeper.{m}" for m in missing)
                             + " (a git checkout, the revision that passes, the one that fails)")
        self.repo, self.good, self.bad = str(repo), str(good), str(bad)
        self.path, self.install, self.cache = str(path or ""), install, cache
        self.params: dict = {}  # the default grid is not a probe's: the command line's overrides only
        self.hydra_context: Optional[HydraContext] = None
        self.config: Optional[DictConfig] = None
        self.launcher: Optional[Launcher] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: List[str]) -> List[Sequence[JobReturn]]:
        """Run the bisection; returns the JobReturns of every probe, in launch order."""
        from hydra_plugins.sweep_bisect._core import run_bisection

        return run_bisection(self, arguments)
