"""V111 one level moves the losses: exactly the jobs at one level differ, none fails."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import judged, label, separating_level
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.quiet import OPENING, case, sizes, opening
from sweep.findings.shared import differ, dtypes, rounding


def check(ctx: Context) -> List[Finding]:
    if case(ctx) != "level":
        return []
    factor, value = separating_level(ctx.rows, differ(ctx))
    jobs = differ(ctx)
    within = len(rounding(ctx)) == len(jobs)
    return [KIND.make(**opening(ctx), jobs=[r["job"] for r in jobs], levels=[f"{factor}={label(value)}"],
                       evidence=("first_diff_step", "envelope"), name=f"{factor}={label(value)}", n=len(jobs),
                       within=dtypes(jobs) if within else None, beyond=not rounding(ctx),
                       rest=len(judged(ctx.rows)) - len(jobs), **sizes(jobs))]


KIND = Kind(
    code="V111", name="one level moves the losses", tier="decides",
    template=OPENING + ". Only {name} moves the losses: its {n} job{n|s}, by up to {size:.1e}[, {ratio:.1g}x the "
             "tolerance][, each within its rounding envelope ({within|or})][{beyond|if}, beyond its rounding envelope]"
             "[, from step {since}]; the other {rest} equal{rest|?s:} standalone bit for bit.",
    rests_on="exactly the jobs at that level differ from standalone, and none fails for a cause (a job that fails the "
             "tolerance within its rounding envelope is said so)",
    not_claimed="that the difference is a fault: a precision differs by design, within what its rounding does",
    check=check,
    example={"nofail": True, "tolerance": None, "unjudged": None, "name": "mp_policy=bf16", "n": 16, "size": 6e-5, "ratio": 0.2, "within": ["bfloat16"],
             "beyond": False, "since": 0, "rest": 16},
)
