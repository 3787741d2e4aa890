"""N190: the losses as they were read (``sweep.analysis.compare.printed_note``: losses read from
rounded text); N191: a loss that sums over the batch, on sharded data (``summed_loss_note``)."""

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

SUMMED = NoteKind(
    code="N191", name="summed loss", family=FAMILY,
    template="summed loss: the distributed loss at step 0, the copies' weights still equal, is x{ratio:.4g} = "
             "1/{shards} the standalone one: train.loss={loss} sums over the batch, so with data.split=sharded each "
             "rank's loss, and its gradient, is its shard's part of the whole; a loss that averages over the batch "
             "(reduction='mean') or data.split=replicated gives the copies one loss",
    rests_on="the two copies' losses at step 0 (before any update, from equal weights), against 1/the number of "
             "data shards (sweep.analysis.collectives.SCALE_TOL)",
    not_claimed="that the loss is a sum in its code: only that its value scales with the batch's rows",
    example={"ratio": 0.5, "shards": 2, "loss": "my_losses.sum_mse"},
)

KINDS = [PRINTED, SUMMED]
