"""The ``isolate`` sweeper: delta debugging between a failing and a passing config.

A thin :class:`hydra.plugins.sweeper.Sweeper`; the work is in ``_core.py`` (plugin
discovery imports every module here whose name does not start with an underscore, so
the heavy imports stay there) and the algorithm in :mod:`sweep.analysis.isolate`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

log = logging.getLogger(__name__)

PICKS = ("nearest", "farthest")


class IsolateSweeper(Sweeper):
    """Finds the smallest set of overrides whose change turns the passing config into a
    failing one (``sweep.analysis.isolate.ddmin``), launching each round's probes as one batch
    through the configured launcher and reading each job's verdict from its return value
    (the record of ``sweep.run.job.run``: ``status`` ok | fail | error | timeout).

    Arguments are the fields of ``config.IsolateSweeperConf``.

    Raises:
        ValueError: ``repeat < 1``, ``max_jobs < 1``, ``scout_batch < 1``, an unknown
            ``pick``, only one of ``failing`` / ``passing``, or a ``from_sweep`` that is no dir or holds no
            failing and passing job (``_core.from_sweep_rows``).
    """

    def __init__(
        self,
        failing: Optional[List[str]] = None,
        passing: Optional[List[str]] = None,
        from_sweep: Optional[str] = None,
        failing_job: Optional[int] = None,
        pick: str = "nearest",
        params: Optional[Dict[str, str]] = None,
        scout_batch: int = 2,
        context: bool = True,
        repeat: int = 1,
        max_jobs: Optional[int] = None,
    ) -> None:
        super().__init__()
        if (failing is None) != (passing is None):
            given, missing = ("failing", "passing") if passing is None else ("passing", "failing")
            raise ValueError(
                f"hydra/sweeper=isolate: hydra.sweeper.{given} is given without hydra.sweeper.{missing}: give both "
                f"endpoints ('hydra.sweeper.{missing}=[\"key=value\",...]'), or neither "
                "(hydra.sweeper.from_sweep=<a finished multirun dir>, or a grid: key=a,b)")
        if from_sweep is not None and not Path(str(from_sweep)).is_dir():
            raise ValueError(f"hydra.sweeper.from_sweep={from_sweep}: no such dir; give a finished multirun's dir "
                             "(e.g. outputs/multirun/2026-12-01_10-00-00)")
        if from_sweep is not None:
            from hydra_plugins.sweep_isolate._core import from_sweep_rows

            unusable = from_sweep_rows(str(from_sweep), failing_job)[3]
            if unusable:
                raise ValueError(unusable)
        if repeat < 1:
            raise ValueError(f"hydra.sweeper.repeat={repeat} must be >= 1")
        if max_jobs is not None and max_jobs < 1:
            raise ValueError(f"hydra.sweeper.max_jobs={max_jobs} must be >= 1 (or null: no limit)")
        if scout_batch < 1:
            raise ValueError(f"hydra.sweeper.scout_batch={scout_batch} must be >= 1")
        if pick not in PICKS:
            raise ValueError(f"hydra.sweeper.pick={pick!r}; allowed: {', '.join(PICKS)}")
        self.failing = None if failing is None else [str(x) for x in failing]
        self.passing = None if passing is None else [str(x) for x in passing]
        self.from_sweep = from_sweep
        self.failing_job = failing_job
        self.pick = pick
        self.params = dict(params or {})
        self.scout_batch = scout_batch
        self.context = context
        self.repeat = repeat
        self.max_jobs = max_jobs
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
        """Run the isolation; returns the JobReturns of every batch, in launch order."""
        from hydra_plugins.sweep_isolate._core import run_isolation

        return run_isolation(self, arguments)
