"""``python -m sweep [-m] [overrides]``: Hydra entry point; the work is in ``sweep.run.job``.

Exit statuses: see :func:`entry`.
"""

import os
import signal
import sys
from pathlib import Path
from typing import Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from sweep.config import CONF_DIR
from sweep.launch import interrupts
from sweep.config.schema import register_configs

register_configs()


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> dict:
    """One job (``sweep.run.job.run``); returns its record as a dict (``sweep.records.JobRecord``),
    which Hydra hands to the callbacks and to sweepers as the job's return value."""
    from sweep.layout import JobDir
    from sweep.run import job, pool
    from sweep.report.job_line import summary_line

    hc = HydraConfig.get()
    label = f"#{hc.job.num} " if hc.mode == RunMode.MULTIRUN else ""
    sweep_dir = hc.sweep.dir if hc.mode == RunMode.MULTIRUN else None
    single = hc.mode == RunMode.RUN
    # Shared launches: a multirun's jobs, where they run one after another in this process;
    # a single run's job and its tracing rerun, under the run's own dir.
    pools_dir = hc.runtime.output_dir if single else sweep_dir if pool.runs_jobs_in_process(hc.launcher) else None
    refused = job.refused_over_earlier(cfg, hc.runtime.output_dir) if single else None
    if refused:  # a typo must not cost the earlier run in this dir: nothing cleared, nothing written
        print(f"[  error] {refused}; nothing written: {hc.runtime.output_dir} keeps what it held", flush=True)
        _RUN_FAILED.append("error")
        return {"status": "error", "reason": refused}
    record = job.run(
        # (unresolved: an override's own ${...}, e.g. in runner.command, stays as typed)
        cfg, hc.runtime.output_dir, overrides=list(OmegaConf.to_container(hc.overrides.task, resolve=False)),
        sweep_dir=sweep_dir, pools_dir=pools_dir,
    )
    if single:
        pool.close_all()  # its launch ends with the job (a multirun's at the end of the sweep)
    from sweep.run.callbacks import CONSTANT

    from sweep.report.terminal import fit_job_line

    print(fit_job_line(summary_line(record, label, CONSTANT if label else ())), flush=True)
    if hc.mode == RunMode.RUN:
        paths = JobDir(hc.runtime.output_dir)
        print(f"result: {paths.result}", flush=True)
        from sweep.report.summary import job_headline

        from sweep.report.terminal import fit

        for line in job_headline(paths.path):
            print(fit(f"  {line}"), flush=True)
        if record.losses and record.comparison:
            from sweep.report.plots import plot_record

            try:
                print(f"plot: {plot_record(record, paths.plot)}", flush=True)
            except Exception as exc:  # matplotlib's own: the result stands without its plot
                print(f"plot: not drawn ({type(exc).__name__}: {exc})", flush=True)
        from sweep.report.summary import write_job_page

        try:
            print(f"page: {write_job_page(paths.path, summary_line(record))}", flush=True)
        except Exception as exc:  # the result stands without its page
            print(f"page: not written ({type(exc).__name__}: {exc})", flush=True)
        if record.status != "ok":
            _RUN_FAILED.append(record.status)  # exit 1 in entry(), after Hydra's on_run_end callbacks (loggers)
    from sweep.report.notes import text_of

    return record.to_dict(render=text_of)


_RUN_FAILED: list = []  # a single run whose job did not pass: entry() exits 1 (fail) or 2 (error, timeout)


def _interrupted_exit(sweep_dir: Optional[Path]) -> None:
    from sweep.run.callbacks import resume_command

    if sweep_dir is not None:
        print(f"\ninterrupted: finished jobs keep their results (their report: python -m sweep.report {sweep_dir}); "
              f"to continue:\n  {resume_command(sweep_dir)}", file=sys.stderr, flush=True)
    else:  # a single run: its result.json records the interruption; rerunning the command starts it again
        print("\ninterrupted: the run stopped (its result.json says so); run the same command again to rerun it",
              file=sys.stderr, flush=True)
    # Exit 130 for certain: the interpreter's own shutdown (joining threads, finalizers) can
    # meet the interrupt again and end the process by SIGINT (-2) instead. The exit handlers
    # (shared launches' clean-up) run first, as sys.exit would run them.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)


def entry() -> None:
    """The command (:func:`run_command`), quiet when its reader goes away: ``python -m sweep
    --help | head`` ends without a ``BrokenPipeError`` traceback (the recipe of Python's
    ``signal`` docs, "Note on SIGPIPE": the rest of the output goes to ``os.devnull``, exit 1)."""
    try:
        run_command()
        sys.stdout.flush()
    except SystemExit:
        _flush_or_drop()
        raise
    except BrokenPipeError:
        _drop_stdout()
        sys.exit(1)


def _flush_or_drop() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _drop_stdout()


def _drop_stdout() -> None:
    """Point stdout at ``os.devnull``: the interpreter's flush at exit then has nowhere to fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def run_command() -> None:
    """The command: Hydra's main with this project's exit statuses; ``explain [CODE]`` prints a
    finding's page (``sweep.report.explain``).

    A single run exits 0 if its job passed, 1 if it failed the comparison, 2 if it
    errored or timed out. A command line that does not compose (an unknown key, option
    or value type, any swept value included) or whose run dir cannot be created exits 2
    before Hydra starts, with one line (``sweep.run.preflight``). A multirun exits 0 once every job has a result (with
    ``gate=true``: 1 when any job is not ``ok`` or the verdict names a culprit); 2 when no
    job could be judged (every job errored or timed out) or the sweep dir was refused;
    130 when interrupted (with the command that resumes it).
    """
    interrupts.install()  # Ctrl-C, SIGTERM (kill, timeout, a scheduler's cancel), SIGHUP (a closed terminal)
    if "" not in sys.path and os.getcwd() not in sys.path:
        # The `sweep` command: engines and models named in the config may live in the
        # working directory; last on the path, it cannot shadow an installed package.
        sys.path.append(os.getcwd())
    if sys.argv[1:2] == ["explain"]:  # python -m sweep explain CODE: a finding's page
        from sweep.report import explain

        sys.exit(explain.main(sys.argv[2:]))
    from sweep.layout import SweepDir
    from sweep.run import callbacks, preflight

    from sweep.config.shorthands import expand

    sys.argv[1:] = expand(sys.argv[1:])  # compile=true -> compile.enabled=true
    error = preflight.check_command_line(sys.argv[1:], CONF_DIR)
    if error is not None:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    from sweep.config import compose_once

    compose_once.install()  # a multirun's check and its launcher compose each job once between them
    try:
        main()
    except SystemExit as exc:
        active = callbacks.ACTIVE
        if interrupts.RECEIVED:
            _interrupted_exit(active.sweep_dir if active is not None else None)
        # Hydra exits non-zero when the multirun stopped early (e.g. submitit raising on a
        # cancelled job): the report of what did finish, if any job started.
        if exc.code not in (0, None) and active is not None and SweepDir(active.sweep_dir).job_dirs():
            print("\nthe multirun stopped early; the report of the jobs so far:", file=sys.stderr)
            active.report(active.sweep_dir)
        raise
    except BaseException:
        if not interrupts.RECEIVED:
            raise
        # The running job already killed its processes and recorded itself as interrupted.
        active = callbacks.ACTIVE
        _interrupted_exit(active.sweep_dir if active is not None else None)
    if interrupts.RECEIVED:  # an interrupt whose raise was dropped (sweep.launch.interrupts) still ends as one
        active = callbacks.ACTIVE
        _interrupted_exit(active.sweep_dir if active is not None else None)
    if _RUN_FAILED:
        sys.exit(1 if _RUN_FAILED[0] == "fail" else 2)
    from sweep.report import bisect_report

    if bisect_report.STATE.get("status") in bisect_report.UNDECIDED:  # a bisection that named no commit
        print("error: the bisection named no first failing commit (see above)", file=sys.stderr)
        sys.exit(2)
    outcome = callbacks.OUTCOME
    if "counts" not in outcome:
        return
    if sum(outcome["counts"].values()) and not outcome["judged"]:
        print("error: no job of the sweep could be judged (see the reasons above)", file=sys.stderr)
        sys.exit(2)
    not_ok = sum(n for status, n in outcome["counts"].items() if status != "ok")
    if outcome.get("gate") and (not_ok or outcome.get("culprit")):
        print(f"gate: {not_ok} job(s) not ok" + ("; the verdict names a culprit" if outcome.get("culprit") else ""),
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    entry()
