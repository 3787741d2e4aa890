"""V115 equal to the printed precision: losses read from rounded text are equal."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import judged
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.quiet import OPENING, case, opening
from sweep.findings.shared import worst


def check(ctx: Context) -> List[Finding]:
    if case(ctx) != "printed":
        return []
    return [KIND.make(**opening(ctx), jobs=[r["job"] for r in judged(ctx.rows)], evidence=("resolution",),
                         printed=worst(judged(ctx.rows), "resolution"))]


KIND = Kind(
    code="V115", name="equal to the printed precision", tier="decides",
    template=OPENING + ": every[{unjudged|if} judged] job equals standalone to the printed precision ({printed:.0e})[ ({unjudged} "
             "not judged: an error, a time-out or no result yet)].",
    rests_on="losses read from rounded text (a command's output) are equal at every step",
    not_claimed="equality below the printed digits",
    check=check, example={"nofail": True, "tolerance": None, "unjudged": None, "printed": 1e-4},
)
