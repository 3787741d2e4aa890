"""V131 no fix proven: only a level of what both copies train, or of how they are judged, passes
every failing job's place: it hides the drift."""

from __future__ import annotations

from typing import List

from sweep.analysis import culprits as grid_evidence
from sweep.analysis.grid import hiding_kind
from sweep.findings.base import Context, Finding, Kind

WHAT = {"workload": "sets what both copies train (the workload)", "verdict": "sets how the copies are judged (the "
        "tolerance)"}


def check(ctx: Context) -> List[Finding]:
    if grid_evidence.fixes(ctx.rows):
        return []
    hiding = grid_evidence.fixes(ctx.rows, workload=True)
    if not hiding:
        return []
    factors = list(dict.fromkeys(f["factor"] for f in hiding[:3]))
    return [KIND.make(levels=[f["override"] for f in hiding], evidence=("status", "overrides", "config roles"),
                      overrides=[f["override"] for f in hiding[:3]],
                      why=[f"{factor} {WHAT[hiding_kind(factor) or 'workload']}" for factor in factors])]


KIND = Kind(
    code="V131", name="no fix proven", tier="proof",
    template="No fix proven: {overrides|or} passes in every failing job's place, but {why|; }, so it hides the drift, "
             "it does not fix it.",
    rests_on="the only levels that pass every failing job are a workload field's (replicated data, another optimizer) "
             "or a verdict field's (a looser tolerance)",
    not_claimed="that the fault is in the data or the tolerance",
    check=check,
    example={"overrides": ["data.split=replicated"],
             "why": ["data.split sets what both copies train (the workload)"]},
)
