"""V155 ran another precision: jobs whose mp_policy (or a per-module override) did not run as configured."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import judged
from sweep.analysis.rounding import policy_departed
from sweep.findings.base import Context, Finding, Kind


def check(ctx: Context) -> List[Finding]:
    jobs = [r["job"] for r in judged(ctx.rows) if policy_departed(r)]
    return [KIND.make(jobs=jobs, evidence=("dtypes", "notes"), n=len(jobs), listed=jobs[:4])] if jobs else []


KIND = Kind(
    code="V155", name="ran another precision", tier="context",
    template="{n} job{n|s} ran another precision than configured (job{n|s} {listed}): see the notes.",
    rests_on="a job's mp_policy (or a per-module override) did not run as configured; such a job is never called "
             "rounding",
    not_claimed="that its losses differ: with baseline.precision=policy both copies may skip it alike",
    check=check, example={"n": 1, "listed": [1]},
)
