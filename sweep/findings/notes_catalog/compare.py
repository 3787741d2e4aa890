"""N190: the losses as they were read (``sweep.analysis.compare.printed_note``: losses read from
rounded text)."""

from __future__ import annotations

from typing import Any, Dict

from sweep.findings.notes_catalog.base import NoteKind

FAMILY = "compare"


def _which(values: Dict[str, Any]) -> Dict[str, Any]:
    return {"which": [f"{copy} {value:.0e}" for copy, value in sorted(values["resolution"].items())]}


PRINTED = NoteKind(
    code="N190", name="printed precision", family=FAMILY,
    template="printed precision: the losses were read from text rounded to {quantum:.0e} ({which}), so equal means "
             "equal to the printed precision and a difference under {half:.0e} cannot be seen[{coarse|if}, which is "
             "more than the tolerance (atol={atol:g}, rtol={rtol:g}): print more digits or log with sweep.log_loss]",
    rests_on="each copy's losses as printed: the last digit each shows (sweep.analysis.compare.printed_resolution), "
             "against atol + rtol x the largest standalone loss",
    not_claimed="that the copies are equal beyond the printed digits",
    example={"resolution": {"distributed": 0.0001, "standalone": 0.0001}, "quantum": 0.0001, "half": 5e-05,
             "coarse": True, "atol": 1e-05, "rtol": 1e-05},
    fill=_which,
)

KINDS = [PRINTED]
