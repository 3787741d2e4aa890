"""``python -m sweep [-m] [overrides]``: Hydra entry point; the work is in ``sweep.job``.

A single run exits 1 unless its job passed the comparison; a multirun exits 0 once
every job has a result (their verdicts are in the summary table).
"""

import signal
import sys
from pathlib import Path
from typing import Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from sweep.schema import register_configs

CONF_DIR = str(Path(__file__).resolve().parent / "conf")  # the config tree ships inside the package

register_configs()


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> dict:
    """One job (``sweep.job.run``); returns its record as a dict (``sweep.records.JobRecord``),
    which Hydra hands to the callbacks and to sweepers as the job's return value."""
    from sweep import job, pool
    from sweep.layout import JobDir

    hc = HydraConfig.get()
    label = f"#{hc.job.num} " if hc.mode == RunMode.MULTIRUN else ""
    sweep_dir = hc.sweep.dir if hc.mode == RunMode.MULTIRUN else None
    record = job.run(
        cfg, hc.runtime.output_dir, overrides=list(hc.overrides.task), sweep_dir=sweep_dir,
        share_launches=pool.runs_jobs_in_process(hc.launcher),
    )
    print(job.summary_line(record, label), flush=True)
    if hc.mode == RunMode.RUN:
        print(f"result: {JobDir(hc.runtime.output_dir).result}", flush=True)
        if record.status != "ok":
            _RUN_FAILED.append(record.status)  # exit 1 in entry(), after Hydra's on_run_end callbacks (loggers)
    return record.to_dict()


_RUN_FAILED: list = []  # a single run whose job did not pass: entry() exits 1


_INTERRUPTED: list = []  # the signal that interrupted this process, once one did


def _interrupt(signum: int, frame: object) -> None:
    """Ctrl-C, SIGTERM (``kill``, ``timeout``, a scheduler's cancel) and SIGHUP (a closed
    terminal or SSH session): remembered, then ``KeyboardInterrupt``. Whatever exception
    the interrupt then turns into on its way out (e.g. inside Hydra's config composition),
    the command ends as an interrupt."""
    _INTERRUPTED.append(signal.Signals(signum).name)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _interrupted_exit(sweep_dir: Optional[Path]) -> None:
    from sweep.callbacks import resume_command

    hint = f"; to continue:\n  {resume_command(sweep_dir)}" if sweep_dir is not None else ""
    print(f"\ninterrupted: finished jobs keep their results{hint}", file=sys.stderr, flush=True)
    sys.exit(130)


def entry() -> None:
    """The command: Hydra's main with this project's exit statuses.

    A single run exits 0 if its job passed, else 1. A multirun exits 0 once every job has
    a result; 2 when no job could be judged (every job errored or timed out) or the sweep
    dir was refused; 130 when interrupted (with the command that resumes it).
    """
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    from sweep import callbacks
    from sweep.layout import SweepDir

    try:
        main()
    except SystemExit as exc:
        active = callbacks.ACTIVE
        if _INTERRUPTED:
            _interrupted_exit(active.sweep_dir if active is not None else None)
        # Hydra exits non-zero when the multirun stopped early (e.g. submitit raising on a
        # cancelled job): the report of what did finish, if any job started.
        if exc.code not in (0, None) and active is not None and SweepDir(active.sweep_dir).job_dirs():
            print("\nthe multirun stopped early; the report of the jobs so far:", file=sys.stderr)
            active.report(active.sweep_dir)
        raise
    except BaseException:
        if not _INTERRUPTED:
            raise
        # The running job already killed its processes and recorded itself as interrupted.
        active = callbacks.ACTIVE
        _interrupted_exit(active.sweep_dir if active is not None else None)
    if _RUN_FAILED:
        sys.exit(1)
    outcome = callbacks.OUTCOME
    if outcome and sum(outcome["counts"].values()) and not outcome["judged"]:
        print("error: no job of the sweep could be judged (see the reasons above)", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    entry()
