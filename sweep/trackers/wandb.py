"""``logger=wandb``: each job a Weights & Biases run, offline by default.

Runs go to ``<dir>/wandb/offline-run-*`` (``dir``: ``None`` = the sweep dir, a single
run: the run dir), grouped by the sweep (``group`` = the sweep dir's name) in project
``project``; upload later with ``wandb sync <dir>/wandb/offline-run-*``, or set
``hydra.callbacks.logger.mode=online``. Per job run (name ``job <num>``, job_type ``job``): config = the
overrides; history ``loss/standalone``, ``loss/distributed``, ``loss/difference`` (one
row per step); summary = the report's numbers and the verdict (``status``, ``reason``,
``drift``, ``notes``), and the plot as an image; the sweep's run (job_type ``sweep``):
``verdict``, ``jobs_<status>`` and the factor-effects plot. Extra: ``wandb``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

from sweep.trackers import JobLog, SweepLog, TrackerCallback, require


class WandbCallback(TrackerCallback):
    """``project``, ``mode`` (``offline``, ``online``, ``disabled``), ``dir`` (``None``:
    the sweep or run dir), ``entity`` (``None``: the account's default)."""

    MODULE = "wandb"
    EXTRA = "wandb"

    def __init__(self, project: str = "sweep", mode: str = "offline", dir: Optional[str] = None,
                 entity: Optional[str] = None) -> None:
        self.project, self.mode, self.dir, self.entity = project, mode, dir, entity

    def _init(self, wandb: Any, root: Path, **kwargs: Any) -> Any:
        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True)
        return wandb.init(project=self.project, entity=self.entity, mode=self.mode, dir=str(root),
                          settings=settings, reinit="create_new", **kwargs)

    def log_jobs(self, sweep: Optional[SweepLog], jobs: List[JobLog], where: Path) -> str:
        wandb = require("wandb", self.EXTRA)
        root = Path(self.dir) if self.dir else Path(where)
        root.mkdir(parents=True, exist_ok=True)
        group = sweep.name if sweep is not None else None
        for job in jobs:
            run = self._init(wandb, root, name=job.name, group=group, job_type="job", config=dict(job.params))
            try:
                steps = len(next(iter(job.series.values()), []))
                for step in range(steps):
                    run.log({name: values[step] for name, values in job.series.items()}, step=step)
                run.summary.update({**job.metrics, **job.verdict, "job": job.num})
                for plot in job.plots:
                    run.log({"plot": wandb.Image(str(plot))}, step=max(steps - 1, 0))
            finally:
                run.finish(exit_code=0 if job.ok else 1)
        if sweep is not None:
            run = self._init(wandb, root, name=f"sweep {sweep.name}", group=group, job_type="sweep")
            try:
                run.summary.update({"verdict": sweep.verdict, **{f"jobs_{k}": v for k, v in sweep.counts.items()}})
                for plot in sweep.plots:
                    run.log({plot.stem: wandb.Image(str(plot))})
            finally:
                run.finish()
        return str(root / "wandb")
