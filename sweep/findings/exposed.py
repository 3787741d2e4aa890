"""V102 exposed by, not caused by: the top level only shows a drift its other level hides
below tolerance."""

from __future__ import annotations

from typing import List

from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import decision, name, pairs_values


def check(ctx: Context) -> List[Finding]:
    found = decision(ctx)
    if found is None or found["kind"] != "exposed":
        return []
    top = found["top"]
    return [KIND.make(jobs=top["failing_jobs"] + top["hidden_jobs"], levels=[name(top)], strength=top["score"],
                      evidence=("status", "first_diff_step", "first_real_step", "envelope"),
                      hidden=top["hidden_max_abs"], failing=top["failing_max_abs"], **pairs_values(top))]


KIND = Kind(
    code="V102", name="exposed by", tier="decides",
    template="Exposed by, not caused by: {name}, failing in {to_fail} of {partners} one-factor pairs where "
             "{factor}={others|/} passes; but the passing jobs differ from standalone too, beyond their rounding "
             "envelope, below tolerance (max |diff| {hidden:.3g} against {failing:.3g}): the drift is present at "
             "both levels, {name} exposes it and {factor}={others|/} hides it below tolerance; {factor} changes its size, it does "
             "not cause it.",
    headline="Exposed by, not caused by: {name}, failing in {to_fail} of {partners} one-factor pairs where "
             "{factor}={others|/} passes.",
    rests_on="the culprit's pairs, and every passing partner differs from standalone beyond its rounding envelope",
    not_claimed="that the other level is free of the fault: it only hides it below tolerance",
    check=check,
    example={"name": "optimizer=sgd", "factor": "optimizer", "to_fail": 2, "partners": 2, "others": ["adam"],
             "hidden": 3e-5, "failing": 0.3},
)
