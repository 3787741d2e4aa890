"""``python -m sweep [-m] [overrides]``: Hydra entry point; the work is in ``sweep.job``.

A single run exits 1 unless its job passed the comparison; a multirun exits 0 once
every job has a result (their verdicts are in the summary table).
"""

import signal
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from sweep.schema import register_configs

CONF_DIR = str(Path(__file__).resolve().parent / "conf")  # the config tree ships inside the package

register_configs()


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM (``kill``, ``timeout``, a scheduler's cancel) and SIGHUP (a closed terminal
    or SSH session) take the Ctrl-C path: the running job kills its launcher's processes
    and records itself as interrupted."""
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


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
            sys.exit(1)
    return record.to_dict()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)  # the terminal or SSH session went away
    from sweep import callbacks

    try:
        main()
    except SystemExit as exc:
        # Hydra exits non-zero when the multirun stopped early (e.g. submitit raising on a
        # cancelled job): the report of what did finish, before leaving.
        if exc.code not in (0, None) and callbacks.ACTIVE is not None:
            print("\nthe multirun stopped early; the report of the jobs so far:", file=sys.stderr)
            callbacks.ACTIVE.report(callbacks.ACTIVE.sweep_dir)
        raise
    except KeyboardInterrupt:
        # The running job already killed its processes and recorded itself as interrupted.
        active = callbacks.ACTIVE
        where = f" hydra.sweep.dir={active.sweep_dir}" if active is not None else ""
        print(
            "\ninterrupted: finished jobs keep their results"
            + (f"; continue with the same command plus{where} resume=true" if where else ""),
            file=sys.stderr,
        )
        sys.exit(130)
