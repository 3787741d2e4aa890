"""V150 replicas disagree: ranks that hold the same shards hold different values."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import notes_of
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.replicas_decide import REDUCTION, REPLICAS_NOTE, replica_cause, replica_jobs


def check(ctx: Context) -> List[Finding]:
    jobs = replica_jobs(ctx.rows)
    if not jobs:
        return []
    first = next(r for r in ctx.rows if r["job"] == jobs[0])
    note = next(n for n in notes_of(first) if n.startswith(REPLICAS_NOTE))
    start = [r for r in ctx.rows if r["job"] in jobs and r.get("first_tensor_kind") == "initial"
             and note.startswith(REPLICAS_NOTE + "0")]
    return [KIND.make(jobs=jobs, evidence=("replicas", "first_tensor"), n=len(jobs), jobs_listed=jobs, job=jobs[0],
                      note=note,
                      start_job=start[0]["job"] if start else None, start=start[0]["first_tensor"] if start else None,
                      cause=replica_cause([r for r in ctx.rows if r["job"] in jobs], bool(start)))]


KIND = Kind(
    code="V150", name="replicas disagree", tier="context",
    template="Replicas disagree in job{n|s} {jobs_listed} (job {job}: {note}): ranks that hold the same shards hold "
             "different values; [the copies start apart there (job {start_job}: {start}): ]{cause}.",
    rests_on="per-step digests of the ranks' local shards: ranks holding the same shards (HSDP's replicas, DDP's "
             "ranks) must agree",
    not_claimed="which collective is wrong",
    check=check,
    example={"n": 1, "jobs_listed": [3], "job": 3, "note": "replicas disagree from step 1 (ranks 0 and 2)",
             "start_job": None, "start": None, "cause": REDUCTION},
)
