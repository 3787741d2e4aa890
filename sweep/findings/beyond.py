"""V112 levels beyond the envelope: the levels that hold every job beyond its rounding envelope."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import carrier, judged, label
from sweep.analysis.rounding import envelope
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.quiet import OPENING, case, sizes, opening
from sweep.findings.shared import differ, real


def check(ctx: Context) -> List[Finding]:
    if case(ctx) != "beyond":
        return []
    found, held = carrier(ctx.rows, real(ctx))
    names = [f"{factor}=" + " or ".join(label(v) for v in values) for factor, values in found]
    jobs = real(ctx)
    one, share = len(names) == 1, held != len(jobs)  # several factors tie: each level holds ``held`` jobs
    # the losses where every such job's left their envelope; else the copies (an update or a traced tensor did)
    by_losses = all((envelope(r).get("loss") or {}).get("within") is False for r in jobs)
    return [KIND.make(**opening(ctx), jobs=[r["job"] for r in jobs], levels=names,
                      what="the losses" if by_losses else "the copies",
                      how=None if by_losses else "their updates or traced tensors, if not their losses",
                      evidence=("first_real_step", "envelope"), names=names, n=len(jobs),
                      held=held if share else None, count=held if share else len(jobs),
                      verb="moves" if one else "move", whose="its" if one else "the",
                      each=None if one or not share else "each of these levels holds",
                      rest=(len(differ(ctx)) - len(jobs)) or None,
                      equal=(len(judged(ctx.rows)) - len(differ(ctx))) or None, **sizes(jobs))]


KIND = Kind(
    code="V112", name="levels beyond the envelope", tier="decides",
    template=OPENING + ". Only {names|and} {verb} {what} beyond their rounding envelope[ ({how})]: {n} "
             "[of {whose} {held} ]"
             "job{count|s}[ {each}], up to {size:.1e}[, {ratio:.2g}x the tolerance][, from step {since}]"
             "[; the other {rest} differ{rest|?s:} by rounding only][; {equal} job{equal|s} equal to standalone bit "
             "for bit].",
    rests_on="every job beyond its rounding envelope (its losses, a traced tensor or an update beyond the twin's) "
             "has one of those levels and some jobs have neither (within their envelope, or equal to standalone with "
             "every differing job's envelope measured); the factors whose levels hold the fewest jobs are "
             "named; jobs within their envelope never count toward a level",
    not_claimed="that every job at those levels carries the drift (the share says), that the drift would fail a "
                "tighter tolerance, or its sign",
    check=check,
    example={"nofail": True, "tolerance": None, "unjudged": None, "names": ["engine=faulty"], "n": 2, "held": None,
             "what": "the losses", "how": None,
             "verb": "moves", "count": 2, "whose": "its", "each": None, "size": 4e-5, "ratio": 0.4, "since": 1,
             "rest": 2, "equal": None},
)
