"""J101 parts: where one job's copies part from standalone, and its drift class."""

from __future__ import annotations

from typing import List

from sweep.analysis.evidence import class_gloss, drift_class, parting_step, unseen_failure
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import onset_words


def check(ctx: Context) -> List[Finding]:
    row = ctx.rows[0]
    cls = drift_class(row)
    if cls is None:
        return []
    step = parting_step(row)
    return [KIND.make(jobs=[row["job"]], steps={"parts": step}, evidence=("first_diff_step", "first_real_step",
                                                                          "onset", "envelope"),
                      step=step, cls=cls, gloss=class_gloss(row, cls), onset=onset_words(row, cls),
                      period=row.get("period") if cls == "periodic" else None,
                      until=row.get("onset_until"),
                      fails_on=unseen_failure(row) if cls == "rounding" else None)]


KIND = Kind(
    code="J101", name="parts", tier="decides",
    template="the copies part at step {step}: {cls}[, every {period} steps] ({gloss})[, {onset}][, over after update "
             "{until} (a fault on a few steps only: what differs later is its aftermath)][; the job fails on what its "
             "losses do not show: {fails_on}]",
    rests_on="the job's first step beyond its rounding envelope (the losses, a traced tensor or an update), and its "
             "onset; the drift class by that step (step0, first_update, periodic, from_step) or rounding",
    not_claimed="the cause: the class points at where to look",
    check=check,
    example={"step": 0, "cls": "step0", "gloss": "the copies differ before any update: initial weights, "
             "initialisation, data, a forward that computes otherwise (a module, its inputs' handling), or the "
             "forward's precision (param_dtype)", "onset": "an abrupt onset",
             "until": None, "fails_on": None, "period": None},
)
