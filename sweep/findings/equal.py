"""V114 equal: every job equals standalone bit for bit."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import judged
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.quiet import OPENING, case, opening


def check(ctx: Context) -> List[Finding]:
    if case(ctx) != "equal":
        return []
    return [KIND.make(**opening(ctx), jobs=[r["job"] for r in judged(ctx.rows)], evidence=("first_diff_step",))]


KIND = Kind(
    code="V114", name="equal", tier="decides",
    template=OPENING + ": every[{unjudged|if} judged] job equals standalone bit for bit[ ({unjudged} not judged: "
             "an error, a time-out or no result yet)].",
    rests_on="every judged job's losses are equal at every step",
    not_claimed="equality of the weights beyond the recorded steps",
    check=check, example={"nofail": True, "tolerance": None, "unjudged": None},
)
