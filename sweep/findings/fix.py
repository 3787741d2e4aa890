"""V130 fix proven: a level with which every failing job passes, nothing else changed."""

from __future__ import annotations

from typing import List

from sweep.analysis import culprits as grid_evidence
from sweep.findings.base import Context, Finding, Kind


def check(ctx: Context) -> List[Finding]:
    found = grid_evidence.fixes(ctx.rows)
    if not found:
        return []
    pairs = found[0]["jobs"]
    shown = [f"{a} -> {b}" for a, b in pairs[:4]]
    return [KIND.make(jobs=[j for pair in pairs for j in pair], levels=[f["override"] for f in found],
                      evidence=("status", "overrides", "envelope", "collectives.notes", "optimizer.notes"),
                      overrides=[f["override"] for f in found[:3]], pairs=shown,
                      more=len(pairs) - 4 if len(pairs) > 4 else None)]


KIND = Kind(
    code="V130", name="fix proven", tier="proof",
    template="Fix proven by this sweep: {overrides|or}; every failing job passes with it, nothing else changed (jobs "
             "{pairs}[ (+{more})]).",
    rests_on="every failing job's overrides with that one factor at that level ran and passed, equal to standalone or "
             "within its rounding envelope, without a departure from the engine's contract its failing job has too; "
             "never a level of what both copies train (the workload) or of how they are judged",
    not_claimed="that the override is right in other grids, or that it is the only fix",
    check=check, example={"overrides": ["mesh=dp4"], "pairs": ["1 -> 0", "3 -> 2"], "more": None},
)
