"""Start a job's ranks with the framework's own launcher and supervise them.

``torchrun`` (``python -m torch.distributed.run``) for torch and ``msrun`` for
MindSpore; the argv builders are pure functions. :func:`run` starts the launcher in
its own session with output to ``JOB_DIR/logs/launcher.log``, waits up to the time
limit, and on timeout, Ctrl-C or exit leaves no process of the job behind: every
process started for the job carries ``SWEEP_JOB_ID`` in its environment and is killed
by that tag (msrun's workers run in sessions of their own and survive a SIGTERM to
msrun, shared/notes/environment.md).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import psutil

import sweep.train
from sweep.cluster import Topology, srun_argv

TAG = "SWEEP_JOB_ID"
LAUNCHER_LOG = "launcher.log"


@dataclass
class LaunchSpec:
    """What to run for one job: argv, extra environment, log file and time limit (s)."""

    argv: List[str]
    env: Dict[str, str]
    log_path: Path
    timeout_s: float
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass
class LaunchOutcome:
    """How the launcher ended. ``returncode`` is ``None`` when it was killed by us."""

    returncode: Optional[int]
    timed_out: bool
    wall_s: float
    killed: int  # processes of the job that were still alive and got SIGKILL


def _per_node(nproc: int, topology: Topology) -> int:
    """Ranks per node of a job of ``nproc`` ranks on ``topology``'s nodes."""
    if topology.world_size != nproc:
        raise ValueError(f"{nproc} ranks but topology has {topology.nnodes} nodes x {topology.nproc_per_node} ranks")
    return topology.nproc_per_node


def torchrun_argv(
    nproc: int, job_dir: Path, python: str = sys.executable, *, topology: Optional[Topology] = None
) -> List[str]:
    """``python -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node=N -m sweep.train JOB_DIR``.

    ``--standalone`` picks a free rendezvous port on localhost. With a ``topology`` of
    several nodes (``nproc`` ranks in all), this node's launcher: ``--nnodes=NODES
    --node-rank=R --nproc-per-node=N/NODES --rdzv-backend=static
    --rdzv-endpoint=MASTER_ADDR:MASTER_PORT`` (node ``R`` holds global ranks
    ``R*N/NODES ...``).
    """
    if topology is not None and topology.multi_node:
        return [
            python, "-m", "torch.distributed.run", f"--nnodes={topology.nnodes}", f"--node-rank={topology.node_rank}",
            f"--nproc-per-node={_per_node(nproc, topology)}", "--rdzv-backend=static",
            f"--rdzv-endpoint={topology.master_addr}:{topology.master_port}", "-m", "sweep.train", str(job_dir),
        ]
    return [
        python, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", f"--nproc-per-node={nproc}",
        "-m", "sweep.train", str(job_dir),
    ]


def msrun_argv(
    nproc: int, job_dir: Path, port: int, python: str = sys.executable, *, topology: Optional[Topology] = None
) -> List[str]:
    """``msrun --worker_num=N --local_worker_num=N --master_port=P --log_dir=JOB_DIR/logs --join=True
    .../sweep/train/__main__.py JOB_DIR``; msrun takes a script path, not a module.

    With a ``topology`` of several nodes (``nproc`` ranks in all), this node's launcher:
    ``--worker_num=N --local_worker_num=N/NODES --master_addr=MASTER_ADDR --master_port=P
    --node_rank=R`` (node ``R`` holds global ranks ``R*N/NODES ...``).
    """
    msrun = str(Path(python).parent / "msrun")
    script = str(Path(sweep.train.__file__).parent / "__main__.py")
    if topology is not None and topology.multi_node:
        return [
            msrun, f"--worker_num={nproc}", f"--local_worker_num={_per_node(nproc, topology)}",
            f"--master_addr={topology.master_addr}", f"--master_port={port}", f"--node_rank={topology.node_rank}",
            f"--log_dir={job_dir / 'logs'}", "--join=True", script, str(job_dir),
        ]
    return [
        msrun, f"--worker_num={nproc}", f"--local_worker_num={nproc}", f"--master_port={port}",
        f"--log_dir={job_dir / 'logs'}", "--join=True", script, str(job_dir),
    ]


def elastic_fork_argv(nproc: int, pool_dir: Path, python: str = sys.executable) -> List[str]:
    """``python -m sweep.train.fork_launch --nproc-per-node=N POOL_DIR``: a shared launch
    whose ranks torch's ``elastic_launch`` forks from one process that imported torch
    (single node only; see ``sweep.train.fork_launch``)."""
    return [python, "-m", "sweep.train.fork_launch", f"--nproc-per-node={nproc}", str(pool_dir)]


def free_port() -> int:
    """A TCP port that was free on localhost a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_spec(
    launcher: str, nproc: int, job_dir: Path, *, env: Dict[str, str], timeout_s: float,
    topology: Optional[Topology] = None,
) -> LaunchSpec:
    """The launch of one job.

    ``topology`` (:func:`sweep.cluster.topology_from_env`) of several nodes: ``srun``
    starts one task per node, which runs that node's launcher
    (:func:`sweep.cluster.srun_argv`); ``MASTER_ADDR``/``MASTER_PORT`` go into the
    environment so that every node uses the same rendezvous. ``None`` or one node: the
    single-node launch.

    Raises:
        ValueError: unknown launcher name.
        sweep.schema.ConfigError: several nodes, but this process is one of several srun tasks.
    """
    if launcher not in ("torchrun", "msrun", "elastic_fork"):
        raise ValueError(f"launcher={launcher!r}; allowed: torchrun, msrun, elastic_fork")
    if topology is not None and topology.multi_node:
        if launcher == "elastic_fork":
            raise ValueError("launcher=elastic_fork starts ranks on one node only")
        _per_node(nproc, topology)
        argv = srun_argv(topology, launcher, nproc, job_dir)
        env = dict(env, MASTER_ADDR=str(topology.master_addr), MASTER_PORT=str(topology.master_port))
    elif launcher == "torchrun":
        argv = torchrun_argv(nproc, job_dir)
    elif launcher == "elastic_fork":
        argv = elastic_fork_argv(nproc, job_dir)
    else:
        argv = msrun_argv(nproc, job_dir, free_port())
    return LaunchSpec(argv=argv, env=env, log_path=job_dir / "logs" / LAUNCHER_LOG, timeout_s=timeout_s)


def child_environment(extra: Dict[str, str], job_id: str) -> Dict[str, str]:
    """The environment of a job's launcher: this process's, plus ``extra``, the
    ``SWEEP_JOB_ID`` tag, this interpreter first on ``PATH`` and the cwd on ``PYTHONPATH``."""
    env = dict(os.environ)
    env.update(extra)
    env[TAG] = job_id
    # msrun runs the first `python` on PATH: make it this interpreter's.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # Engines named in the config may live in the user's project (cwd), e.g. tests/.
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.getcwd(), env.get("PYTHONPATH", "")] if p)
    return env


def tagged_processes(job_id: str) -> List[psutil.Process]:
    """Live processes whose environment carries ``SWEEP_JOB_ID=job_id``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(TAG) == job_id:
                found.append(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def kill_job(root: Optional[psutil.Process], job_id: Optional[str]) -> int:
    """SIGKILL the launcher's process tree and every process tagged with ``job_id``
    (``None``: the tree only); returns how many were alive."""
    procs = {p.pid: p for p in tagged_processes(job_id)} if job_id is not None else {}
    if root is not None:
        try:
            procs.setdefault(root.pid, root)
            for child in root.children(recursive=True):
                procs.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass
    alive = []
    for proc in procs.values():
        try:
            proc.send_signal(signal.SIGKILL)
            alive.append(proc)
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(alive, timeout=10)
    return len(alive)


def start(spec: LaunchSpec) -> subprocess.Popen:
    """Start the launcher in its own session, output appended to ``spec.log_path``."""
    spec.log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(spec.log_path, "ab") as log:
        log.write(("$ " + " ".join(spec.argv) + "\n").encode())
        log.flush()
        return subprocess.Popen(
            spec.argv, env=child_environment(spec.env, spec.job_id), stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )


def run(spec: LaunchSpec) -> LaunchOutcome:
    """Run the launcher to completion or to ``spec.timeout_s``; never leaves processes behind.

    Raises:
        KeyboardInterrupt: re-raised after the job's processes are killed.
    """
    began = time.monotonic()
    proc = start(spec)
    root = psutil.Process(proc.pid)
    timed_out = False
    try:
        returncode: Optional[int] = proc.wait(timeout=spec.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        returncode = None
    except BaseException:
        kill_job(root, spec.job_id)
        proc.wait()
        raise
    killed = kill_job(root if timed_out else None, spec.job_id)
    if timed_out:
        proc.wait()
    return LaunchOutcome(returncode=returncode, timed_out=timed_out, wall_s=time.monotonic() - began, killed=killed)
