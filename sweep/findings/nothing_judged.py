"""V100 nothing judged: no job produced a comparison."""

from __future__ import annotations

from collections import Counter
from typing import List

from sweep.analysis.grid import judged
from sweep.findings.base import Context, Finding, Kind


def _short(reason: str, width: int = 120) -> str:
    text = (reason or "no reason recorded").splitlines()[0]
    return text if len(text) <= width else text[: width - 3] + "..."


def check(ctx: Context) -> List[Finding]:
    if not ctx.rows:
        return [KIND.make(evidence=("status",), reasons=None, empty=True)]
    if judged(ctx.rows):
        return []
    reasons = Counter(_short(r.get("reason") or "") for r in ctx.rows)
    return [KIND.make(jobs=[r["job"] for r in ctx.rows], evidence=("status", "reason"),
                      reasons=[f"{n} x {reason}" for reason, n in reasons.most_common(3)], empty=False)]


KIND = Kind(
    code="V100", name="nothing judged", tier="decides",
    template="[{reasons|if}Nothing could be judged: no job produced a comparison ({reasons|; })][{empty|if}nothing to "
             "judge].",
    headline="[{reasons|if}Nothing could be judged: no job produced a comparison][{empty|if}nothing to judge].",
    rests_on="every job is error, timeout or missing",
    not_claimed="anything about the numerics: nothing ran to the end",
    check=check, example={"reasons": ["2 x no result from rank(s) 1: exit 1"], "empty": False},
)
