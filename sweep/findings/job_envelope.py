"""J102 envelope: one job's rounding envelope, whether its losses stay within it, and where they
leave it."""

from __future__ import annotations

import math

from typing import List

from sweep.analysis.envelope import hold_text
from sweep.findings.base import Context, Finding, Kind

SOURCES = {"twin": "its twin, trained with this job", "cache": "its twin, from the sweep's cache",
           "file": "its twin, from the golden file", "repeats": "the spread of its repeats"}


def check(ctx: Context) -> List[Finding]:
    row = ctx.rows[0]
    record = row.get("result")
    if record is None or not record.comparison or row.get("first_diff_step") is None:
        return []
    found = record.envelope or {}
    if not found.get("measured"):
        return [KIND.make(jobs=[row["job"]], evidence=("envelope",), measured=False,
                          why=found.get("why") or "no twin trained", **dict.fromkeys(
                              ("dtype", "source", "margin", "within", "ratio", "nonfinite", "tolerance", "rtol",
                               "atol", "hold", "beyond", "step", "count", "sign")))]
    loss = found.get("loss") or {}
    within = bool(loss.get("within"))
    ratio = float(loss.get("ratio") or 0.0)  # inf (or NaN) where a loss is non-finite in one copy only
    tolerance = within and record.status == "fail" and not found.get("other_failures")
    return [KIND.make(jobs=[row["job"]], evidence=("envelope",),
                      strength=ratio if math.isfinite(ratio) else float("inf"),
                      steps={"beyond": loss.get("first_beyond_step")}, measured=True, why=None,
                      dtype=found.get("dtype") or "launch to launch",
                      source=SOURCES.get(str(found.get("source")), str(found.get("source"))),
                      margin=float(found.get("margin") or 0.0), within=within,
                      ratio=ratio if math.isfinite(ratio) else None, nonfinite=not math.isfinite(ratio),
                      tolerance=tolerance,
                      rtol=record.comparison.get("rtol"), atol=record.comparison.get("atol"),
                      hold=hold_text(loss.get("band")) or None if tolerance else None, beyond=not within,
                      step=loss.get("first_beyond_step"), count=loss.get("beyond_steps"),
                      sign={"low": "running low", "high": "running high"}.get(loss.get("sign") or ""))]


KIND = Kind(
    code="J102", name="envelope", tier="proof",
    template="[{measured|if}rounding envelope ({dtype}: {source})][{within|if}: the losses stay within {margin:g}x it "
             "at every step (at most {ratio:.2g}x)][{tolerance|if}; rtol={rtol}, atol={atol} is finer than this "
             "precision holds[, {hold} would hold]][{beyond|if}: the losses leave {margin:g}x it from step {step} "
             "({count} step{count|s}[, up to {ratio:.3g}x it][{nonfinite|if}, a loss non-finite in one copy]"
             "[, {sign}])]"
             "[rounding envelope not measured ({why}): nothing is "
             "called rounding]",
    rests_on="the job's record: the standalone copy's twin (its weights nudged by one unit in the last place) "
             "against the standalone copy, step by step, and the losses judged against it",
    not_claimed="what a fault within the envelope would be: the precision cannot tell it from rounding",
    check=check,
    example={"measured": True, "why": None, "dtype": "float32", "source": "its twin, trained with this job",
             "margin": 4.0, "within": False, "ratio": 1.57e5, "tolerance": False, "rtol": None, "atol": None,
             "hold": None, "beyond": True, "step": 0, "count": 200, "sign": "running low", "nonfinite": False},
)
