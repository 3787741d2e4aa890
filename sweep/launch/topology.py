"""Where a job's ranks run: the SLURM allocation's nodes, and the ``srun`` step that
starts one framework launcher per node (see ``sweep.run.cluster`` for the design).

Pure functions of the environment; nothing here starts a process.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Mapping, Optional

from sweep.errors import ConfigError

PORT_BASE = 15000  # master ports derived from SLURM_JOB_ID: PORT_BASE .. PORT_BASE + PORT_SPAN - 1,
PORT_SPAN = 15000  # below Linux's ephemeral range (32768-60999)
DEFAULT_PORT = 29500
SRUN_ARGS_ENV = "SWEEP_SRUN_ARGS"  # extra srun options for the per-node step, e.g. "--gres=npu:8"


@dataclass(frozen=True)
class Topology:
    """Where a job's ranks run: ``nnodes`` nodes of ``nproc_per_node`` ranks each; this
    process is on node ``node_rank``; the rendezvous (torchrun's store, msrun's
    scheduler) is at ``master_addr:master_port`` on the first node. On one node
    ``master_addr`` and ``master_port`` are ``None``: the single-node launch picks its
    own local port."""

    nnodes: int = 1
    node_rank: int = 0
    nproc_per_node: int = 1
    master_addr: Optional[str] = None
    master_port: Optional[int] = None

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node


def _split_top_level(nodelist: str) -> List[str]:
    """``"a[1-2],b3"`` -> ``["a[1-2]", "b3"]``: commas outside brackets separate items."""
    items, depth, current = [], 0, ""
    for ch in nodelist:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in node list {nodelist!r}")
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    if depth != 0:
        raise ValueError(f"unbalanced '[' in node list {nodelist!r}")
    items.append(current)
    if any(not item for item in items):
        raise ValueError(f"empty host name in node list {nodelist!r}")
    return items


def _expand(item: str, nodelist: str) -> List[str]:
    """One item, any number of bracket groups: ``"r[1-2]n[01,03]"`` -> r1n01 r1n03 r2n01 r2n03."""
    match = re.fullmatch(r"([^\[\]]*)\[([^\[\]]*)\](.*)", item)
    if match is None:
        if "[" in item or "]" in item:
            raise ValueError(f"cannot parse {item!r} in node list {nodelist!r}")
        return [item]
    prefix, ranges, rest = match.groups()
    tails = _expand(rest, nodelist) if rest else [""]
    hosts = []
    for part in ranges.split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"bad range {part!r} in node list {nodelist!r}")
        if dash and int(hi) < int(lo):
            raise ValueError(f"descending range {part!r} in node list {nodelist!r}")
        numbers = range(int(lo), int(hi) + 1) if dash else [int(lo)]
        for n in numbers:
            hosts.extend(f"{prefix}{str(n).zfill(len(lo))}{tail}" for tail in tails)
    return hosts


def parse_nodelist(nodelist: str) -> List[str]:
    """Host names of a SLURM node list in SLURM's order, for the common compressed forms:
    ``"node07"``, ``"node[01-03,07]"`` (zero padding kept), ``"a[1-2],b3"``,
    ``"rack[1-2]-n[1-2]"`` (several bracket groups).

    Raises:
        ValueError: unbalanced brackets, an empty name, or a range that is not ``lo-hi``
            of non-negative integers with ``lo <= hi``.
    """
    nodelist = nodelist.strip()
    if not nodelist:
        raise ValueError("empty node list")
    hosts: List[str] = []
    for item in _split_top_level(nodelist):
        hosts.extend(_expand(item, nodelist))
    return hosts


def hostnames(nodelist: str, scontrol: Optional[str] = None) -> List[str]:
    """The host names of ``nodelist``: ``scontrol show hostnames NODELIST`` (SLURM's own
    expansion) when ``scontrol`` is on PATH (or given) and answers, else
    :func:`parse_nodelist`. ``scontrol=""`` forces the parser.

    The list is checked by :func:`parse_nodelist` first, with or without ``scontrol``:
    SLURM's ``scontrol show hostnames 'bad['`` prints ``bad]`` and exits 0, so its answer
    alone cannot tell a malformed list.

    Raises:
        ValueError: a malformed node list (:func:`parse_nodelist`).
    """
    parsed = parse_nodelist(nodelist)
    scontrol = shutil.which("scontrol") if scontrol is None else scontrol
    if scontrol:
        try:
            out = subprocess.run(
                [scontrol, "show", "hostnames", nodelist], capture_output=True, text=True, check=True, timeout=30
            ).stdout.split()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    return parsed


def _resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, None)
        return True
    except (OSError, UnicodeError):
        return False


def node_address(node: str, scontrol: Optional[str] = None) -> str:
    """Where the other nodes reach SLURM node ``node``: its name when the name resolves
    (the usual cluster, where node names are host names), else the ``NodeAddr`` that
    ``scontrol show node NODE`` reports (a cluster whose ``NodeName`` is not a host
    name: ``NodeName=gpu1 NodeAddr=10.1.0.7``, or several ``slurmd`` on one host), else
    the name as it is. ``scontrol=""`` skips the question."""
    if _resolves(node):
        return node
    scontrol = shutil.which("scontrol") if scontrol is None else scontrol
    if scontrol:
        try:
            out = subprocess.run([scontrol, "show", "node", "--oneliner", node], capture_output=True, text=True,
                                 check=True, timeout=30).stdout
            match = re.search(r"(?:^|\s)NodeAddr=(\S+)", out)
            if match and match.group(1) not in ("(null)", "N/A"):
                return match.group(1)
        except (OSError, subprocess.SubprocessError):
            pass
    return node


def parse_tasks_per_node(value: str) -> List[int]:
    """SLURM's tasks-per-node list, one count per node: ``"2(x3),1"`` -> ``[2, 2, 2, 1]``.

    Raises:
        ValueError: not of that form.
    """
    counts: List[int] = []
    for part in value.strip().split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match is None:
            raise ValueError(f"cannot parse tasks per node {value!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def _port(env: Mapping[str, str]) -> int:
    """``MASTER_PORT`` if set; else derived from ``SLURM_JOB_ID`` so that every node of the
    job computes the same port without talking to the others."""
    if env.get("MASTER_PORT"):
        return int(env["MASTER_PORT"])
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    return PORT_BASE + int(job_id) % PORT_SPAN if job_id and job_id.isdigit() else DEFAULT_PORT


def topology_from_env(env: Optional[Mapping[str, str]], nproc_total: int) -> Topology:
    """The topology of a job of ``nproc_total`` ranks from the SLURM environment ``env``
    (``None``: ``os.environ``).

    Nodes: inside an ``srun`` step ``SLURM_STEP_NUM_NODES`` and ``SLURM_STEP_NODELIST``;
    elsewhere (a batch script, a ``salloc`` shell) the allocation's ``SLURM_JOB_NUM_NODES``
    (or ``SLURM_NNODES``) and ``SLURM_JOB_NODELIST`` (or ``SLURM_NODELIST``). No such
    variables, or one node: ``Topology(1, 0, nproc_total, None, None)``, the single-node
    launch.

    Several nodes: ``node_rank`` is ``SLURM_NODEID`` (0 if unset), ``nproc_per_node`` is
    ``nproc_total / nnodes``, ``master_addr`` is ``MASTER_ADDR`` if set, else the first
    host of the node list (:func:`hostnames`) as the other nodes reach it
    (:func:`node_address`: its ``NodeAddr`` where the name does not resolve),
    ``master_port`` is ``MASTER_PORT`` if set, else ``15000 + SLURM_JOB_ID % 15000``.

    Raises:
        ConfigError: ``nproc_total`` is not a multiple of the node count (every node runs
            the same number of ranks); inside a step, a node runs more than one task
            (``SLURM_STEP_TASKS_PER_NODE``: each node needs exactly one launcher); or the
            node list is missing or cannot be parsed.
    """
    env = os.environ if env is None else env
    if env.get("SLURM_STEP_NUM_NODES"):
        nnodes_var, nodelist_var = "SLURM_STEP_NUM_NODES", "SLURM_STEP_NODELIST"
    else:
        nnodes_var = "SLURM_JOB_NUM_NODES" if env.get("SLURM_JOB_NUM_NODES") else "SLURM_NNODES"
        old_names = env.get("SLURM_NODELIST") and not env.get("SLURM_JOB_NODELIST")
        nodelist_var = "SLURM_NODELIST" if old_names else "SLURM_JOB_NODELIST"
    nnodes = int(env.get(nnodes_var) or 1)
    if nnodes <= 1:
        return Topology(nnodes=1, node_rank=0, nproc_per_node=nproc_total)
    if nproc_total % nnodes:
        raise ConfigError(
            f"world_size={nproc_total} ranks do not split evenly over {nnodes} nodes ({nnodes_var}={nnodes}): "
            "every node runs world_size / nodes ranks; use a multiple of the node count "
            "(or fewer nodes)"
        )
    tasks = env.get("SLURM_STEP_TASKS_PER_NODE")
    if env.get("SLURM_STEP_NUM_NODES") and tasks:
        try:
            counts = parse_tasks_per_node(tasks)
        except ValueError as exc:
            raise ConfigError(f"SLURM_STEP_TASKS_PER_NODE={tasks!r}: {exc}") from None
        if any(c != 1 for c in counts):
            raise ConfigError(
                f"SLURM_STEP_TASKS_PER_NODE={tasks}: a job on several nodes needs exactly one task per node "
                "(it starts the framework launcher of that node's ranks)"
            )
    master_addr = env.get("MASTER_ADDR")
    if not master_addr:
        nodelist = env.get(nodelist_var)
        if not nodelist:
            raise ConfigError(f"{nnodes_var}={nnodes} but {nodelist_var} is not set: cannot find the first node")
        try:
            master_addr = node_address(hostnames(nodelist)[0])
        except ValueError as exc:
            raise ConfigError(f"{nodelist_var}={nodelist!r}: {exc}") from None
    return Topology(
        nnodes=nnodes,
        node_rank=int(env.get("SLURM_NODEID") or 0),
        nproc_per_node=nproc_total // nnodes,
        master_addr=master_addr,
        master_port=_port(env),
    )


def srun_argv(
    topology: Topology, launcher: str, nproc: int, job_dir: Path, *, python: str = sys.executable,
    env: Optional[Mapping[str, str]] = None,
) -> List[str]:
    """The job process's launch on several nodes: ``srun --nodes=N --ntasks=N
    --ntasks-per-node=1 --kill-on-bad-exit=1 --label [--cpus-per-task=C] [$SWEEP_SRUN_ARGS]
    PYTHON -m sweep.run.cluster LAUNCHER NPROC JOB_DIR``. ``--cpus-per-task`` repeats the
    job's ``SLURM_CPUS_PER_TASK`` (``srun`` does not inherit it since SLURM 22.05).

    Raises:
        ConfigError: the job process is itself one of several tasks of an ``srun`` step
            (``SLURM_STEP_NUM_TASKS > 1``, e.g. ``hydra/launcher=submitit_slurm`` with
            ``nodes > 1``, which runs the whole job on every node).
    """
    env = os.environ if env is None else env
    step_tasks = int(env.get("SLURM_STEP_NUM_TASKS") or 1)
    if step_tasks > 1:
        raise ConfigError(
            f"this job process is one of SLURM_STEP_NUM_TASKS={step_tasks} tasks of an srun step, and each would "
            "start the whole job: a job on several nodes runs as one process that starts the other nodes itself; "
            "use hydra/launcher=slurm hydra.launcher.additional_parameters.nodes=N (submitit with use_srun: false), "
            "or python -m sweep inside sbatch/salloc"
        )
    argv = [
        "srun", f"--nodes={topology.nnodes}", f"--ntasks={topology.nnodes}", "--ntasks-per-node=1",
        "--kill-on-bad-exit=1", "--label",
    ]
    if env.get("SLURM_CPUS_PER_TASK"):
        argv.append(f"--cpus-per-task={env['SLURM_CPUS_PER_TASK']}")
    argv += shlex.split(env.get(SRUN_ARGS_ENV, ""))
    return argv + [python, "-m", "sweep.run.cluster", launcher, str(nproc), str(job_dir)]
