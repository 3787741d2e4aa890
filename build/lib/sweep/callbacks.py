"""Hydra callbacks of a multirun: progress after each job, the report at the end.

Hydra turns callback exceptions into warnings, so these never decide the exit
status; they only report what the jobs wrote.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


def count_jobs(config: DictConfig) -> Optional[int]:
    """Jobs in the multirun (:func:`sweep.summary.planned_overrides`); ``None`` for
    sweepers other than Hydra's basic one."""
    from sweep.summary import planned_overrides

    planned = planned_overrides(config.hydra)
    return None if planned is None else len(planned)


class ProgressCallback(Callback):
    """After each job: jobs done (of the total when known), failures so far, elapsed time
    and an estimate of the time left (mean job time so far x jobs left). The job's own
    verdict line is printed by the job."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.total = count_jobs(config)
        self.done = self.failed = 0
        self.began = time.monotonic()

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if not hasattr(self, "began"):  # not a multirun (or a launcher that runs jobs elsewhere)
            return
        record = getattr(job_return, "_return_value", None)
        self.done += 1
        self.failed += not (isinstance(record, dict) and record.get("status") == "ok")
        elapsed = time.monotonic() - self.began
        line = f"[progress] {self.done}{f'/{self.total}' if self.total else ''} jobs, {self.failed} not ok, "
        line += f"{_minutes(elapsed)} elapsed"
        if self.total and self.done < self.total:
            line += f", ~{_minutes(elapsed / self.done * (self.total - self.done))} left"
        print(line, flush=True)


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


class PoolCallback(Callback):
    """At the start of a multirun whose jobs run in this process, start what shared
    launches need before the first job asks (``sweep.pool.prestart``); they are stopped
    by :class:`SummaryCallback` before the report."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from sweep import pool

        if pool.runs_jobs_in_process(config.hydra.launcher):
            pool.prestart(config, config.hydra.sweep.dir)


ACTIVE: Optional["SummaryCallback"] = None  # the multirun of this process, for sweep.__main__


class SummaryCallback(Callback):
    """Stop the sweep's shared launches (``sweep.pool``), then print the verdict and the
    tables (each cut after ``max_rows`` rows, ``None``: all) and write
    ``summary.{md,csv,json}`` and ``plots/`` into ``hydra.sweep.dir``.

    When the multirun stops early (a launcher such as submitit raises on a cancelled
    job, so Hydra never calls ``on_multirun_end``), ``sweep.__main__`` calls
    :meth:`report` of :data:`ACTIVE` itself: jobs without a result are listed as missing.
    """

    def __init__(self, tablefmt: str = "simple", max_rows: Optional[int] = 40) -> None:
        self.tablefmt = tablefmt
        self.max_rows = max_rows
        self.sweep_dir: Optional[Path] = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global ACTIVE
        self.sweep_dir = Path(config.hydra.sweep.dir)
        ACTIVE = self

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        global ACTIVE
        self.report(Path(config.hydra.sweep.dir))
        ACTIVE = None

    def report(self, sweep_dir: Path) -> None:
        from sweep import pool
        from sweep.summary import write_report

        pool.close_all()
        report = write_report(sweep_dir, self.tablefmt, self.max_rows)
        print("\n" + report, flush=True)
        verdict = report.split("\n\n", 1)[0]  # the report's first paragraph, again where the eye is
        print(f"\n{verdict}\nsummary: {sweep_dir / 'summary.md'} (re-render: python -m sweep.summary {sweep_dir})",
              flush=True)
