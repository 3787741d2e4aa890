"""V125 confounded: no single swept factor separates a failing job from a passing one."""

from __future__ import annotations

from typing import List

from sweep.analysis import culprits as grid_evidence
from sweep.analysis.grid import label
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import candidates, faults


def check(ctx: Context) -> List[Finding]:
    if not faults(ctx) or candidates(ctx) or ctx.decided():
        return []
    mixed = grid_evidence.confounded(ctx.rows)
    if mixed is None:
        return []
    first = mixed["factors"][0]["factor"]
    return [KIND.make(jobs=[mixed["failing"], mixed["passing"]],
                      levels=[f"{f['factor']}={label(f['failing_level'])}" for f in mixed["factors"]],
                      evidence=("status", "overrides"), failing=mixed["failing"], passing=mixed["passing"],
                      factors=[f["factor"] for f in mixed["factors"]],
                      names=[f"{f['factor']}={label(f['failing_level'])}" for f in mixed["factors"]],
                      job=" ".join(mixed["separate_with"][first]))]


KIND = Kind(
    code="V125", name="confounded", tier="decides",
    template="No single swept factor separates a failing job from a passing one: the nearest pair (job {failing} "
             "fails, job {passing} passes) differs in {factors} together. Indistinguishable in this sweep: "
             "{names|or} (or only together); to separate them, add the job {job}.",
    headline="No single swept factor separates a failing job from a passing one: see the details.",
    rests_on="the failing job and its nearest passing job differ in two or more factors, and no one-factor pair flips",
    not_claimed="which of the factors, or whether only their combination, causes it",
    check=check,
    example={"failing": 1, "passing": 0, "factors": ["fa", "fb"], "names": ["fa=y", "fb=q"], "job": "c=1 fa=x fb=q"},
)
