"""The two-node SLURM test cluster that ``.ci/slurm-cluster`` runs on this host, as the
tests see it: where its ``slurm.conf`` is, whether it is up, and SLURM's own clients.

``.ci/run`` brings the cluster up before pytest (``.ci/slurm-cluster up``) and sets
``SWEEP_SLURM_TESTS=required``: a test that needs it then fails when it is not up; elsewhere
it skips with the reason (bring it up by hand with ``.ci/slurm-cluster install`` and
``.ci/slurm-cluster up``, as root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "slurm-cluster"
PARTITION = "sweep"
NODES = ("sweep1", "sweep2")
REQUIRED = os.environ.get("SWEEP_SLURM_TESTS") == "required"


def skip_or_fail(reason: str) -> None:
    """Fail with ``reason`` where ``SWEEP_SLURM_TESTS=required`` (``.ci/run``), else skip."""
    if REQUIRED:
        pytest.fail(f"{reason} (SWEEP_SLURM_TESTS=required)")
    pytest.skip(f"{reason}; .ci/slurm-cluster install && .ci/slurm-cluster up (as root) brings one up")


def slurm_installed() -> bool:
    return all(shutil.which(tool) for tool in ("sbatch", "srun", "squeue", "scontrol", "slurmctld"))


def conf_path() -> Path:
    """The cluster's ``slurm.conf`` (``.ci/slurm-cluster env``: one place decides it)."""
    out = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True, check=True).stdout
    return Path(out.strip().partition("SLURM_CONF=")[2])


def why_not_up() -> Optional[str]:
    """``None`` when the cluster answers and both nodes are up, else why not."""
    if not slurm_installed():
        return "SLURM is not installed (sbatch, srun, squeue, scontrol, slurmctld)"
    proc = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True, text=True, timeout=120)
    return None if proc.returncode == 0 else (proc.stdout + proc.stderr).strip()


def env() -> Dict[str, str]:
    """This process's environment with the cluster's ``SLURM_CONF``."""
    return dict(os.environ, SLURM_CONF=str(conf_path()))


def slurm(*argv: str, check: bool = True) -> str:
    """Run one of SLURM's clients against the test cluster; its stdout."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, env=env(), timeout=120)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def queue() -> List[Dict[str, str]]:
    """The jobs ``squeue`` lists (pending, running, completing), one array task a row:
    ``{"id", "state", "nodes", "name"}``."""
    rows = []
    for line in slurm("squeue", "--noheader", "--array", "--format=%i|%T|%N|%j").splitlines():
        job_id, state, nodes, name = line.strip().split("|")
        rows.append({"id": job_id, "state": state, "nodes": nodes, "name": name})
    return rows


def wait_for(what: str, check: Callable[[], object], timeout: float, every: float = 0.5) -> object:
    """Poll ``check`` until it returns something true; that value. Fails naming ``what``."""
    until = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= until:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(every)


def set_node(node: str, state: str, reason: str = "sweep test", check: bool = True) -> None:
    """``scontrol update NodeName=node State=state`` (``DRAIN``, ``DOWN``, ``RESUME``);
    ``check=False``: a node already in that state is no error."""
    extra = [f"Reason={reason}"] if state.upper() in ("DRAIN", "DOWN") else []
    slurm("scontrol", "update", f"NodeName={node}", f"State={state}", *extra, check=check)


def node_state(node: str) -> str:
    return slurm("sinfo", "--noheader", "--Node", f"--nodes={node}", "--format=%T").strip()


def dead_controller_conf(folder: Path) -> Path:
    """A ``slurm.conf`` like the test cluster's whose controller is not running (another
    port, nothing started): what a login node sees while its controller is down. Written
    by ``.ci/slurm-cluster conf``."""
    run_env = dict(os.environ, SWEEP_SLURM_DIR=str(folder), SWEEP_SLURM_PORT="6999")
    subprocess.run(["bash", str(SCRIPT), "conf"], env=run_env, check=True, capture_output=True, text=True)
    return folder / "slurm.conf"
