"""V108 no single factor: jobs fail for a cause, but no one-factor change turns a pass into a fail."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import judged, one_factor_pairs, passed
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import faults


def check(ctx: Context) -> List[Finding]:
    failing = faults(ctx)
    if not failing or ctx.decided():
        return []
    if not one_factor_pairs(ctx.rows):
        return []  # V126 says why no culprit can be named
    return [KIND.make(jobs=[r["job"] for r in failing], evidence=("status",),
                      every=not any(passed(r) for r in judged(ctx.rows)))]


KIND = Kind(
    code="V108", name="no single factor", tier="decides",
    template="No culprit among the swept factors: no one-factor change turns a pass into a fail[{every|if} (every "
             "judged job fails: the drift is common to all of them)].",
    headline="No single swept factor decides it: see the details.",
    rests_on="jobs fail for a cause, and no level turns a pass into a fail in its one-factor pairs",
    not_claimed="that nothing is wrong: every job may fail alike",
    check=check, example={"every": True},
)
