"""V140 also: the other culprit candidates, ranked below the one that decides."""

from __future__ import annotations

from typing import List

from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import candidates, decision, name


def check(ctx: Context) -> List[Finding]:
    found = decision(ctx)
    if found is None:
        return []
    said = {name(c) for c in found["named"]} | {name(t) for t in found["together"] + found["exposers"] + found["tied"]}
    # a level whose failing jobs only draw random numbers on sharded data: V153 and V105 say what that shows
    rest = [c for c in candidates(ctx) if name(c) not in said and not c.get("random_draws_only")]
    if not rest:
        return []
    return [KIND.make(jobs=sorted({j for c in rest for j in c["failing_jobs"]}), levels=[name(c) for c in rest],
                      evidence=("status", "overrides"), names=[name(c) for c in rest[:3]],
                      more=len(rest) - 3 if len(rest) > 3 else None)]


KIND = Kind(
    code="V140", name="also", tier="contrast",
    template="Also failing where another level passes, fewer times: {names}[ (+{more})].",
    rests_on="other levels whose one-factor pairs turn more passes into fails than the reverse, ranked below the one "
             "named (summary.json's `culprits` lists each with its numbers), but for one whose failing jobs only draw "
             "random numbers on sharded data (V153 says what that shows)",
    not_claimed="that they cause anything: their pairs are fewer or weaker",
    check=check, example={"names": ["mesh=dp4", "mp_policy=bf16"], "more": None},
)
