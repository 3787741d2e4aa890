"""PyTorch: ranks started by ``torchrun`` (``python -m torch.distributed.run``), shared
launches by torch's ``elastic_launch`` forking the ranks (``sweep.launch.fork_launch``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from sweep.config.enums import as_str
from sweep.errors import ConfigError
from sweep.frameworks.base import Framework, check_npus, per_node
from sweep.launch import runtime, supervise
from sweep.launch.topology import Topology


def torchrun_argv(
    nproc: int, run_dir: Path, python: str = sys.executable, *, topology: Optional[Topology] = None
) -> List[str]:
    """``python -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node=N -m sweep.train DIR``.

    ``--standalone`` picks a free rendezvous port on localhost. With a ``topology`` of
    several nodes (``nproc`` ranks in all), this node's launcher: ``--nnodes=NODES
    --node-rank=R --nproc-per-node=N/NODES --rdzv-backend=static
    --rdzv-endpoint=MASTER_ADDR:MASTER_PORT`` (node ``R`` holds global ranks
    ``R*N/NODES ...``).
    """
    if topology is not None and topology.multi_node:
        return [
            python, "-m", "torch.distributed.run", f"--nnodes={topology.nnodes}", f"--node-rank={topology.node_rank}",
            f"--nproc-per-node={per_node(nproc, topology)}", "--rdzv-backend=static",
            f"--rdzv-endpoint={topology.master_addr}:{topology.master_port}", "-m", "sweep.train", str(run_dir),
        ]
    return [
        python, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", f"--nproc-per-node={nproc}",
        "-m", "sweep.train", str(run_dir),
    ]


def elastic_fork_argv(nproc: int, pool_dir: Path, python: str = sys.executable) -> List[str]:
    """``python -m sweep.launch.fork_launch --nproc-per-node=N POOL_DIR``: a shared launch
    whose ranks torch's ``elastic_launch`` forks from one process that imported torch
    (single node only; see ``sweep.launch.fork_launch``)."""
    return [python, "-m", "sweep.launch.fork_launch", f"--nproc-per-node={nproc}", str(pool_dir)]


class TorchFramework(Framework):
    name = "torch"
    module = "torch"
    extra = "torch"
    rank_module = "sweep.train.torch_rank"
    launchers = ("torchrun",)
    pool_launchers = ("elastic_fork", "torchrun")
    multi_node_launchers = ("torchrun",)
    grad_apis = ("backward",)
    traces_tensors = True
    policy_baselines = True
    grads_persist = True
    unwatched_reduce = {"data_parallel": "DDP reduces its gradient buckets from C++, where no call is watched"}

    @classmethod
    def check_baseline(cls, cfg: Any) -> None:
        """``baseline.precision=policy`` (its standalone copy is ``fully_shard``-ed on one
        rank, ``sweep.engines.torch_fsdp2.StandaloneFSDP2``) with ``weights.transfer=shared``
        is refused: ``fully_shard`` copies the parameters into storage of its own, so the
        copies would share nothing.

        Raises:
            ConfigError: that combination.
        """
        super().check_baseline(cfg)
        if as_str(cfg.baseline.precision) == "policy" and as_str(cfg.weights.transfer) == "shared":
            raise ConfigError("baseline.precision=policy with weights.transfer=shared: fully_shard moves the standalone "
                              "copy's parameters into storage of its own, so nothing would be shared; use "
                              "weights.transfer=independent or checkpoint")

    @classmethod
    def check_device(cls, device: str, world: int) -> None:
        """``npu`` needs ``torch_npu`` and ``world`` NPUs (``sweep.frameworks.base.npu_count``);
        ``cuda`` needs ``torch.cuda.device_count() >= world``.

        Raises:
            ConfigError: the device is missing, naming what was looked for.
        """
        if device == "npu" and importlib.util.find_spec("torch_npu") is None:
            raise ConfigError("device=npu with framework=torch needs torch_npu (not installed on this host)")
        if device == "npu":
            check_npus(world)
        if device == "cuda" and importlib.util.find_spec("torch") is not None:
            import torch  # only for this check

            if torch.cuda.device_count() < world:
                raise ConfigError(
                    f"device=cuda needs {world} GPUs for this mesh, this host has {torch.cuda.device_count()}"
                )

    @classmethod
    def argv(
        cls, launcher: str, nproc: int, run_dir: Path, *, topology: Optional[Topology] = None,
        python: str = sys.executable,
    ) -> List[str]:
        if launcher == "torchrun":
            return torchrun_argv(nproc, run_dir, python, topology=topology)
        if launcher == "elastic_fork":
            if topology is not None and topology.multi_node:
                raise ValueError("launcher=elastic_fork starts ranks on one node only")
            return elastic_fork_argv(nproc, run_dir, python)
        raise ValueError(f"launcher={launcher!r}; framework=torch has: torchrun, elastic_fork")

    @classmethod
    def start_shared(cls, launcher: str, nproc: int, pool_dir: Path, env: Dict[str, str]) -> supervise.Launch:
        """``elastic_fork``: forked from the sweep's fork server (``sweep.launch.forkserver``)
        when it runs with exactly ``env`` and this interpreter (not another
        ``runtime.python``), else ``fork_launch`` as a process of its own (of that interpreter);
        ``torchrun``: as a job's own launch."""
        from sweep.launch import forkserver
        from sweep.layout import PoolDir, SweepDir

        if launcher == "elastic_fork" and runtime.PYTHON_ENV not in env:  # the server runs this interpreter
            forkserver.start(env, SweepDir(pool_dir.parent.parent).forkserver_log)  # no-op if already started
            if forkserver.serves(env):
                log_path = PoolDir(pool_dir).launcher_log
                return forkserver.ForkedLaunch(nproc, pool_dir, log_path, cls.argv(launcher, nproc, pool_dir))
        return super().start_shared(launcher, nproc, pool_dir, env)

    @classmethod
    def prestart(cls, cfg: Any, sweep_dir: Path, env: Dict[str, str]) -> None:
        """Start the fork server now (its imports overlap Hydra composing the first jobs)."""
        from sweep.launch import forkserver
        from sweep.layout import SweepDir

        if cfg.framework.pool_launcher == "elastic_fork" and runtime.PYTHON_ENV not in env:
            forkserver.start(env, SweepDir(sweep_dir).forkserver_log)
