"""Process reuse: one distributed launch runs many jobs, one after another.

Within a multirun, jobs with the same :func:`pool_key` (framework, world size,
device, launcher environment; for MindSpore also ``deterministic``, which it sets once
per process) share a *pool*: one distributed launch whose ranks wait for
jobs and run each with the same per-job code as a fresh launch
(``sweep.train.*_rank.run_job``: every seed and switch is set per job), writing into
the job's own dir. Start-up (interpreter, framework import, rendezvous, ``init()``)
is then paid once per pool instead of once per job.

Torch pools (``framework.pool_launcher=elastic_fork``, ``sweep.train.fork_launch``) are
forked from ``sweep.forkserver``'s server, which imported torch once for the sweep;
``torchrun`` and ``msrun`` pools are launched as a job's own launch is.

Protocol, all files under the pool dir ``SWEEP_DIR/.pools/<name>/``: ``pool.yaml``
(the first job's config: framework, device, backend), ``owner.pid`` (this process:
idle ranks leave when it is gone), ``queue/000000``,
``queue/000001``, ...: each holds the path of a job dir, or ``STOP``; every rank polls
for the next number. A job is done when every rank has written
``JOB_DIR/ranks/rank_<r>.json``. A rank that fails a job exits; the launcher then
stops the pool, the job is recorded as an error, and the next job starts a new pool.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import psutil
from omegaconf import OmegaConf

from sweep import forkserver, launch
from sweep.train import POOL_CONFIG, POOL_OWNER, QUEUE_DIR, STOP, rank_result_path

POLL_S = 0.05


def runs_jobs_in_process(hydra_launcher: Any) -> bool:
    """Whether Hydra's launcher (the ``hydra.launcher`` config) runs the jobs one after
    another in this process (Hydra's basic launcher): only then can jobs share launches.
    Under submitit every job is a process of its own."""
    return str(hydra_launcher.get("_target_", "")).endswith("BasicLauncher")


def rank_env(cfg: Any) -> Dict[str, str]:
    """What a job adds to its ranks' environment: ``framework.env`` and
    ``OMP_NUM_THREADS=launcher.omp_num_threads``."""
    return dict(cfg.framework.env, OMP_NUM_THREADS=str(cfg.launcher.omp_num_threads))


FORKSERVER_LOG = "forkserver.log"  # in SWEEP_DIR/.pools/


def prestart(cfg: Any, sweep_dir: Path) -> None:
    """At the start of a multirun whose primary config ``cfg`` shares launches of torch
    ranks (``framework.pool_launcher=elastic_fork``), start ``sweep.forkserver``'s
    server now, so that its imports overlap Hydra's composing of the first jobs."""
    if cfg.launcher.reuse_processes and cfg.framework.get("pool_launcher") == "elastic_fork":
        forkserver.start(rank_env(cfg), Path(sweep_dir).resolve() / ".pools" / FORKSERVER_LOG)


def pool_key(cfg: Any, world: int, env: Dict[str, str]) -> Tuple:
    """Jobs with equal keys can share one launch."""
    framework = str(getattr(cfg.framework.name, "value", cfg.framework.name))
    deterministic = bool(cfg.deterministic) if framework == "mindspore" else None
    device = str(getattr(cfg.device, "value", cfg.device))
    return (framework, cfg.framework.pool_launcher, world, device, deterministic, tuple(sorted(env.items())))


class RankPool:
    """A running launch of ``world`` ranks in serve mode (see the module docstring)."""

    def __init__(self, pool_dir: Path, config: dict, launcher: str, world: int, env: Dict[str, str]) -> None:
        self.dir = pool_dir
        self.world = world
        (pool_dir / QUEUE_DIR).mkdir(parents=True, exist_ok=True)
        OmegaConf.save(OmegaConf.create(config), pool_dir / POOL_CONFIG)
        (pool_dir / POOL_OWNER).write_text(str(os.getpid()))
        self.spec = launch.build_spec(launcher, world, pool_dir, env=env, timeout_s=float("inf"))
        self.kill_tag: Optional[str] = self.spec.job_id  # what kill() looks for besides the process tree
        if launcher == "elastic_fork":
            forkserver.start(env, pool_dir.parent / FORKSERVER_LOG)  # no-op if the multirun started it
        if launcher == "elastic_fork" and forkserver.serves(env):
            # Forked from the sweep's fork server: its processes carry the server's tag,
            # shared with the other pools, so kill() takes this launch's process tree only.
            self.spec.job_id = str(forkserver.tag())
            self.kill_tag = None
            self.proc: Any = forkserver.ForkedLaunch(world, pool_dir, self.spec.log_path, self.spec.argv)
        else:
            self.proc = launch.start(self.spec)
        self.root = psutil.Process(self.proc.pid)
        self.seq = 0
        self.jobs = 0
        self.stopping = False

    def alive(self) -> bool:
        """Whether the launcher process (and so the ranks) is still running."""
        return self.proc.poll() is None

    def _post(self, item: str) -> None:
        path = self.dir / QUEUE_DIR / f"{self.seq:06d}"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(item)
        os.replace(tmp, path)
        self.seq += 1

    def run_job(self, job_dir: Path, timeout_s: float) -> launch.LaunchOutcome:
        """Hand ``job_dir`` to the ranks and wait until each wrote its result, the pool
        died, or ``timeout_s`` passed (then the pool is killed).

        Raises:
            KeyboardInterrupt: re-raised after the pool's processes are killed.
        """
        began = time.monotonic()
        self._post(str(job_dir))
        self.jobs += 1
        paths = [rank_result_path(job_dir, r) for r in range(self.world)]
        try:
            while not all(p.exists() for p in paths):
                if not self.alive():
                    return launch.LaunchOutcome(
                        returncode=self.proc.returncode, timed_out=False, wall_s=time.monotonic() - began,
                        killed=launch.kill_job(None, self.kill_tag),
                    )
                if time.monotonic() - began > timeout_s:
                    killed = self.kill()
                    return launch.LaunchOutcome(
                        returncode=None, timed_out=True, wall_s=time.monotonic() - began, killed=killed
                    )
                time.sleep(POLL_S)
        except BaseException:
            self.kill()
            raise
        return launch.LaunchOutcome(returncode=0, timed_out=False, wall_s=time.monotonic() - began, killed=0)

    def kill(self) -> int:
        """SIGKILL the launcher's process tree and (launched pools) every process tagged
        with the pool's job id; returns how many were alive (``sweep.launch.kill_job``)."""
        killed = launch.kill_job(self.root, self.kill_tag)
        self.proc.wait()
        return killed

    def stop(self) -> None:
        """Ask the ranks to stop after the job they run (``STOP``); does not wait."""
        if self.alive() and not self.stopping:
            self._post(STOP)
            self.stopping = True

    def close(self, grace_s: float = 30.0) -> None:
        """Ask the ranks to stop, wait up to ``grace_s``, then kill what is left."""
        self.stop()
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        self.kill()


_POOLS: Dict[Tuple, RankPool] = {}
_STARTED: List[str] = []  # names of the pools this process started (unique dirs, also across processes)


def get_pool(key: Tuple, sweep_dir: Path, config: dict, launcher: str, world: int, env: Dict[str, str]) -> RankPool:
    """The live pool for ``key``, started on first use (or after the previous one died)."""
    pool = _POOLS.get(key)
    if pool is not None and not pool.alive():
        pool.kill()
        pool = None
    if pool is None:
        name = f"{key[0]}_w{world}_{key[3]}_{os.getpid()}_{len(_STARTED)}"
        _STARTED.append(name)
        pool = RankPool(sweep_dir / ".pools" / name, config, launcher, world, env)
        _POOLS[key] = pool
    return pool


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
