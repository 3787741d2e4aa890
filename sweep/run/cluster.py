"""Jobs whose SLURM allocation spans several nodes: one framework launcher per node.

Design: one Hydra job is one process (the *job process*: ``sweep.run.job.run``), wherever it
runs: in the batch step of its own SLURM job (``hydra/launcher=slurm``, i.e.
hydra-submitit-launcher with ``use_srun: false``), in an ``sbatch``/``salloc`` allocation
(``python -m sweep ...`` with any launcher), or on a workstation. When the allocation it
runs in spans ``N > 1`` nodes, the job process does not start ``torchrun``/``msrun``
itself but ``srun --nodes=N --ntasks-per-node=1 ... python -m sweep.run.cluster LAUNCHER
WORLD JOB_DIR``: SLURM starts one task on every node, and that task (:func:`main`)
replaces itself by the framework's launcher for the node's ranks:

- ``torchrun --nnodes=N --node-rank=SLURM_NODEID --nproc-per-node=WORLD/N
  --rdzv-backend=static --rdzv-endpoint=<first node>:<port> -m sweep.train JOB_DIR``
  (static rendezvous: node ``r`` holds the global ranks ``r*P .. r*P+P-1``);
- ``msrun --worker_num=WORLD --local_worker_num=WORLD/N --master_addr=<first node>
  --master_port=<port> --node_rank=SLURM_NODEID ...``.

The ranks write ``ranks/rank_<r>.json`` into the job dir on the shared file system;
``srun`` returns when every node's launcher has exited, and the job process alone
compares and writes ``result.json``, exactly as on one node. Nothing else of the job
changes: its time limit covers the ``srun`` (a time-out kills ``srun``; SLURM ends the
step's remote tasks, at the latest with the job's allocation). On one node (no SLURM
variables, or an allocation of one node) the launch is the single-node one, unchanged.

Why not the whole Hydra job on every node (submitit's default with ``nodes: N``, one task
per node)? Each node's ``sweep.run.job.run`` would also read the ranks and write
``result.json`` (racing node 0's), and submitit waits for a result from every task; a
job process per job keeps one writer and one result. Such a job process (one of several
tasks of a step) is refused by :func:`srun_argv` with an error naming the fix.

``python -m sweep.run.cluster LAUNCHER WORLD JOB_DIR`` is the per-node entry point (run by
``srun``, not by hand).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Mapping, Optional, Type

from sweep.errors import ConfigError
from sweep.frameworks import Framework, by_path
from sweep.launch.topology import (  # noqa: F401  (the cluster API, in one place for users)
    DEFAULT_PORT,
    SRUN_ARGS_ENV,
    Topology,
    hostnames,
    node_address,
    parse_nodelist,
    parse_tasks_per_node,
    srun_argv,
    topology_from_env,
)
from sweep.layout import JobDir


def framework_of(job_dir: Path) -> Type[Framework]:
    """The framework class named by ``JOB_DIR/job.yaml`` (``framework.impl``).

    Raises:
        ConfigError: no readable job config, or its framework does not import.
    """
    from omegaconf import OmegaConf

    path = JobDir(job_dir).config
    if not path.exists():
        raise ConfigError(f"{path} does not exist: not a job dir")
    return by_path(str(OmegaConf.load(path).framework.impl))


def node_argv(
    launcher: str, nproc: int, job_dir: Path, *, env: Optional[Mapping[str, str]] = None,
    python: str = sys.executable, framework: Optional[Type[Framework]] = None,
) -> List[str]:
    """The framework launcher of this node's ranks, from the step's SLURM environment
    (:func:`sweep.launch.topology.topology_from_env`): ``framework.argv`` with the node's
    topology. ``framework``: the job's (:func:`framework_of` when not given).

    Raises:
        ConfigError: see :func:`sweep.launch.topology.topology_from_env`, :func:`framework_of`.
        ValueError: a launcher the framework has not, or one that cannot span nodes.
    """
    framework = framework or framework_of(job_dir)
    if launcher not in framework.multi_node_launchers:
        raise ValueError(
            f"framework.launcher={launcher!r} cannot start ranks on several nodes; framework={framework.name} has: "
            + ", ".join(framework.multi_node_launchers)
        )
    topology = topology_from_env(env, nproc)
    return framework.argv(launcher, nproc, job_dir, topology=topology, python=python)


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m sweep.run.cluster LAUNCHER NPROC JOB_DIR``: exec this node's framework launcher."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m sweep.run.cluster torchrun|msrun WORLD_SIZE JOB_DIR (run by srun, one task per node)",
              file=sys.stderr)
        return 2
    launcher, nproc, job_dir = args[0], int(args[1]), Path(args[2])
    try:
        command = node_argv(launcher, nproc, job_dir)
    except (ConfigError, ValueError) as exc:
        print(f"sweep.run.cluster: {exc}", file=sys.stderr)
        return 2
    print("$ " + " ".join(command), flush=True)
    os.execv(command[0], command)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
