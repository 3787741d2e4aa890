"""Process reuse: one distributed launch runs many jobs, one after another.

Within a multirun, jobs with the same :func:`pool_key` (the config fields with the
``launch`` role, the framework's ``launch_fields`` and the world size) share a *pool*:
one distributed launch whose ranks wait for jobs and run each with the same per-job
code as a fresh launch (the framework's ``run_job``: every seed and switch is set per
job), writing into the job's own dir. Start-up (interpreter, framework import,
rendezvous, ``init()``) is then paid once per pool instead of once per job.

The framework starts a pool's launch (``Framework.start_shared``: torch forks it from
``sweep.launch.forkserver``'s server). A *standalone pool* (``phase="standalone"``) is one
plain process, ``python -m sweep.train POOL_DIR --phase standalone``, that trains the
standalone copies of ``order=separate`` jobs: still a process apart from the ranks, but
the framework's import and start-up (MindSpore: about 3 s here) are paid once per sweep,
and its job runs while the ranks run theirs (:meth:`RankPool.submit`, :meth:`RankPool.wait`). This module owns every pool's lifetime: started on
first use (:func:`get_pool`), replaced when it died, stopped at the end of the multirun
or at interpreter exit (:func:`close_all`).

Protocol, all files in the pool dir ``SWEEP_DIR/.pools/<name>/`` (``sweep.layout``):
``pool.yaml`` (the first job's config), ``owner.pid`` (this process: idle ranks leave
when it is gone), ``queue/000000``, ``queue/000001``, ...: each holds the path of a job
dir, or ``STOP``; every rank polls for the next number. A job is done when every rank
has written its result. A rank that fails a job exits; the launcher then stops the
pool, the job is recorded as an error, and the next job starts a new pool.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple, Type

from omegaconf import OmegaConf

from sweep.config.schema import LAUNCH, fields_with, select
from sweep.frameworks import Framework
from sweep.config.enums import as_str
from sweep.launch import interrupts, runtime, supervise
from sweep.layout import STOP, JobDir, PoolDir, SweepDir

POLL_S = 0.01


def runs_jobs_in_process(hydra_launcher: Any) -> bool:
    """Whether Hydra's launcher (the ``hydra.launcher`` config) runs the jobs one after
    another in this process (Hydra's basic launcher): only then can jobs share launches.
    Under submitit every job is a process of its own."""
    return str(hydra_launcher.get("_target_", "")).endswith("BasicLauncher")


def rank_env(cfg: Any) -> Dict[str, str]:
    """What a job adds to its ranks' environment: ``framework.env``, the job device's
    ``framework.device_env`` (settings measured to help on one device only),
    ``OMP_NUM_THREADS=execution.omp_num_threads`` and the runtime's interpreter and
    ``PYTHONPATH`` (``sweep.launch.runtime.launch_env``; none for the default runtime)."""
    device = as_str(cfg.device)
    extra = (cfg.framework.get("device_env") or {}).get(device) or {}
    where = cfg.get("runtime") or {}
    return dict(cfg.framework.env, **extra, OMP_NUM_THREADS=str(cfg.execution.omp_num_threads),
                **runtime.launch_env(where.get("python"), where.get("pythonpath")))


def prestart(cfg: Any, sweep_dir: Path) -> None:
    """At the start of a multirun whose primary config ``cfg`` shares launches, let the
    framework start what they need (torch: the fork server, whose imports then overlap
    Hydra's composing of the first jobs); nothing for ``runner=command`` (the user's command
    starts its own processes)."""
    from sweep import frameworks

    if as_str(cfg.runner.name) == "command":
        return
    if cfg.execution.reuse_processes:
        frameworks.load(cfg).prestart(cfg, Path(sweep_dir).resolve(), rank_env(cfg))


def pool_key(config: Dict[str, Any], framework: Type[Framework], world: int, phase: str = "both") -> Tuple:
    """Jobs with equal keys can share one launch: the values of the fields with the
    ``launch`` role (``sweep.config.schema``), of the framework's ``launch_fields``, the
    world size and the phase (``both``: the ranks; ``standalone``: the standalone pool).
    ``config`` is the resolved job config (plain dict)."""
    fields = select(config, fields_with(LAUNCH) + list(framework.launch_fields))
    return tuple(sorted((k, repr(v)) for k, v in fields.items())) + (("world_size", world), ("phase", phase))


class RankPool:
    """One shared launch: ``world`` ranks (``phase="both"``) or the standalone pool's one
    process (``phase="standalone"``), serving the jobs posted to its queue."""

    """A running shared launch of ``world`` ranks (see the module docstring)."""

    def __init__(
        self, pool_dir: Path, config: dict, framework: Type[Framework], world: int, env: Dict[str, str],
        phase: str = "both",
    ) -> None:
        self.dir = pool_dir
        self.paths = PoolDir(pool_dir)
        self.world = world
        self.phase = phase
        self.paths.queue.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(OmegaConf.create(config), self.paths.config)
        self.paths.owner.write_text(str(os.getpid()))
        if phase == "standalone":
            self.handle: supervise.Handle = supervise.start(supervise.LaunchSpec(
                argv=[runtime.interpreter(env), "-m", "sweep.train", str(pool_dir), "--phase", "standalone"], env=env,
                log_path=self.paths.launcher_log, timeout_s=float("inf")))
        else:
            self.handle = framework.start_shared(config["framework"]["pool_launcher"], world, pool_dir, env)
        self.log_path = self.paths.launcher_log
        self.seq = 0
        self.jobs = 0
        self.stopping = False

    @property
    def kill_tag(self) -> str:
        """What the launch's processes carry (the fork server's tag for a forked launch)."""
        from sweep.launch import forkserver

        return self.handle.kill_tag or str(forkserver.tag())

    @property
    def argv(self) -> List[str]:
        spec = getattr(self.handle, "spec", None)
        return list(spec.argv) if spec is not None else list(getattr(self.handle, "argv", []))

    def alive(self) -> bool:
        """Whether the launcher process (and so the ranks) is still running."""
        return self.handle.poll() is None

    def _post(self, item: str) -> None:
        path = self.paths.item(self.seq)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(item)
        os.replace(tmp, path)
        self.seq += 1

    def results(self, job_dir: Path) -> List[Path]:
        """The files a job of this pool is done with: every rank's result, or the
        standalone result (``ranks/standalone.json``) for the standalone pool."""
        job = JobDir(job_dir)
        return [job.standalone_result] if self.phase == "standalone" else [job.rank_result(r) for r in range(self.world)]

    def submit(self, job_dir: Path) -> float:
        """Hand ``job_dir`` to the ranks without waiting; returns the time it was posted
        (``time.monotonic()``) for :meth:`wait`."""
        self._post(str(job_dir))
        self.jobs += 1
        return time.monotonic()

    def run_job(self, job_dir: Path, timeout_s: float) -> supervise.LaunchOutcome:
        """:meth:`submit` then :meth:`wait`."""
        began = self.submit(job_dir)
        return self.wait(job_dir, began, timeout_s)

    def wait(self, job_dir: Path, began: float, timeout_s: float) -> supervise.LaunchOutcome:
        """Wait until each rank wrote its result for the submitted ``job_dir``, the pool
        died, or ``timeout_s`` passed since ``began`` (then the pool is killed).

        Raises:
            KeyboardInterrupt: re-raised after the pool's processes are killed.
        """
        spec = getattr(self.handle, "spec", None)
        watch = supervise.LogWatch(spec.log_path, spec.fail_patterns, from_end=True) if spec is not None else None
        paths = self.results(job_dir)
        logs, asked, polls = JobDir(job_dir).logs, False, 0
        try:
            while not all(p.exists() for p in paths):
                polls += 1  # a rank that raised: its marker, looked for every 10th poll (0.1 s)
                if not asked and polls % 10 == 0 and logs.is_dir() and any(logs.glob("failed_*")):
                    supervise.dump_stacks(self.handle.pid, self.handle.kill_tag, settle_s=0.5)
                    asked = True
                if not self.alive():
                    return supervise.LaunchOutcome(
                        returncode=self.handle.poll(), timed_out=False, wall_s=time.monotonic() - began,
                        killed=supervise.kill_processes(None, self.handle.kill_tag),
                    )
                early = watch.match() if watch is not None else None
                if early is not None:  # a rank died, the others wait for it: stop now, not at the time limit
                    if not asked:  # a rank that hangs says where
                        supervise.dump_stacks(self.handle.pid, self.handle.kill_tag)
                    return supervise.LaunchOutcome(returncode=None, timed_out=False, wall_s=time.monotonic() - began,
                                                   killed=self.handle.kill(), failed_early=early)
                if time.monotonic() - began > timeout_s:
                    supervise.dump_stacks(self.handle.pid, self.handle.kill_tag)  # where each rank is, into its log
                    killed = self.handle.kill()
                    return supervise.LaunchOutcome(
                        returncode=None, timed_out=True, wall_s=time.monotonic() - began, killed=killed
                    )
                time.sleep(POLL_S)
                interrupts.check()  # an interrupt whose raise was dropped (sweep.launch.interrupts)
        except BaseException:
            self.handle.kill()
            raise
        return supervise.LaunchOutcome(returncode=0, timed_out=False, wall_s=time.monotonic() - began, killed=0)

    def stop(self) -> None:
        """Ask the ranks to stop after the job they run (``STOP``); does not wait."""
        if self.alive() and not self.stopping:
            self._post(STOP)
            self.stopping = True

    def close(self, grace_s: float = 30.0) -> None:
        """Ask the ranks to stop, wait up to ``grace_s``, then kill what is left."""
        self.stop()
        try:
            self.handle.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        self.handle.kill()


_POOLS: Dict[Tuple, RankPool] = {}
_STARTED: List[str] = []  # names of the pools this process started (unique dirs, also across processes)


def get_pool(
    sweep_dir: Path, config: dict, framework: Type[Framework], world: int, env: Dict[str, str],
    phase: str = "both",
) -> RankPool:
    """The live pool for the job ``config`` (:func:`pool_key`), started on first use or
    after the previous one died: its ranks, or with ``phase="standalone"`` the
    standalone pool (``world`` is then 1)."""
    key = pool_key(config, framework, world, phase)
    pool = _POOLS.get(key)
    if pool is not None and not pool.alive():
        pool.handle.kill()
        pool = None
    if pool is None:
        # (Again) at exit: atexit runs hooks last-registered-first, and this one must run
        # before multiprocessing's, which waits for a forked launch whose ranks wait for jobs.
        atexit.register(close_all)
        kind = "standalone" if phase == "standalone" else f"w{world}"
        name = f"{framework.name}_{kind}_{config['device']}_{os.getpid()}_{len(_STARTED)}"
        _STARTED.append(name)
        pool = RankPool(SweepDir(sweep_dir).pools / name, config, framework, world, env, phase)
        _POOLS[key] = pool
    return pool


def stop_all() -> None:
    """Ask every pool of this process to stop after its job, without waiting (their
    teardowns then overlap the report; :func:`close_all` waits for them)."""
    for pool in list(_POOLS.values()):
        pool.stop()


def close_all(grace_s: float = 30.0) -> None:
    """Stop every pool of this process (end of the multirun, or interpreter exit): all
    are asked at once, so their teardowns overlap; what is left after ``grace_s`` is killed."""
    pools = list(_POOLS.values())
    _POOLS.clear()
    for pool in pools:
        pool.stop()
    deadline = time.monotonic() + grace_s
    for pool in pools:
        pool.close(grace_s=max(0.0, deadline - time.monotonic()))


atexit.register(close_all)
