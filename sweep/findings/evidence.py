"""V120 pair evidence: what each named level's one-factor pairs show, and which way its failing
jobs drift."""

from __future__ import annotations

from typing import Any, Dict, List

from sweep.analysis.compare import RANDOM_DRAWS_NOTE
from sweep.analysis.grid import failed
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import decision, name, pairs_values, signature


def _one(ctx: Context, c: Dict[str, Any]) -> Finding:
    failing = [r for r in ctx.rows if r["job"] in set(c["failing_jobs"]) and failed(r)]
    found = signature(failing)
    if (found["nonfinite"] is not None or found["nonfinite_from"] is not None) and not found["mean"]:
        found = dict(found, direction=None)  # equal where finite: no direction to read
    mean, direction = found["mean"], found["direction"]
    # the steps' share gives the sign; a mean of the other sign comes from a few large steps (a one-step fault's)
    against = mean is not None and (direction == "runs low" and mean > 0 or direction == "runs high" and mean < 0)
    return KIND.make(jobs=c["failing_jobs"], levels=[name(c)], strength=c["score"], against=against,
                     evidence=("status", "mean_signed_diff", "runs_low_pct", "envelope.loss.sign"),
                     to_pass=c["to_pass"] or None, direction=found["direction"], mean=found["mean"],
                     low_pct=found["low_pct"], nonfinite=found["nonfinite"], nonfinite_in=found["nonfinite_in"],
                     nonfinite_from=found["nonfinite_from"],
                     rounded=c["rounded_levels"] if c["rounded_levels"] and not c["exposes_only"] else None,
                     rounded_max=c["rounded_max_abs"], draws=RANDOM_DRAWS_NOTE if c.get("random_draws_only") else None,
                     **pairs_values(c))


def check(ctx: Context) -> List[Finding]:
    found = decision(ctx)
    if found is None:
        return []
    return [_one(ctx, c) for c in found["named"]]


KIND = Kind(
    code="V120", name="pair evidence", tier="proof",
    template="{name}: fails in {to_fail} of {partners} one-factor pairs where {factor}={others|/} passes"
             "[; losses non-finite in both copies from step {nonfinite}][; the {nonfinite_in} loss non-finite from "
             "step {nonfinite_from}, the other copy's finite][; distributed {direction} (mean signed diff "
             "{mean:+.3g}[{against|if}, from a few large steps the other way][; below standalone on {low_pct:.0f}% of "
             "steps])][; passes in {to_pass} pairs where the other "
             "level fails][; the passing {factor}={rounded|/} jobs differ from standalone by float rounding only (max "
             "|diff| {rounded_max:.3g}), not by the drift][; but every such failing job notes: {draws}].",
    rests_on="the named level's one-factor pairs; a job's sign only from its steps beyond its rounding envelope, "
             "where one sign holds on 75 % of them, and a direction for the jobs only where 75 % of them hold it and "
             "none the other way",
    not_claimed="a sign where the jobs' differences take both, or are within their envelope",
    check=check,
    example={"name": "optimizer=sgd", "factor": "optimizer", "to_fail": 3, "partners": 3, "others": ["adam"],
             "nonfinite": None, "nonfinite_in": None, "nonfinite_from": None, "direction": "runs low",
             "mean": -0.5, "low_pct": 100.0, "to_pass": None,
             "against": False,
             "rounded": None, "rounded_max": None, "draws": None},
)
