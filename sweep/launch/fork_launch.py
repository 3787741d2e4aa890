"""A shared launch (``sweep.run.pool``) of PyTorch ranks forked from a process that has
already imported torch (``framework.pool_launcher=elastic_fork``).

It is torchrun's own engine, ``torch.distributed.launcher.api.elastic_launch``
(``torch.distributed.run`` calls it for a script), with a function entrypoint and
``start_method="fork"``, as its API allows for function entrypoints. The rendezvous is
the one ``torchrun --standalone`` uses: c10d at ``localhost:0``. The ranks get
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT`` from the agent
as under torchrun and are supervised the same way: if one exits non-zero, the agent
stops the others and the launch exits 1.

Two ways in: :func:`run_pool`, forked from ``sweep.launch.forkserver``'s server, which
imported :data:`PRELOAD` once for the whole sweep; or, when a launch's environment
differs from the server's, its own process
``python -m sweep.launch.fork_launch --nproc-per-node=N POOL_DIR`` (imports, then launches).

Why: each rank of a plain ``torchrun`` imports torch, FSDP2, DTensor and inductor's
config (the first ``use_deterministic_algorithms`` call imports it) on its own, seconds
per rank; forked from a process that had imported them, a rank starts at once. Nothing
numeric happens before the fork: the parent only imports modules (no tensor op, no
RNG draw, no device initialisation, so CUDA/NPU runtimes start in the ranks as under
torchrun), and every job sets its own seeds and switches (``torch_rank.run_job``).
``benchmarks/reuse.py`` and ``tests/integration/test_reuse.py`` check that the losses
are bit-identical to torchrun's.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import uuid
from pathlib import Path
from typing import List

# What every torch rank imports before its first step: the heavy part of its start-up.
PRELOAD = (
    "torch",
    "torch._inductor.config",  # imported by torch.use_deterministic_algorithms
    "torch.distributed.device_mesh",
    "torch.distributed.elastic.multiprocessing.errors",
    "torch.distributed.fsdp",
    "torch.distributed.launcher.api",
    "torch.distributed.tensor",
    "torch.optim",
    "sweep.engines.data_parallel",
    "sweep.engines.torch_fsdp2",
    "sweep.frameworks.torch",
    "sweep.train.__main__",
    "sweep.train.torch_rank",
)


def preload() -> None:
    """Import :data:`PRELOAD`, running nothing else."""
    for name in PRELOAD:
        importlib.import_module(name)


def serve_rank(pool_dir: str) -> None:
    """A forked rank: serve the pool's jobs, then return (the multiprocessing child then
    leaves with ``os._exit``, so the gloo shutdown abort of a normal interpreter exit
    cannot happen)."""
    from sweep.train.__main__ import serve

    serve(Path(pool_dir), exit_process=False)


def launch(world: int, pool_dir: Path) -> int:
    """Run ``world`` ranks serving ``pool_dir`` until they stop; 0, or 1 if a rank failed
    (the agent's report of which rank, exit code or signal goes to stderr)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=world, run_id=uuid.uuid4().hex,
        rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, start_method="fork",
    )
    try:
        elastic_launch(config, serve_rank)(str(pool_dir.resolve()))
        return 0
    except ChildFailedError as exc:
        print(exc.format_msg(), file=sys.stderr, flush=True)
        return 1


def _leave(code: int) -> None:
    # The ranks are gone; skip the interpreter's teardown of torch (about 1-2 s here).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_pool(world: int, pool_dir: str, log_path: str) -> None:
    """Entry of a launch forked from ``sweep.launch.forkserver``'s server (which ran
    :func:`preload`): a session of its own, output appended to ``log_path``, then
    :func:`launch`; leaves with its exit code."""
    from sweep.train import redirect_to

    os.setsid()
    redirect_to(Path(log_path))
    _leave(launch(world, Path(pool_dir)))


def main(argv: List[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m sweep.launch.fork_launch")
    parser.add_argument("--nproc-per-node", type=int, required=True)
    parser.add_argument("pool_dir", type=Path)
    args = parser.parse_args(argv)
    preload()
    _leave(launch(args.nproc_per_node, args.pool_dir))


if __name__ == "__main__":
    main(sys.argv[1:])
