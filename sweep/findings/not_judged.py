"""V161 not judged: a job that ended error, timeout or missing."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import JUDGED
from sweep.findings.base import Context, Finding, Kind


def check(ctx: Context) -> List[Finding]:
    return [KIND.make(jobs=[r["job"]], evidence=("status", "reason"), job=r["job"], status=r["status"],
                            reason=r.get("reason") or "no reason recorded")
            for r in ctx.rows if r["status"] not in JUDGED]


KIND = Kind(
    code="V161", name="not judged", tier="limits",
    template="Not judged: job {job} {status}: {reason}.",
    rests_on="the job ended error, timeout or missing: excluded from pass rates, pairs and culprits",
    not_claimed="anything about that job's numerics",
    check=check, example={"job": 3, "status": "timeout", "reason": "no result after 120 s from 1"},
)
