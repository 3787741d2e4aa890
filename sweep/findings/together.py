"""V103 only together: two levels fail in the same jobs, and the job with either alone passes."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import label
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import decision, name, pairs_values


def check(ctx: Context) -> List[Finding]:
    found = decision(ctx)
    if found is None or found["kind"] != "together":
        return []
    top, together = found["top"], found["together"]
    passing = [f"job {t['separating_job']} ({t['factor']}={label(t['other_level'])})" for t in together]
    return [KIND.make(jobs=top["failing_jobs"] + [t["separating_job"] for t in together],
                      levels=[name(top), *(name(t) for t in together)], strength=top["score"],
                      evidence=("status", "overrides", "envelope"), names=[name(top), *(name(t) for t in together)],
                      passing=passing, **{k: v for k, v in pairs_values(top).items() if k != "name"})]


KIND = Kind(
    code="V103", name="only together", tier="decides",
    template="Only together: {names|and} fail in the same jobs, and {passing|and} pass{passing|?es:}: an interaction, "
             "not one factor.",
    headline="Only together: {names|and} fail, an interaction, not one factor (failing in {to_fail} of {partners} "
             "one-factor pairs[ where {factor}={others|/} passes]).",
    rests_on="the levels fail in the same jobs, and the job with either one alone ran and passed within its rounding "
             "envelope",
    not_claimed="which of the two the fix belongs to",
    check=check,
    example={"names": ["weights.transfer=shared", "order=standalone_first"], "passing": ["job 2 (order=separate)"],
             "factor": "weights.transfer", "to_fail": 1, "partners": 1, "others": ["independent"]},
)
