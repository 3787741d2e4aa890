"""V152 repeats agree: every repeated job gave the same losses in every launch."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import judged
from sweep.findings.base import Context, Finding, Kind


def check(ctx: Context) -> List[Finding]:
    if any(r.get("nondeterministic") for r in judged(ctx.rows)):
        return []
    repeated = [r for r in judged(ctx.rows) if r.get("nondeterministic") is False]
    return [KIND.make(jobs=[r["job"] for r in repeated], evidence=("repeats",), n=len(repeated))] if repeated else []


KIND = Kind(
    code="V152", name="repeats agree", tier="context",
    template="Repeats agree: each of the {n} repeated job{n|s} gave the same losses in every launch.",
    rests_on="repeat=N: every repeated job's launches give the same losses and status",
    not_claimed="determinism under another config or machine",
    check=check, example={"n": 2},
)
