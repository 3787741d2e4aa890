"""V106 replicas decide: no level is a culprit, but replicas disagree in failing jobs."""

from __future__ import annotations

from typing import Any, Dict, List

from sweep.analysis.grid import notes_of
from sweep.analysis.judging import arises_after_reduction
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.notes_catalog.judging import CAUSES
from sweep.findings.shared import candidates, faults

REPLICAS_NOTE = "replicas disagree from step "  # the start of a job's note (sweep.report.summary)


def replica_jobs(rows: List[dict]) -> List[int]:
    """The jobs whose replicas disagree (a note of theirs starts with :data:`REPLICAS_NOTE`)."""
    return [r["job"] for r in rows if any(n.startswith(REPLICAS_NOTE) for n in notes_of(r))]


INIT = "an initialisation that differs by rank, not the reduction"
REDUCTION, AFTER = CAUSES["reduction"], CAUSES["after"]  # the job's replicas note's words (N184, N185)


def replica_cause(rows: List[Dict[str, Any]], start: bool = False) -> str:
    """What the replicas' disagreement in ``rows`` points at, from their own evidence: an
    initialisation (``start``: the copies start apart), a step after the reduction where every
    job's first tensor says so (``sweep.analysis.judging.arises_after_reduction``), else the
    reduction."""
    if start:
        return INIT
    after = rows and all(arises_after_reduction(getattr(r.get("result"), "first_tensor", None),
                                                getattr(r.get("result"), "notes", None) or ()) for r in rows)
    return AFTER if after else REDUCTION


def check(ctx: Context) -> List[Finding]:
    failing = faults(ctx)
    if not failing or candidates(ctx):
        return []
    split = replica_jobs(failing)
    cause = replica_cause([r for r in failing if r["job"] in split])
    return [KIND.make(jobs=split, evidence=("replicas", "first_tensor"), n=len(split), fails=len(failing),
                      cause=cause)] if split else []


KIND = Kind(
    code="V106", name="replicas decide", tier="decides",
    template="Replicas disagree in {n} of the {fails} failing jobs: {cause}.",
    rests_on="ranks that hold the same shards hold different values (per-step digests, replicas), and no level is "
             "a culprit; the cause from those jobs' first differing tensors (a weight whose step's gradients agree "
             "as reduced: after the reduction)",
    not_claimed="which collective or which step is wrong",
    check=check, example={"n": 2, "fails": 3, "cause": REDUCTION},
)
