"""Hydra callbacks of a multirun: the claim on the sweep dir, progress after each job,
the report at the end.

Hydra turns callback exceptions into warnings; only :class:`SweepDirCallback` stops a
multirun (before its first job, with ``SystemExit``). The exit status of a finished
multirun is decided by ``sweep.__main__`` from :data:`OUTCOME`.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


def count_jobs(config: DictConfig) -> Optional[int]:
    """Jobs in the multirun (:func:`sweep.report.summary.planned_overrides`); ``None`` for
    sweepers other than Hydra's basic one."""
    from sweep.report.summary import planned_overrides

    planned = planned_overrides(config.hydra)
    return None if planned is None else len(planned)


CONSTANT: List[str] = []  # the overrides every job of this process's multirun has (its job lines leave them out)
SWEEP_SYNTAX = (",", "range(", "choice(", "glob(", "interval(", "tag(", "shuffle(", "sort(")


def constant_overrides(config: DictConfig) -> List[str]:
    """The overrides every job of the multirun has, in command-line order: with Hydra's
    basic sweeper those in every planned job's list (``planned_overrides``); with another
    sweeper (``isolate``, which chooses its jobs as it goes) the command line's own
    overrides that sweep nothing (no ``,`` or sweep function) and are not ``hydra.*``."""
    from sweep.report.summary import planned_overrides

    planned = planned_overrides(config.hydra)
    if planned:
        first = [str(o) for o in planned[0]]
        return [o for o in first if all(o in map(str, job) for job in planned[1:])] if len(planned) > 1 else []
    typed = [str(o) for o in (config.hydra.overrides.get("task") or [])]
    return [o for o in typed if not o.lstrip("+~").startswith("hydra") and "=" in o
            and not any(mark in o.partition("=")[2] for mark in SWEEP_SYNTAX)]


def launcher_missing(hydra_launcher: Any) -> Optional[str]:
    """Why Hydra's launcher (the ``hydra.launcher`` config) cannot run, in one line naming
    the fix: it cannot be loaded (what to install), or it submits to SLURM and this host
    has no ``srun``, or its time limit is not longer than SLURM's warning before it
    (``timeout_min``, ``signal_delay_s``), or the SLURM controller does not answer ``scontrol ping``
    (``sweep.launch.slurm.controller_problem``); ``None`` when it can run."""
    import importlib
    import shutil

    target = str(hydra_launcher.get("_target_", ""))
    module, _, name = target.rpartition(".")
    ours = module.startswith("hydra_plugins.sweep_launcher.")  # the submitit plugin's launchers, extended
    extra = " pip install '.[cluster]' (hydra-submitit-launcher)" if "submitit" in target or ours else " install it"
    try:
        loaded = importlib.import_module(module)
    except ImportError as exc:
        return f"the Hydra launcher {target} cannot be loaded ({exc});{extra}"
    if not hasattr(loaded, name):  # ours, without the plugin it extends
        return f"the Hydra launcher {target} cannot be loaded (hydra-submitit-launcher is not installed);{extra}"
    limit, delay = hydra_launcher.get("timeout_min"), hydra_launcher.get("signal_delay_s")
    if target.endswith("SlurmLauncher") and limit is not None and delay is not None and float(delay) >= 60 * float(limit):
        return (f"hydra.launcher.timeout_min={limit} min is not longer than hydra.launcher.signal_delay_s={delay} s, "
                "how long before the time limit SLURM warns a job: every job would be stopped as timed out at its "
                "start; give a longer timeout_min or a shorter signal_delay_s")
    if target.endswith("SlurmLauncher") and not shutil.which("srun"):
        return (f"the Hydra launcher {name} submits to SLURM, but this host has no srun/sbatch "
                "on PATH: run it on a SLURM login node, or use hydra/launcher=submitit_local on one machine")
    if target.endswith("SlurmLauncher"):
        from sweep.launch.slurm import controller_problem

        problem = controller_problem()
        if problem:
            return (f"the Hydra launcher {name} cannot reach the SLURM controller ({problem}): start slurmctld, "
                    "or point SLURM_CONF at your cluster's slurm.conf, or use hydra/launcher=submitit_local "
                    "on one machine")
    return None


def command_line(args: List[str]) -> str:
    """``python -m sweep ARGS`` quoted for a POSIX shell (pasteable as printed)."""
    return "python -m sweep " + shlex.join(args)


def resume_command(sweep_dir: Path, argv: Optional[List[str]] = None) -> str:
    """The full command that resumes the multirun in ``sweep_dir``: this command's
    arguments (``sys.argv``), the sweep dir, ``resume=true``."""
    args = [a for a in (sys.argv[1:] if argv is None else argv)
            if not a.startswith(("hydra.sweep.dir=", "resume="))]
    if "-m" not in args and "--multirun" not in args:
        args.insert(0, "-m")
    return command_line(args + [f"hydra.sweep.dir={sweep_dir}", "resume=true"])


class SweepDirCallback(Callback):
    """First at the start of a multirun, before anything is written: Hydra's launcher
    loads, and the sweep dir can be created, is not in use by another sweep and holds no
    other grid (``sweep.run.sweep_dir.claim``). Any of these failing stops the multirun with
    one line on stderr and exit status 2."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from sweep.errors import ConfigError
        from sweep.report.summary import planned_jobs, planned_overrides
        from sweep.run.sweep_dir import claim

        problem = launcher_missing(config.hydra.launcher)
        if problem:
            print(f"error: {problem}", file=sys.stderr, flush=True)
            sys.exit(2)
        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            previous = planned_jobs(sweep_dir) if sweep_dir.is_dir() else None
        except Exception:  # an unreadable multirun.yaml: no grid to compare with
            previous = None
        try:
            self.claim = claim(sweep_dir, planned_overrides(config.hydra), previous,
                               replace_grid=bool(config.get("replace_grid", False)),
                               resume=bool(config.get("resume", False)))
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            sys.exit(2)


class ProgressCallback(Callback):
    """After each job: jobs done (of the total when known), failures so far, elapsed time
    and an estimate of the time left: the mean wall time of the jobs done (the first left
    out once there are others: it also pays for starting shared launches; jobs a resumed
    sweep took from disk left out too) x jobs left.
    The job's own verdict line is printed by the job."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.total = count_jobs(config)
        CONSTANT[:] = constant_overrides(config)
        if CONSTANT:  # said once; each job's line then shows what it sweeps
            from sweep.report.terminal import fit

            print(fit(f"[every job] {' '.join(CONSTANT)}"), flush=True)
        self.done = self.failed = 0
        self.began = time.monotonic()
        self.durations: List[float] = []
        self.job_began: Optional[float] = None

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.job_began = time.monotonic()

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if not hasattr(self, "began"):  # not a multirun (or a launcher that runs jobs elsewhere)
            return
        record = getattr(job_return, "_return_value", None)
        self.done += 1
        self.failed += not (isinstance(record, dict) and record.get("status") == "ok")
        resumed = isinstance(record, dict) and bool(record.get("resumed"))  # (taken from disk: no time to count)
        if self.job_began is not None and not resumed:
            self.durations.append(time.monotonic() - self.job_began)
        print(self.line(time.monotonic() - self.began), flush=True)

    def line(self, elapsed: float) -> str:
        """The progress line after ``self.done`` jobs, ``elapsed`` s into the multirun."""
        line = f"[progress] {self.done}{f'/{self.total}' if self.total else ''} jobs, {self.failed} not ok, "
        line += f"{_minutes(elapsed)} elapsed"
        if self.total and self.done < self.total:
            steady = self.durations[1:] or self.durations
            if not steady:  # only resumed jobs so far: no estimate yet
                return line
            per_job = sum(steady) / len(steady)
            line += f", ~{_minutes(per_job * (self.total - self.done))} left"
        return line


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


class PoolCallback(Callback):
    """At the start of a multirun whose jobs run in this process, start what shared
    launches need before the first job asks (``sweep.run.pool.prestart``); they are stopped
    by :class:`SummaryCallback` before the report."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from sweep.run import pool

        if pool.runs_jobs_in_process(config.hydra.launcher):
            pool.prestart(config, config.hydra.sweep.dir)


ACTIVE: Optional["SummaryCallback"] = None  # the multirun of this process, for sweep.__main__
OUTCOME: Dict[str, Any] = {}  # "counts", "judged", "culprit" of the last report and "gate", for the exit status


class SummaryCallback(Callback):
    """Stop the sweep's shared launches (``sweep.run.pool``), then print the verdict and the
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
        OUTCOME["gate"] = bool(config.get("gate", False))
        ACTIVE = self

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        global ACTIVE
        from sweep.layout import SweepDir

        sweep_dir = Path(config.hydra.sweep.dir)
        if SweepDir(sweep_dir).job_dirs() or not (sweep_dir / "bisect.json").exists():
            self.report(sweep_dir)  # (a bisection that ran no probe has its answer and no grid)
        ACTIVE = None

    def report(self, sweep_dir: Path) -> None:
        from sweep.report.summary import write_report
        from sweep.report.terminal import fit
        from sweep.run import pool

        pool.stop_all()  # the launches end while the report is written
        report = write_report(sweep_dir, self.tablefmt, self.max_rows, outcome=OUTCOME)
        pool.close_all()
        headline, details = report.split("\n\n", 1)
        print("\n" + details, flush=True)  # the headline once, at the end, where the eye is (the findings above it)
        rerender = "python -m sweep.report " + shlex.quote(str(sweep_dir))
        # (the paths' line stays whole: it is copied into a shell)
        print(f"\n{fit(headline)}\nsummary: {sweep_dir / 'summary.md'} (re-render: {rerender})", flush=True)
