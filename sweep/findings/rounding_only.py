"""V110 rounding only: every differing job stays within its rounding envelope, no job fails."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import judged
from sweep.analysis.rounding import envelope
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.quiet import OPENING, case, sizes, opening
from sweep.findings.shared import dtypes, rounding


def check(ctx: Context) -> List[Finding]:
    if case(ctx) != "rounding":
        return []
    jobs = rounding(ctx)
    top = max(jobs, key=lambda r: float((envelope(r).get("loss") or {}).get("ratio") or 0.0))
    return [KIND.make(**opening(ctx), jobs=[r["job"] for r in jobs], evidence=("envelope", "first_real_step"),
                      n=len(jobs), judged=len(judged(ctx.rows)), dtypes=dtypes(jobs), job=top["job"],
                      margin=float(envelope(top).get("margin") or 0.0),
                      times=float((envelope(top).get("loss") or {}).get("ratio") or 0.0), **sizes(jobs))]


KIND = Kind(
    code="V110", name="rounding only", tier="decides",
    template=OPENING + ". {n} of {judged} differ by float rounding only, each within {margin:g}x its rounding "
             "envelope ({dtypes|or}), up to {size:.1e}[, {ratio:.2g}x the tolerance]; nearest that bound: job {job}, "
             "at {times:.2g}x its envelope; no factor moves them beyond rounding, and no sign or size of theirs is a contrast.",
    headline=OPENING + ". {n} of {judged} differ by float rounding only, each within its rounding envelope "
             "({dtypes|or}), up to {size:.1e}[, {ratio:.2g}x the tolerance].",
    rests_on="every differing job's losses, traced tensors and updates stay within their rounding envelope (the "
             "standalone copy's twin, nudged by one unit in the last place, measures it)",
    not_claimed="a cause: rounding has a size and a sign, but no cause; nor that no fault exists: one smaller than "
                "the rounding, or only in steps no tracing rerun covered, the losses cannot tell",
    check=check,
    example={"nofail": True, "tolerance": None, "unjudged": None, "n": 16, "judged": 32, "margin": 4.0,
             "dtypes": ["bfloat16"], "size": 6e-5, "ratio": 0.2, "times": 1.4, "job": 17},
)
