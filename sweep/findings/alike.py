"""V104 weighed alike: several levels with equal scores, each failing where its other level passes."""

from __future__ import annotations

from typing import List

from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import decision, name


def check(ctx: Context) -> List[Finding]:
    found = decision(ctx)
    if found is None or found["kind"] != "alike":
        return []
    named, top = found["named"], found["top"]
    return [KIND.make(jobs=sorted({j for c in named for j in c["failing_jobs"]}), levels=[name(c) for c in named],
                      strength=top["score"], evidence=("status", "overrides"), names=[name(c) for c in named],
                      word="Exposed by, not caused by" if top.get("exposes_only") else "Culprits",
                      to_fail=top["to_fail"], partners=top.get("passing_pairs", top["pairs"]))]


KIND = Kind(
    code="V104", name="weighed alike", tier="decides",
    template="{word}, weighed alike: {names|and}, each failing in {to_fail} of {partners} one-factor pairs where its "
             "other level passes.",
    rests_on="several levels (two of one factor too) with equal scores and flips, each failing where its other "
             "level passes, in other jobs; the evidence of each follows (V120)",
    not_claimed="which of them is the cause, or that they act alone",
    check=check,
    example={"word": "Culprits", "names": ["mesh=dp4", "mp_policy=bf16"], "to_fail": 2, "partners": 4},
)
