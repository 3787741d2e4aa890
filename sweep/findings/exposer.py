"""V123 exposer: a level tied with the culprit only shows the drift its other level hides."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import label
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import decision, name


def check(ctx: Context) -> List[Finding]:
    found = decision(ctx)
    if found is None:
        return []
    return [KIND.make(jobs=[t["separating_job"]], levels=[name(t)], evidence=("status", "first_real_step"),
                      name=name(t), job=t["separating_job"], factor=t["factor"], other=label(t["other_level"]),
                      size=t["separating_max_abs"], step=t["separating_first_diff"])
            for t in found["exposers"]]


KIND = Kind(
    code="V123", name="exposer", tier="proof",
    template="{name} exposes it, it does not cause it: job {job} ({factor}={other}) passes but differs from standalone "
             "too, below tolerance (max |diff| {size:.3g}, from step {step}), so {factor}={other} hides the drift, it "
             "does not remove it.",
    rests_on="the level fails in the same jobs as the culprit, and the job with the culprit alone passes but differs "
             "beyond its rounding envelope",
    not_claimed="that the other level is free of the fault, or that the level plays no part in its size",
    check=check,
    example={"name": "optimizer=sgd", "job": 2, "factor": "optimizer", "other": "adam", "size": 3e-5, "step": 1},
)
