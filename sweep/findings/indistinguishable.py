"""V124 indistinguishable: levels that fail in the same jobs, and the job that would separate them."""

from __future__ import annotations

from typing import List

from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import decision, name


def check(ctx: Context) -> List[Finding]:
    found = decision(ctx)
    if found is None or not found["tied"]:
        return []
    tied = found["tied"]
    return [KIND.make(jobs=found["top"]["failing_jobs"], levels=[name(found["top"]), *(name(t) for t in tied)],
                      evidence=("status", "overrides"), names=[name(found["top"]), *(name(t) for t in tied)],
                      job=" ".join(tied[0]["separate_with"]))]


KIND = Kind(
    code="V124", name="indistinguishable", tier="proof",
    template="Indistinguishable in this sweep: {names|or} (they fail in the same jobs); to separate them, add the "
             "job {job}.",
    rests_on="the levels fail in the same jobs with equal scores, and the job with one without the other did not run",
    not_claimed="which of them causes it",
    check=check, example={"names": ["fa=y", "fb=q"], "job": "c=1 fa=x fb=q"},
)
