"""Which of the quiet cases applies where no job fails for a cause (V110-V115, one module each:
``rounding_only``, ``one_level``, ``beyond``, ``below``, ``equal``, ``printed``), in one order: the
levels that move the losses beyond their rounding envelope (V112), one level that holds every
difference (V111), rounding only (V110), below tolerance (V113), equal bit for bit (V114) or to the
printed precision (V115). Exactly one of them applies."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from sweep.analysis.evidence import parting_step
from sweep.analysis.grid import carrier, judged, separating_level
from sweep.findings.base import Context
from sweep.analysis.rounding import envelope
from sweep.findings.shared import differ, faults, real, rounding, tolerance_jobs, worst

# How every quiet case opens: "No job fails" ("No job that ran fails" beside errors and time-outs), unless some
# jobs fail the tolerance within their rounding envelope (not a fault, V109 says so): then it says that, never
# "No job fails" beside failing jobs.
OPENING = ("[{nofail|if}No job[{unjudged|if} that ran] fails][No job[{unjudged|if} that ran] fails for a cause: "
           "{tolerance} fail{tolerance|?s:} the tolerance only, within {tolerance|?its:their} rounding envelope]")


def case(ctx: Context) -> Optional[str]:
    """Which of V110-V115 applies (``None`` where a job fails for a cause)."""
    def compute() -> Optional[str]:
        if faults(ctx) or not judged(ctx.rows):
            return None
        if not differ(ctx):
            return "printed" if worst(judged(ctx.rows), "resolution") is not None else "equal"
        if real(ctx) and (rounding(ctx) or _beside_equal(ctx)) and carrier(ctx.rows, real(ctx)) is not None:
            return "beyond"
        if separating_level(ctx.rows, differ(ctx)) is not None and len(differ(ctx)) < len(judged(ctx.rows)):
            return "level"
        return "rounding" if not real(ctx) else "below"

    return ctx.shared("quiet", compute)


def _beside_equal(ctx: Context) -> bool:
    """Some judged jobs equal standalone bit for bit and every differing one was measured
    against its envelope (so "beyond" is a measurement, not an absence of one)."""
    return len(differ(ctx)) < len(judged(ctx.rows)) and all(envelope(r).get("measured") for r in real(ctx))


def opening(ctx: Context) -> Dict[str, Any]:
    """The values :data:`OPENING` reads: ``nofail`` (no job fails the tolerance) or ``tolerance`` (how
    many fail it within their envelope); ``unjudged``, the jobs not judged (errors, time-outs), or ``None``."""
    failing = len(tolerance_jobs(ctx))
    unjudged = len(ctx.rows) - len(judged(ctx.rows))
    return {"nofail": not failing, "tolerance": failing or None, "unjudged": unjudged or None}


def sizes(jobs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """``size`` (largest |diff|, loss units), ``ratio`` (largest diff over the tolerance), ``since``
    (the earliest parting step) of ``jobs``."""
    steps = [s for s in (parting_step(r) for r in jobs) if s is not None]
    return {"size": worst(jobs, "max_abs_diff"), "ratio": worst(jobs, "tolerance_ratio"),
            "since": min(steps) if steps else None}
