"""V106 replicas decide: no level is a culprit, but replicas disagree in failing jobs."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import notes_of
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import candidates, faults

REPLICAS_NOTE = "replicas disagree from step "  # the start of a job's note (sweep.report.summary)


def replica_jobs(rows: List[dict]) -> List[int]:
    """The jobs whose replicas disagree (a note of theirs starts with :data:`REPLICAS_NOTE`)."""
    return [r["job"] for r in rows if any(n.startswith(REPLICAS_NOTE) for n in notes_of(r))]


def check(ctx: Context) -> List[Finding]:
    failing = faults(ctx)
    if not failing or candidates(ctx):
        return []
    split = replica_jobs(failing)
    return [KIND.make(jobs=split, evidence=("replicas",), n=len(split))] if split else []


KIND = Kind(
    code="V106", name="replicas decide", tier="decides",
    template="Replicas disagree in {n} of the failing jobs: the reduction across replicas is missing or wrong.",
    rests_on="ranks that hold the same shards hold different values (per-step digests, replicas), and no level is "
             "a culprit",
    not_claimed="which collective is wrong",
    check=check, example={"n": 2},
)
