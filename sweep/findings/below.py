"""V113 below tolerance: jobs differ beyond their envelope (or unmeasured), below tolerance, no level holds them."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import judged
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.quiet import OPENING, case, sizes, opening
from sweep.analysis.rounding import envelope
from sweep.findings.shared import differ, real


def check(ctx: Context) -> List[Finding]:
    if case(ctx) != "below":
        return []
    jobs = differ(ctx)
    # measured beyond their envelope (the losses, a traced tensor or an update): more than rounding, said so
    beyond = [r for r in real(ctx) if envelope(r).get("measured")]
    loss_ratios = [float(envelope(r)["loss"]["ratio"]) for r in beyond
                   if (envelope(r).get("loss") or {}).get("within") is False and envelope(r)["loss"].get("ratio")]
    return [KIND.make(**opening(ctx), jobs=[r["job"] for r in jobs], evidence=("first_diff_step", "first_real_step"),
                      n=len(jobs), judged=len(judged(ctx.rows)), **sizes(jobs), beyond=len(beyond) or None,
                      times=max(loss_ratios) if loss_ratios else None)]


KIND = Kind(
    code="V113", name="below tolerance", tier="decides",
    template=OPENING + ". {n} of {judged} differ below tolerance, up to {size:.1e}[, {ratio:.2g}x the tolerance]"
             "[, from step {since}][; {beyond} of them beyond {beyond|?its:their} rounding envelope[ (the losses up to "
             "{times:.3g}x it)]: more than float rounding].",
    rests_on="jobs differ beyond their rounding envelope (or without one measured), under tolerance, and no level "
             "holds them",
    not_claimed="which factor: the place of the earliest follows",
    check=check, example={"nofail": True, "tolerance": None, "unjudged": None, "n": 4, "judged": 4, "size": 4e-5,
                          "ratio": 0.4, "since": 0, "beyond": 2, "times": 645.0},
)
