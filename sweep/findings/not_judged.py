"""V161 not judged: a job that ended error, timeout or missing."""

from __future__ import annotations

from typing import Dict, List, Tuple

from sweep.analysis.grid import JUDGED
from sweep.findings.base import Context, Finding, Kind


SHOWN = 8  # job numbers written out in one finding; the rest counted


def check(ctx: Context) -> List[Finding]:
    """One finding per status and reason: the jobs that share them (a grid whose half errors on
    one invalid combination says it once, not once per job)."""
    by_cause: Dict[Tuple[str, str], List[int]] = {}
    for r in ctx.rows:
        if r["status"] not in JUDGED:
            by_cause.setdefault((r["status"], r.get("reason") or "no reason recorded"), []).append(r["job"])
    out = []
    for (status, reason), jobs in by_cause.items():
        more = f" and {len(jobs) - SHOWN} more" if len(jobs) > SHOWN else ""
        shown = ", ".join(str(j) for j in jobs[:SHOWN]) + more
        out.append(KIND.make(jobs=jobs, evidence=("status", "reason"), job=shown, n=len(jobs), status=status,
                             reason=reason))
    return out


KIND = Kind(
    code="V161", name="not judged", tier="limits",
    template="Not judged: job{n|s} {job} {status}: {reason}.",
    rests_on="the job ended error, timeout or missing: excluded from pass rates, pairs and culprits",
    not_claimed="anything about that job's numerics",
    check=check, example={"job": "3", "n": 1, "status": "timeout", "reason": "no result after 120 s from 1"},
)
