"""V101 culprit: the level that turns a pass into a fail in most of its one-factor pairs."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import label
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import decision, name, pairs_values


def check(ctx: Context) -> List[Finding]:
    found = decision(ctx)
    if found is None or found["kind"] != "culprit":
        return []
    top = found["top"]
    exposers = found["exposers"]
    return [KIND.make(jobs=top["failing_jobs"], levels=[name(top)], strength=top["score"],
                      evidence=("status", "overrides", "envelope.loss.within"),
                      exposers=[name(t) for t in exposers],
                      hiders=[f"{t['factor']}={label(t['other_level'])}" for t in exposers], **pairs_values(top))]


KIND = Kind(
    code="V101", name="culprit", tier="decides",
    template="Culprit: {name}, failing in {to_fail} of {partners} one-factor pairs[ where {factor}={others|/} passes]"
             "[; exposed by {exposers|and}, which {hiders|and} hides below tolerance]"
             "[; job{masked|s} {masked}[ and {masked_more} more] cannot show it: {masked|?its:their} rounding "
             "envelope is wider than the departure it makes].",
    rests_on="one-factor pairs in which changing the factor to this level turns a pass into a fail (a failure for a "
             "cause: a job that fails its tolerance only, within its rounding envelope, counts as passing); ranked "
             "by (flips to fail - flips to pass) / pairs, then flips, a cause before an exposer, a level of how "
             "the copies train before one of what they train; a pair whose pass differs only within a rounding "
             "envelope wider than the level's departure (a coarser precision) is left out: it cannot show it",
    not_claimed="that the level is wrong in itself: it is this grid's evidence; an isolation proves a minimal "
                "change between two configs",
    check=check,
    example={"name": "mesh=hsdp2x2", "factor": "mesh", "to_fail": 8, "partners": 8, "others": ["dp4"],
             "exposers": ["optimizer=sgd"], "hiders": ["optimizer=adam"], "masked": None,
             "masked_more": None},
)
