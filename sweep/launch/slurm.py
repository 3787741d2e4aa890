"""The SLURM controller, asked: does it answer, and how did a job end.

Used by ``hydra/launcher=slurm`` (``hydra_plugins/sweep_launcher/slurm_launcher.py``) and
the check before a multirun (``sweep.run.callbacks.launcher_missing``). Every answer comes
from SLURM's own clients: ``scontrol ping``; ``squeue --states=all`` (the controller
keeps a finished job ``MinJobAge`` seconds, 300 by default) and, for jobs it no longer
holds, ``sacct`` (where the cluster keeps accounting).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

QUERY_TIMEOUT_S = 30  # a client gives up on a controller that does not answer (MessageTimeout x retries)
# SLURM's job states that are not over (squeue's %T); any other state is final
ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED",
                    "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD",
                    "SPECIAL_EXIT", "PREEMPTED_REQUEUE"})
# squeue's reasons for a pending job that do not clear by themselves: the job asks more than the
# partition offers, or under an account or QOS it may not use (hydra/launcher=slurm cancels it)
UNSTARTABLE = frozenset({"PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints",
                         "InvalidAccount", "InvalidQOS", "AccountNotAllowed", "QOSNotAllowed"})
# how each final state reads in a job's record: (status, what happened)
ENDINGS: Dict[str, Tuple[str, str]] = {
    "PENDING": ("error", "was never started: SLURM held it for a reason that does not clear by itself (it asks more "
                         "than the partition offers: hydra.launcher.cpus_per_task, additional_parameters.nodes, "
                         "timeout_min; or an account or QOS it may not use), and the sweep cancelled it"),
    "TIMEOUT": ("timeout", "reached its SLURM time limit ({time_limit}; hydra.launcher.timeout_min) and was killed"),
    "CANCELLED": ("error", "was cancelled (scancel, or an administrator)"),
    "NODE_FAIL": ("error", "lost its node ({nodes} failed, or was set DOWN)"),
    "PREEMPTED": ("error", "was pre-empted and not requeued"),
    "OUT_OF_MEMORY": ("error", "ran out of memory (hydra.launcher.mem_gb)"),
    "BOOT_FAIL": ("error", "could not start: its node failed to boot"),
    "DEADLINE": ("error", "reached its deadline (sbatch --deadline)"),
    "FAILED": ("error", "ended with a non-zero exit code ({exit_code}): the job process died (see its SLURM log)"),
    "COMPLETED": ("error", "ended without the job's result (the job process exited before it was written)"),
}


@dataclass(frozen=True)
class JobState:
    """One SLURM job as the controller (or accounting) has it. ``job_id``: as submitit
    names it (``"12"``, or ``"12_3"`` for task 3 of array job 12); ``state``: SLURM's
    base state (``RUNNING``, ``TIMEOUT``, ``CANCELLED``, ``NODE_FAIL``, ...); ``reason``:
    squeue's reason or sacct's detail (``"by 0"``); ``nodes``: its node list; ``elapsed``,
    ``time_limit``: SLURM's ``[D-]HH:MM:SS`` text; ``exit_code``: ``code:signal`` where
    known; ``source``: ``squeue`` or ``sacct``."""

    job_id: str
    state: str
    reason: str = ""
    nodes: str = ""
    elapsed: str = ""
    time_limit: str = ""
    exit_code: str = ""
    source: str = "squeue"

    @property
    def over(self) -> bool:
        return self.state not in ACTIVE

    def ending(self) -> Tuple[str, str]:
        """``(status, reason)`` for the job's record when it ended without its result:
        ``timeout`` for SLURM's ``TIMEOUT``, ``error`` for any other state, the reason
        naming the SLURM job, its state, where and how long it ran, and what the state means."""
        status, meaning = ENDINGS.get(self.state, ("error", "ended in this state without the job's result"))
        meaning = meaning.format(time_limit=f"{self.time_limit or '?'}", nodes=self.nodes or "?",
                                 exit_code=self.exit_code or "?")
        detail = f" {self.reason}" if self.reason and self.reason not in ("None", self.state) else ""
        if detail and self.source == "squeue" and not self.nodes and self.state != "PENDING":
            detail = f" (while pending: {self.reason})"  # cancelled before it started: squeue's last reason
        elif detail and self.state == "PENDING":
            detail = f" ({self.reason})"
        where = f" on {self.nodes}" if self.nodes else ""
        ran = f" after {self.elapsed}" if self.elapsed else ""
        return status, f"SLURM job {self.job_id} {self.state}{detail}{where}{ran}: {meaning}"


def job_environment(env: Optional[Dict[str, str]] = None) -> Optional[Dict[str, object]]:
    """What a job process running as a SLURM job knows of it, from its environment
    (``None``: ``os.environ``): ``{"job_id"`` (submitit's form, ``"12_3"`` for an array
    task), ``"nodes"`` (``SLURM_JOB_NODELIST``), ``"partition"``, ``"restarts"``
    (``SLURM_RESTART_COUNT``: times SLURM requeued it)``}``; ``None`` outside SLURM."""
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job:
        return None
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    return {
        "job_id": f"{array}_{task}" if array and task else job,
        "nodes": env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST"),
        "partition": env.get("SLURM_JOB_PARTITION"),
        "restarts": int(env.get("SLURM_RESTART_COUNT") or 0),
    }


def _run(argv: List[str]) -> Optional[subprocess.CompletedProcess]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None


def controller_problem() -> Optional[str]:
    """``None`` when ``scontrol ping`` says the controller is up (or when ``scontrol`` is
    not on PATH: nothing to ask); else one line: what ``scontrol ping`` said (``Slurmctld(primary)
    at HOST is DOWN``, a configuration it cannot read, no answer within
    :data:`QUERY_TIMEOUT_S` s) and the ``slurm.conf`` it read."""
    scontrol = shutil.which("scontrol")
    if not scontrol:
        return None
    conf = os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf (SLURM_CONF unset)"
    if os.environ.get("SLURM_CONF") and not os.path.isfile(os.environ["SLURM_CONF"]):
        return f"SLURM_CONF={os.environ['SLURM_CONF']}: no such file"  # (scontrol would wait out its timeout)
    proc = _run([scontrol, "ping"])
    if proc is None:
        return f"scontrol ping gave no answer within {QUERY_TIMEOUT_S} s (slurm.conf: {conf})"
    lines = [line.strip() for line in (proc.stdout + "\n" + proc.stderr).splitlines()
             if line.strip() and not set(line.strip()) <= {"*"} and "RESTORE SLURMCTLD" not in line]
    if proc.returncode == 0 and any(" is UP" in line for line in lines):
        return None
    said = next((line for line in lines if " is DOWN" in line), None) or (lines[-1] if lines else f"exit {proc.returncode}")
    return f"scontrol ping: {said} (slurm.conf: {conf})"


def _squeue(job_ids: List[str]) -> Dict[str, JobState]:
    mains = sorted({j.split("_")[0] for j in job_ids})
    proc = _run(["squeue", "--states=all", "--array", "--noheader", "--format=%i|%T|%r|%N|%M|%l",
                 f"--jobs={','.join(mains)}"])
    found: Dict[str, JobState] = {}
    if proc is None or proc.returncode != 0:
        return found
    for line in proc.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 6:
            found[parts[0]] = JobState(parts[0], parts[1], parts[2], parts[3], parts[4], parts[5])
    return found


def _sacct(job_ids: List[str]) -> Dict[str, JobState]:
    proc = _run(["sacct", "--noheader", "--parsable2", "--allocations",
                 "--format=JobID,State,NodeList,Elapsed,Timelimit,ExitCode", f"--jobs={','.join(job_ids)}"])
    found: Dict[str, JobState] = {}
    if proc is None or proc.returncode != 0:  # e.g. "Slurm accounting storage is disabled"
        return found
    for line in proc.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 6:
            state, _, detail = parts[1].partition(" ")  # "CANCELLED by 1000"
            found[parts[0]] = JobState(parts[0], state, detail, parts[2], parts[3], parts[4], parts[5], "sacct")
    return found


def job_states(job_ids: Iterable[str]) -> Dict[str, JobState]:
    """The state of each of ``job_ids`` (submitit's ids, ``"12_3"``), by id; ids neither
    ``squeue`` nor ``sacct`` knows are left out (not submitted yet, or forgotten by a
    controller without accounting)."""
    ids = list(job_ids)
    if not ids:
        return {}
    found = _squeue(ids)
    rest = [j for j in ids if j not in found]
    if rest:
        found.update(_sacct(rest))
    return {j: found[j] for j in ids if j in found}

