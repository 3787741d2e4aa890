"""V000 counts: how many jobs the sweep holds, by status. Always the first finding."""

from __future__ import annotations

from collections import Counter
from typing import List

from sweep.analysis.grid import STATUSES
from sweep.findings.base import Context, Finding, Kind


def check(ctx: Context) -> List[Finding]:
    counts = Counter(r["status"] for r in ctx.rows)
    return [KIND.make(jobs=[r["job"] for r in ctx.rows], evidence=("status",), total=len(ctx.rows),
                      counts=[f"{counts[s]} {s}" for s in STATUSES if counts[s]], sep="." if ctx.rows else ":")]


KIND = Kind(
    code="V000", name="counts", tier="answer",
    template="{total} job{total|s}[: {counts}]{sep}",
    rests_on="each job's status: ok or fail against rtol/atol, error, timeout, or missing (not judged)",
    not_claimed="anything about the jobs not judged, beyond their count",
    check=check, headline="{total} job{total|s}[: {counts}]{sep}",
    example={"total": 32, "counts": ["30 ok", "2 fail"], "sep": "."},
)
