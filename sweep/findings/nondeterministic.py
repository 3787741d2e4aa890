"""V151 nondeterministic: a job's repeats (repeat=N) disagree."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import JUDGED, judged
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import decision


def check(ctx: Context) -> List[Finding]:
    found = decision(ctx)
    evidence = {j for c in found["named"] for j in c["failing_jobs"]} if found else {r["job"] for r in judged(ctx.rows)}
    out = []
    for r in ctx.rows:
        if not r.get("nondeterministic") or r["status"] not in JUDGED:
            continue
        spread = r.get("repeat_spread") or {}
        worst = max(spread.get("distributed_max_abs") or 0.0, spread.get("standalone_max_abs") or 0.0)
        statuses = spread.get("statuses") or []
        fails = spread.get("first_fail_range")
        out.append(KIND.make(
            jobs=[r["job"]], evidence=("repeats", "repeat_spread"), job=r["job"], repeats=spread.get("repeats", "?"),
            spread=worst, statuses=statuses if len(set(statuses)) > 1 else None,
            fails=(f"{fails[0]}" + (f"-{fails[1]}" if fails[1] != fails[0] else "")) if fails else None,
            rests=r["job"] in evidence, outside=r["job"] not in evidence))
    return out


KIND = Kind(
    code="V151", name="nondeterministic", tier="context",
    template="Nondeterministic[{outside|if}, but not part of the evidence above]: job {job} ({repeats} repeats differ by "
             "up to {spread:.3g}[, status {statuses|/}][, first failing step {fails}])[{rests|if}; this verdict rests on "
             "it, and a rerun may judge differently].",
    rests_on="repeat=N: the job's launches (same config and seeds) give different losses or statuses",
    not_claimed="which kernel or collective is nondeterministic",
    check=check,
    example={"job": 3, "repeats": 3, "spread": 1.2e-3, "statuses": ["ok", "fail"], "fails": "40-52", "rests": True,
             "outside": False},
)
