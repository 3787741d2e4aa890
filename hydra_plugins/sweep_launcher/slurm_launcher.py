"""hydra-submitit-launcher's SLURM launcher, waiting for every job and recording how each
ended (``hydra/launcher=slurm``, ``sweep/config/conf/hydra/launcher/slurm.yaml``). Hydra
instantiates a launcher only from the ``hydra_plugins`` namespace, hence its place.

The plugin's ``SlurmLauncher`` submits the jobs as one job array and then reads each
job's result in turn; the first job that ended without one (time limit, ``scancel``, a
failed node) raises from submitit and stops the multirun, and without SLURM accounting
(``sacct``) such a job is never seen to end at all: submitit waits for it forever.
:class:`SweepSlurmLauncher` submits exactly as the plugin does (:meth:`_submit`, its
parameters mapped the same way), then waits for all jobs itself (:meth:`_wait`): a job
is over when submitit's result file appears or when SLURM says its state is final
(``sweep.launch.slurm.job_states``: ``squeue``, then ``sacct``). A job that ended without
its result gets a ``result.json`` in its job dir, ``timeout`` for SLURM's ``TIMEOUT`` and
``error`` for any other state, its reason naming the SLURM job, the state and the node
(``sweep.launch.slurm.JobState.ending``), so the report lists it with its cause and
``resume=true`` runs it again; the other jobs go on and the sweep ends with its report.
A sweep interrupted while it waits (Ctrl-C, SIGTERM) cancels its jobs that are still queued
or running (:func:`cancel_all`) before it ends.

In the job process (:meth:`__call__`), SLURM's warning signal before the time limit
(``SIGUSR2``, ``signal_delay_s`` before it) raises ``sweep.errors.SchedulerTimeLimit``: the job
stops its ranks and records itself as ``timeout`` with its logs, instead of submitit's
default (requeue the job, which would start it over, or leave it to be killed).
Pre-emption (the same signal well before the time limit) keeps submitit's requeue, and so
does a time-out where ``max_num_timeout`` > 0 asks for requeues.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
except ImportError:  # without the cluster extra Hydra's discovery still imports this module: no launcher here
    SlurmLauncher = None

log = logging.getLogger(__name__)
POLL_S = (1.0, 15.0)  # result files: every POLL_S[0] s; the queue (squeue): from 1 s, doubling, up to POLL_S[1] s
UNSTARTABLE_S = 60.0  # a job pending this long for a reason that does not clear by itself is cancelled


class _Lines:
    """The lines a basic launcher's callbacks print after each job (its verdict line, then a
    progress line), printed here as each SLURM job's result arrives: the callbacks run in the
    job process, so they print into its SLURM log, not on the terminal that waits."""

    def __init__(self, total: int, nums: Dict[str, int], dir_of: Callable[[str], Path],
                 constant: Sequence[str] = ()) -> None:
        self.total, self.nums, self.dir_of, self.constant = total, nums, dir_of, list(constant)
        self.count = self.failed = 0
        self.began = time.monotonic()
        self.said: set = set()  # the jobs whose lines were printed

    def done(self, job_id: str) -> None:
        """A job whose result file appeared: its line from its ``result.json``, then progress."""
        from sweep.errors import RecordError
        from sweep.layout import JobDir
        from sweep.records import JobRecord
        from sweep.report.job_line import summary_line
        from sweep.report.terminal import fit_job_line

        self.said.add(job_id)
        try:
            record = JobRecord.read(JobDir(self.dir_of(job_id)).result)
        except (OSError, RecordError):
            record = None
        if record is not None:
            print(fit_job_line(summary_line(record, f"#{self.nums[job_id]} ", self.constant)), flush=True)
        self._progress(record is None or record.status != "ok")

    def ended(self, job_id: str) -> None:
        """A job SLURM ended without its result (its record written by ``record_ending``; the
        warning before it gave the reason), unless its line was printed already."""
        if job_id not in self.said:
            self.said.add(job_id)
            self._progress(True)

    def _progress(self, failed: bool) -> None:
        self.count += 1
        self.failed += failed
        elapsed = time.monotonic() - self.began
        print(f"[progress] {self.count}/{self.total} jobs, {self.failed} not ok, "
              f"{int(elapsed // 60)}m{int(elapsed % 60):02d}s elapsed (SLURM)", flush=True)


def _job_dir(launcher: Any, overrides: Sequence[str], num: int) -> Path:
    """The job dir Hydra gives job ``num`` (``hydra.sweep.dir``/``hydra.sweep.subdir``)."""
    from omegaconf import open_dict

    cfg = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, list(overrides))
    with open_dict(cfg.hydra.job):
        cfg.hydra.job.num = num
    return Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)


def record_ending(job_dir: Path, overrides: Sequence[str], status: str, reason: str,
                  slurm: Dict[str, Any]) -> Dict[str, Any]:
    """Write ``job_dir/result.json`` for a job that ended without its result; returns it
    as a dict. A record the job wrote itself is kept when it is complete (``ok``/``fail``:
    killed after writing it) and otherwise given this ``status`` and ``reason``, its
    own reason kept after it."""
    from sweep.errors import RecordError
    from sweep.layout import JobDir
    from sweep.records import JobRecord

    path = JobDir(job_dir).result
    try:
        record = JobRecord.read(path) if path.exists() else None
    except (OSError, RecordError):
        record = None
    if record is not None and record.judged:
        record.slurm = dict(record.slurm or {}, **slurm)
    else:
        own = f"; the job's own record said: {record.reason}" if record is not None and record.reason else ""
        record = record or JobRecord(overrides=list(overrides))
        record.status, record.reason = status, reason + own
        record.slurm = dict(record.slurm or {}, **slurm)
    job_dir.mkdir(parents=True, exist_ok=True)
    record.write(path)
    return record.to_dict()


class _Recording:
    """The plugin's SLURM launcher: submit as it does, wait for every job, record how each
    ended (module docstring)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:  # in the job process, on the job's first node
        self._on_time_limit()
        return super().__call__(*args, **kwargs)

    def _on_time_limit(self) -> None:
        """Turn SLURM's warning signal before the time limit into ``SchedulerTimeLimit``
        (module docstring); submitit's handler stays for pre-emption."""
        from sweep.errors import SchedulerTimeLimit

        if self.params.get("max_num_timeout"):  # the user asked for requeues after a time-out: submitit's
            return
        usr = getattr(signal, "SIGUSR2")
        submitit_handler = signal.getsignal(usr)
        limit, delay = self.params.get("timeout_min"), self.params.get("signal_delay_s")

        def handler(signum: int, frame: Any) -> None:
            timed_out = getattr(getattr(submitit_handler, "__self__", None), "has_timed_out", lambda: True)
            if timed_out():
                raise SchedulerTimeLimit(
                    f"SLURM time limit: the job had hydra.launcher.timeout_min={limit} min and SLURM's warning "
                    f"before it (SIGUSR2, due hydra.launcher.signal_delay_s={delay} s ahead) stopped it")
            if callable(submitit_handler):
                submitit_handler(signum, frame)

        signal.signal(usr, handler)

    def executor(self) -> Any:
        """submitit's executor of this launcher's jobs, its parameters mapped as the plugin's
        ``launch`` maps them, with two changes for a job process that runs in the batch
        script (``use_srun: false``): the script ``exec``s Python, so that the job process
        is the batch shell, and SLURM's warning signal goes to that shell
        (``--signal=B:USR2@signal_delay_s``; without ``B:`` SLURM signals only srun steps:
        the job process would never see it, and a job's own srun step on several nodes
        would be killed by it). ``additional_parameters.signal`` set by the user wins."""
        import shlex
        import sys

        import submitit
        from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
        from omegaconf import OmegaConf

        specific_init_keys = {"max_num_timeout"}
        init_params = {"folder": self.params["submitit_folder"],
                       f"{self._EXECUTOR}_python": f"exec {shlex.quote(sys.executable)}"}
        init_params.update({f"{self._EXECUTOR}_{k}": v for k, v in self.params.items() if k in specific_init_keys})
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init_params)
        baseparams = set(OmegaConf.structured(BaseQueueConf).keys())
        params = {
            k if k in baseparams else f"{self._EXECUTOR}_{k}": v
            for k, v in self.params.items() if k not in specific_init_keys | {"submitit_folder"}
        }
        if self.params.get("signal_delay_s") is not None:
            extra = dict(self.params.get("additional_parameters") or {})
            extra.setdefault("signal", f"B:USR2@{self.params['signal_delay_s']}")
            params[f"{self._EXECUTOR}_additional_parameters"] = extra
        executor.update_parameters(**params)
        return executor

    def _submit(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> List[Any]:
        """The plugin's ``launch`` up to the submission: :meth:`executor`, the sweep dir,
        then ``map_array``; returns submitit's jobs."""
        from hydra.core.singleton import Singleton
        from hydra.core.utils import filter_overrides

        assert self.config is not None
        executor = self.executor()
        log.info(f"Submitit '{self._EXECUTOR}' sweep output dir : {self.config.hydra.sweep.dir}")
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
        params = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            params.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        return executor.map_array(self, *zip(*params))

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[Any]:
        from hydra.core.utils import JobReturn, JobStatus

        jobs = self._submitted(job_overrides, initial_job_idx)
        log.info(f"SLURM jobs: {', '.join(j.job_id for j in jobs)}")
        nums = {job.job_id: num for num, job in enumerate(jobs, start=initial_job_idx)}
        overrides_of = {job.job_id: list(o) for job, o in zip(jobs, job_overrides)}
        dirs: Dict[str, Path] = {}

        def dir_of(job_id: str) -> Path:  # (composed when asked: a config each)
            if job_id not in dirs:
                dirs[job_id] = _job_dir(self, overrides_of[job_id], nums[job_id])
            return dirs[job_id]

        shared = set.intersection(*(set(o) for o in job_overrides)) if len(job_overrides) > 1 else set()
        lines = _Lines(len(jobs), nums, dir_of, [o for o in job_overrides[0] if o in shared] if shared else [])
        try:
            ended = self._wait(jobs, lines)
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM: the sweep's jobs go with it (resume=true runs them again)
            cancel_all(jobs)
            raise
        returned = {job.job_id: _returned(job) for job in jobs if job.job_id not in ended}
        # A job that returned without a complete record may still have been ended by SLURM: at its time
        # limit or on scancel SLURM sends SIGTERM to every process of the job, its launcher dies of it, and
        # the job process (which submitit keeps alive through SIGTERM) records that death and returns.
        unsure = [job_id for job_id, value in returned.items() if not _complete(value)]
        ended.update({job_id: state for job_id, state in _final_states(unsure).items() if state.state != "COMPLETED"})
        outcomes = []
        for num, (job, overrides) in enumerate(zip(jobs, job_overrides), start=initial_job_idx):
            state, value = ended.get(job.job_id), returned.get(job.job_id)
            if state is None and isinstance(value, JobReturn):
                outcomes.append(value)
                continue
            if state is not None:
                status, reason = state.ending()
                log.warning(f"{status}: {reason}")
                cause = (status, reason, {"job_id": job.job_id, "state": state.state, "nodes": state.nodes})
            else:
                cause = (*value, {"job_id": job.job_id})
            job_dir = dir_of(job.job_id)
            if state is not None:  # (the job process never said: the partition it was given to)
                cause[2]["partition"] = self.params.get("partition")
            outcomes.append(JobReturn(overrides=list(overrides), working_dir=str(job_dir), status=JobStatus.COMPLETED,
                                      _return_value=record_ending(job_dir, list(overrides), *cause)))
            lines.ended(job.job_id)
        return outcomes

    def _submitted(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> List[Any]:
        """:meth:`_submit`, where ``sbatch`` refusing the jobs (an unknown partition, account or
        QOS) is one line and exit 2, as any other input the command refuses
        (``docs/exit-codes.md``); submitit's traceback is not the user's."""
        try:
            return self._submit(job_overrides, initial_job_idx)
        except Exception as exc:
            said = " ".join(str(exc).split())
            if "sbatch" not in said:
                raise
            import sys

            print(f"error: SLURM refused the jobs ({said[:400]}): check hydra.launcher.partition, account, qos and "
                  "the resources asked (sinfo lists the partitions)", file=sys.stderr, flush=True)
            sys.exit(2)

    def _wait(self, jobs: List[Any], lines: Any = None) -> Dict[str, Any]:
        """Wait until every job's result file exists or SLURM says it is over; returns the
        SLURM state of those over without a result file, by job id. A job SLURM holds pending
        for a reason that does not clear by itself (:data:`sweep.launch.slurm.UNSTARTABLE`) for
        :data:`UNSTARTABLE_S` s is cancelled and counts as over. An interrupt that Python dropped
        (``sweep.launch.interrupts``) is raised again at every poll. ``lines``: a :class:`_Lines`
        told of each job that wrote its result."""
        from sweep.launch import interrupts, slurm

        waiting = {job.job_id: job for job in jobs}
        ended: Dict[str, Any] = {}
        stuck: Dict[str, float] = {}  # since when a job has been pending for a reason that does not clear
        pause, ask_at = POLL_S[0], time.monotonic()
        while waiting:
            interrupts.check()
            for job_id in [j for j, job in waiting.items() if job.paths.result_pickle.exists()]:
                del waiting[job_id]
                if lines is not None:
                    lines.done(job_id)
            if waiting and time.monotonic() >= ask_at:  # the queue less and less often; the files every second
                for job_id, state in slurm.job_states(waiting).items():
                    if state.state == "PENDING" and state.reason in slurm.UNSTARTABLE:
                        since = stuck.setdefault(job_id, time.monotonic())
                        if time.monotonic() - since >= UNSTARTABLE_S:
                            waiting[job_id].cancel(check=False)
                            ended[job_id] = state
                            del waiting[job_id]
                        continue
                    if state.over:
                        # the result file is written just before the job ends: a last look, on a slow shared
                        # file system too
                        if not _appears(waiting[job_id].paths.result_pickle, seconds=10.0):
                            ended[job_id] = state
                        del waiting[job_id]
                pause = min(pause * 2, POLL_S[1])
                ask_at = time.monotonic() + pause
            if waiting:
                time.sleep(POLL_S[0])
        return ended


def cancel_all(jobs: List[Any]) -> List[str]:
    """``scancel`` every one of ``jobs`` (submitit's) that SLURM does not hold as over: a sweep
    stopped while it waits takes its jobs with it, so that none holds its nodes to its time limit
    and a later ``resume=true`` never trains beside one into the same job dir. A running job's
    process gets SLURM's SIGTERM and records itself. Returns the ids cancelled (logged)."""
    from sweep.launch import slurm

    states = slurm.job_states([job.job_id for job in jobs])
    cancelled = []
    for job in jobs:
        state = states.get(job.job_id)
        if state is not None and state.over:
            continue
        try:
            job.cancel(check=False)
        except Exception as exc:  # (scancel missing or refused): said, the others still cancelled
            log.warning(f"scancel {job.job_id} failed: {exc}")
            continue
        cancelled.append(job.job_id)
    if cancelled:
        log.warning(f"cancelled the sweep's SLURM jobs still queued or running: {', '.join(cancelled)}")
    return cancelled


def _returned(job: Any) -> Any:
    """Submitit's result of a job that wrote one: Hydra's ``JobReturn``, or ``(status,
    reason)`` when the job process failed outside the job (submitit's error) or the task
    raised."""
    from hydra.core.utils import JobStatus

    try:
        result = job.results()[0]
    except Exception as exc:
        return "error", f"SLURM job {job.job_id}: the job process failed: {' '.join(str(exc).split())[:600]}"
    if result.status == JobStatus.FAILED:
        return "error", (f"SLURM job {job.job_id}: the job raised {type(result._return_value).__name__}: "
                         f"{result._return_value}")
    return result


def _complete(value: Any) -> bool:
    """A returned job whose record is complete (``ok``/``fail``)."""
    record = getattr(value, "_return_value", None)
    return isinstance(record, dict) and record.get("status") in ("ok", "fail")


def _final_states(job_ids: List[str], timeout_s: float = 120.0) -> Dict[str, Any]:
    """SLURM's final state of each of ``job_ids``, waiting up to ``timeout_s`` for those
    still ending (``COMPLETING``: SLURM waits ``KillWait`` for the job's processes); jobs
    that SLURM no longer knows, or that are not over by then, are left out."""
    from sweep.launch import slurm

    found: Dict[str, Any] = {}
    until = time.monotonic() + timeout_s
    while job_ids:
        states = slurm.job_states(job_ids)
        found.update({job_id: state for job_id, state in states.items() if state.over})
        job_ids = [j for j in job_ids if j in states and j not in found]
        if not job_ids or time.monotonic() >= until:
            break
        time.sleep(1.0)
    return found


def _appears(path: Path, seconds: float) -> bool:
    """Whether ``path`` exists within ``seconds`` (looked at every half second)."""
    until = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() >= until:
            return False
        time.sleep(0.5)
    return True


if SlurmLauncher is not None:
    class SweepSlurmLauncher(_Recording, SlurmLauncher):
        """The plugin's ``SlurmLauncher``: every job waited for, each ending recorded (see ``_Recording``)."""
