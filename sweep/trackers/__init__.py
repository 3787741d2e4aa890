"""Experiment trackers as Hydra callbacks: the ``logger`` config group.

``logger=mlflow``, ``logger=tensorboard``, ``logger=wandb`` (``sweep/config/conf/logger/``).
May import: ``sweep.report``, ``sweep.analysis``, ``sweep.config`` and the contracts at the top.

Each tracker logs one run per job: its overrides as params, its loss curves
(``loss/standalone``, ``loss/distributed``, ``loss/difference``, per step), its verdict
(``status``, ``reason``, ``drift``, ``notes``) and metrics (the report's row), and the
job's plot when the report drew one; plus one run (or record) for the sweep with the
verdict, the report files and the factor-effects plot. A sweep is logged at
``on_multirun_end``, after :class:`sweep.run.callbacks.SummaryCallback` has written the
report and its plots (Hydra calls ``on_multirun_end`` in reverse order of
``hydra.callbacks``, and the logger's yaml puts its callback first). Everything is read
back from the sweep dir (``sweep.report.summary.collect``), so jobs run by any Hydra launcher
(e.g. submitit, on other hosts) are logged alike. A single run is logged at
``on_run_end``.

Each library is an optional extra, imported only when its callback starts: a missing
one stops the command before the first job with one line naming the extra, exit status 2.
"""

from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

#: the report-row metrics logged as numbers (``None`` and non-numbers are left out)
NUMERIC_METRICS = (
    "first_fail_step", "n_fail", "max_abs_diff", "max_rel_diff", "mean_signed_diff", "step0_diff",
    "runs_low_pct", "trend", "final_ratio", "wall_s",
)
#: the verdict, logged as text (tags, summary fields)
VERDICT_KEYS = ("status", "reason", "drift", "notes")


@dataclass
class JobLog:
    """What a tracker logs of one job.

    ``num``: the job number (0 for a single run); ``name``: ``"job <num>"``; ``params``:
    the overrides, key -> value (str); ``series``: metric name -> one float per step
    (``loss/standalone``, ``loss/distributed``, ``loss/difference``; empty for a job
    without losses); ``metrics``: name -> float (:data:`NUMERIC_METRICS` that are set,
    and ``passed`` 1.0/0.0 for a judged job); ``verdict``: :data:`VERDICT_KEYS` -> str
    (``""`` when unset); ``artifacts``: files to attach (``result.json``, ``job.yaml``,
    the job's plot); ``plots``: the PNGs among them; ``job_dir``.
    """

    num: int
    name: str
    params: Dict[str, str]
    series: Dict[str, List[float]]
    metrics: Dict[str, float]
    verdict: Dict[str, str]
    artifacts: List[Path] = field(default_factory=list)
    plots: List[Path] = field(default_factory=list)
    job_dir: Optional[Path] = None

    @property
    def ok(self) -> bool:
        return self.verdict.get("status") == "ok"


@dataclass
class SweepLog:
    """What a tracker logs of the sweep itself: ``name`` (the sweep dir's name), ``dir``,
    ``verdict`` (the report's first paragraph), ``counts`` (status -> jobs), the report
    files and the factor-effects plot (``artifacts``, ``plots``)."""

    name: str
    dir: Path
    verdict: str
    counts: Dict[str, int]
    artifacts: List[Path] = field(default_factory=list)
    plots: List[Path] = field(default_factory=list)


def require(module: str, extra: str) -> Any:
    """``import module``, or :class:`ImportError` whose message is one line naming the
    extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"logger={extra} needs {module}, which is not installed ({exc}): pip install 'sweep-numerics[{extra}]' "
            f"(in a checkout: pip install -e '.[{extra}]')"
        ) from None


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or value is None:
        return None if value is None else float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def job_log(row: Dict[str, Any], job_dir: Path, plot_dir: Optional[Path] = None) -> JobLog:
    """A :class:`JobLog` from a row of :func:`sweep.report.summary.collect` (whose ``result`` is
    the job's :class:`sweep.records.JobRecord` or ``None``) and the job's dir; the job's
    plot is ``plot_dir/job_<num>.png`` when it exists."""
    from sweep.io import read_floats
    from sweep.layout import JobDir

    result = row.get("result")
    series: Dict[str, List[float]] = {}
    if result is not None and result.losses:
        ref = read_floats(result.losses["standalone"])
        got = read_floats(result.losses["distributed"])
        series = {"loss/standalone": ref, "loss/distributed": got,
                  "loss/difference": [g - r for g, r in zip(got, ref)]}
    metrics = {k: v for k in NUMERIC_METRICS if (v := _number(row.get(k))) is not None}
    if row.get("status") in ("ok", "fail"):
        metrics["passed"] = 1.0 if row["status"] == "ok" else 0.0
    verdict = {k: "" if row.get(k) is None else str(row[k]) for k in VERDICT_KEYS}
    job = JobDir(job_dir)
    artifacts = [p for p in (job.result, job.config) if p.exists()]
    plots = [p for p in ([plot_dir / f"job_{row['job']}.png"] if plot_dir else []) if p.exists()]
    return JobLog(num=int(row["job"]), name=f"job {row['job']}", params=dict(row["overrides"]), series=series,
                  metrics=metrics, verdict=verdict, artifacts=artifacts + plots, plots=plots, job_dir=Path(job_dir))


class TrackerCallback(Callback):
    """The common part of every tracker: when to log and what (subclasses say where).

    Subclasses set :attr:`MODULE` and :attr:`EXTRA` and implement :meth:`log_jobs`
    (``(SweepLog or None, [JobLog])``: ``None`` for a single run). A failure while
    logging is one warning line (``warning: logger=<extra> could not log ...``); the
    sweep's results and exit status are unaffected.
    """

    MODULE = ""
    EXTRA = ""

    def modules(self) -> List[str]:
        """The modules this tracker needs as configured (checked before the first job)."""
        return [self.MODULE]

    def _check(self) -> None:
        try:
            for module in self.modules():
                require(module, self.EXTRA)
        except ImportError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            sys.exit(2)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check()

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check()

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        from sweep.layout import JobDir
        from sweep.report.summary import collect

        job_dir = Path(config.hydra.runtime.output_dir)
        if not JobDir(job_dir).result.exists():
            return
        with tempfile.TemporaryDirectory() as tmp:  # the report's row of this one job
            (Path(tmp) / "0").mkdir()
            shutil.copy(JobDir(job_dir).result, JobDir(Path(tmp) / "0").result)
            row = collect(tmp)[0]
        self._log(None, [job_log(row, job_dir)], job_dir)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from sweep.report.findings import attribute
        from sweep.layout import SweepDir
        from sweep.report.summary import collect

        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.is_dir():
            return
        layout = SweepDir(sweep_dir)
        rows = collect(sweep_dir)
        att = attribute(rows)
        jobs = [job_log(row, sweep_dir / str(row["job"]), layout.plots) for row in rows if row["result"] is not None]
        effects = layout.plots / "factor_effects.png"
        sweep = SweepLog(
            name=sweep_dir.name, dir=sweep_dir, verdict=att["verdict"], counts=dict(att["counts"]),
            artifacts=[p for p in (layout.summary(s) for s in ("md", "csv", "json")) if p.exists()],
            plots=[effects] if effects.exists() else [],
        )
        self._log(sweep, jobs, sweep_dir)

    def _log(self, sweep: Optional[SweepLog], jobs: List[JobLog], where: Path) -> None:
        try:
            target = self.log_jobs(sweep, jobs, where)
        except Exception as exc:  # a tracker never fails the sweep; say why in one line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            print(f"warning: logger={self.EXTRA} could not log {where}: {type(exc).__name__}: {first}",
                  file=sys.stderr, flush=True)
            return
        print(f"logger={self.EXTRA}: {len(jobs)} job(s) logged to {target}", flush=True)

    def log_jobs(self, sweep: Optional[SweepLog], jobs: List[JobLog], where: Path) -> str:
        """Log ``jobs`` (grouped under ``sweep``, or one single run when ``None``);
        ``where`` is the sweep dir (or the run dir). Returns where they went, for the
        line printed afterwards."""
        raise NotImplementedError
