"""V126 no pairs: jobs fail, but no two judged jobs differ in exactly one factor."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import one_factor_pairs
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import faults


def check(ctx: Context) -> List[Finding]:
    if not faults(ctx) or ctx.decided() or one_factor_pairs(ctx.rows):
        return []
    return [KIND.make(jobs=[r["job"] for r in faults(ctx)], evidence=("overrides",))]


KIND = Kind(
    code="V126", name="no one-factor pairs", tier="decides",
    template="No culprit can be named: no two judged jobs differ in exactly one factor.",
    rests_on="the grid: every two judged jobs differ in two or more factors (or one job only)",
    not_claimed="that no factor causes it: the grid cannot tell",
    check=check, example={},
)
