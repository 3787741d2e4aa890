"""N190: the losses as they were read (``sweep.analysis.compare.printed_note``: losses read from
rounded text); N191: a loss that sums over the batch, on sharded data (``summed_loss_note``); N192: a
forward that changes the model's parameters in place (``sweep.run.judge.forward_writes``); N193: a
model that calls collectives in the standalone copy, which trains as on one device
(``sweep.run.judge.stray_collectives``); N194: a tracing rerun whose standalone copy on some rank
gives other losses than the baseline (``sweep.run.judge.standalone_unlike``)."""

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

def _writes(values: Dict[str, Any]) -> Dict[str, Any]:
    from sweep.findings.notes_catalog.reductions import names_text

    names = values["parameters"]
    return {"names": names_text(names), "them": "them" if len(names) > 1 else "it"}


WRITES = NoteKind(
    code="N192", name="forward writes parameters", family=FAMILY,
    template="forward writes parameters: the standalone copy's first forward changed {names} in place "
             "(nn.Embedding(max_norm=...) renorms the rows it looks up); a sharding engine (fully_shard) runs the "
             "forward on an all-gathered copy that resharding frees, so the distributed copy loses such a change: "
             "make {them} outside the forward (under torch.no_grad(), in the training step) or drop it",
    rests_on="a digest of every parameter of the standalone copy before step 0 and after its first micro-batch's "
             "forward (sweep.train.observers.forward_writes); said where the copies' losses differ",
    not_claimed="that the change is the only difference: the first differing tensor says where the copies part",
    example={"parameters": ["emb.weight"]},
    fill=_writes,
)

def _stray(values: Dict[str, Any]) -> Dict[str, Any]:
    calls = values["calls"]
    copies = sorted(calls)
    ops = sorted({op for ops in calls.values() for op in ops})
    return {"copies": " and ".join(f"the {c} copy" if c != "twin" else "its twin" for c in copies),
            "ops": ", ".join(f"torch.distributed.{op}" for op in ops),
            "n": sum(sum(o.values()) for o in calls.values())}


STRAY = NoteKind(
    code="N193", name="collectives in the standalone copy", family=FAMILY,
    template="collectives in the standalone copy: the model called {ops} in the steps of {copies} ({n} call{n|s}), "
             "though torch.distributed.is_initialized() reads False there (one device's view); it trains in a rank "
             "process beside the ranks, so each call met whatever another rank called then, and its losses are not a "
             "single device's: ask torch.distributed.is_initialized() before a collective, or order=separate (the "
             "standalone copy in a process of its own, a world of one)",
    rests_on="the torch.distributed collectives called in the standalone copy's (and the twin's) forward, backward "
             "and optimizer step (sweep.train.observers.single_device), on any rank",
    not_claimed="that the distributed copy is wrong: only that the baseline is not one device's",
    example={"calls": {"standalone": {"all_reduce": 8}}},
    fill=_stray,
)


def _unlike(values: Dict[str, Any]) -> Dict[str, Any]:
    ranks = [int(r) for r in values["ranks"]]
    return {"ranks": ", ".join(str(r) for r in ranks), "n": len(ranks), "them": "them" if len(ranks) > 1 else "it"}


UNLIKE = NoteKind(
    code="N194", name="standalone copy unlike on a rank", family=FAMILY,
    template="standalone copy unlike on a rank: in the tracing rerun the standalone copy on rank{n|s} {ranks} gave "
             "other losses than the baseline from step {step} (the same code, weights and data: the model computes "
             "otherwise there, a forward that reads its rank, or kernels that are not deterministic); the trace "
             "leaves {them} out, so the first differing place may lie on {them} (a model that computes by its rank "
             "has no one-device baseline there)",
    rests_on="each rank's standalone losses in the tracing rerun against the job's standalone sequence, bit for bit, "
             "over the rerun's steps (sweep.run.judge.standalone_unlike)",
    not_claimed="that the distributed copy is right on those ranks: only that their trace has no baseline to compare",
    example={"ranks": [1], "step": 0},
    fill=_unlike,
)

KINDS = [PRINTED, SUMMED, WRITES, STRAY, UNLIKE]
