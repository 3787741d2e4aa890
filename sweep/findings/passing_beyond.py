"""V157 passing beyond the envelope: beside jobs that fail for a cause, passing jobs whose
differences leave their rounding envelope (a second, smaller fault the tolerance does not fail),
but those an exposer's finding names already (the drift its other level hides, V102, V123)."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import carrier, label
from sweep.analysis.rounding import measured
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.quiet import sizes
from sweep.findings.shared import decision, faults, real


def check(ctx: Context) -> List[Finding]:
    if not faults(ctx):  # no job fails for a cause: the quiet cases (V112) say where the losses leave it
        return []
    found = decision(ctx) or {"kind": None, "named": [], "exposers": []}
    hidden = found["named"] if found["kind"] == "exposed" else []  # the drift an exposer's other level hides (V102)
    said = {j for c in hidden for j in c.get("hidden_jobs") or []} | {t["separating_job"] for t in found["exposers"]}
    jobs = [r for r in real(ctx) if r["status"] == "ok" and measured(r) and r["job"] not in said]  # (unmeasured: V160)
    if not jobs:
        return []
    held = carrier(ctx.rows, jobs)
    names = [f"{factor}=" + " or ".join(label(v) for v in values) for factor, values in held[0]] if held else []
    return [KIND.make(jobs=[r["job"] for r in jobs], levels=names, evidence=("status", "first_real_step", "envelope"),
                      n=len(jobs), names=names or None, listed=[r["job"] for r in jobs][:4], **sizes(jobs))]


KIND = Kind(
    code="V157", name="passing beyond the envelope", tier="contrast",
    template="Passing, yet beyond their rounding envelope: {n} job{n|s}[ ({names|and})] (job{n|s} {listed}), up to "
             "{size:.1e}[, {ratio:.2g}x the tolerance][, from step {since}]: a departure the tolerance does not fail, "
             "apart from the jobs that fail.",
    rests_on="each passing job's losses, traced tensors and updates against its own rounding envelope (the twin); "
             "the levels named hold every such job and some others lack them",
    not_claimed="that they share the failing jobs' cause, nor that a tighter tolerance would fail them",
    check=check,
    example={"n": 1, "names": ["engine.impl.torch=Rank1FromStep10"], "listed": [2], "size": 8.2e-7, "ratio": 0.008,
             "since": 11},
)
