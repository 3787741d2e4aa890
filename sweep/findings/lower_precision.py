"""V156 lower precision: jobs that differ by rounding compute in a lower precision than their
standalone copy: what parts them is that precision's rounding, and baseline.precision=policy
compares the engines alone."""

from __future__ import annotations

from typing import List

from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import lower_precision, rounding


def runs(jobs: List[int]) -> List[str]:
    """Job numbers with each run of consecutive ones as ``first-last`` (``[16, ..., 31]`` ->
    ``["16-31"]``; ``[1, 2, 3, 5]`` -> ``["1-3", "5"]``)."""
    spans: List[List[int]] = []
    for job in sorted(set(jobs)):
        if spans and spans[-1][1] == job - 1:
            spans[-1][1] = job
        else:
            spans.append([job, job])
    return [str(a) if a == b else f"{a}-{b}" for a, b in spans]


def check(ctx: Context) -> List[Finding]:
    jobs = [r for r in rounding(ctx) if lower_precision(r)]
    if not jobs:
        return []
    return [KIND.make(jobs=[r["job"] for r in jobs], evidence=("config.mp_policy", "config.baseline.precision"),
                      dtypes=sorted({lower_precision(r) for r in jobs}),
                      n=len(jobs), which=runs([int(r["job"]) for r in jobs]),
                      of=len(rounding(ctx)) if len(jobs) < len(rounding(ctx)) else None)]


KIND = Kind(
    code="V156", name="lower precision", tier="context",
    template="The float rounding of job{n|s} {which|and}[ (of the {of} that differ by rounding only)] comes from a "
             "{dtypes|or} forward against a float32 standalone copy: baseline.precision=policy compares the engines "
             "alone.",
    rests_on="the jobs that differ by rounding only whose mp_policy.param_dtype is lower than their standalone "
             "copy's precision (baseline.precision=float32)",
    not_claimed="a fault: their difference stays within that precision's rounding envelope",
    check=check, example={"dtypes": ["bfloat16"], "n": 2, "which": ["3", "5"], "of": None},
)
