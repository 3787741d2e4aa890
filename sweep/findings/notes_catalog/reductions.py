"""N140-N146: the gradient reduction as it ran (``sweep.analysis.reductions``): what each gradient
became against the mean over the ranks (``reduction_notes``), which calls carried it
(``coverage_notes``), where the gradient norm first departs (``norm_notes``), and clipping that
read the gradients before the engine reduced them by hand (``clip_order_notes``)."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence

from sweep.findings.notes_catalog.base import NoteKind
from sweep.findings.places import signature

FAMILY = "reductions"

OP_WORDS = {
    "sum": "a sum over the ranks, not their mean",
    "max": "the max over the ranks, not their mean",
    "min": "the min over the ranks, not their mean",
    "none": "no reduction: each rank keeps its own gradient",
    "lost": "nothing: no gradient reached these parameters after it (the optimizer steps without one)",
    "clipped before the reduction": "a mean of gradients each rank had clipped by its own norm first: clipping "
                                    "ran before the reduction",
}
# where in the step a gradient norm departing at each stage arises, and the stage in words
NORM_PLACE = {"pre": "in the forward or backward (before any reduction)",
              "reduced": "in the reduction",
              "read": "between the reduction and the optimizer step (clipping, scaling or code that touches the "
                      "gradients, such as logging)"}
NORM_STAGE = {"pre": "before the reduction", "reduced": "after the reduction", "read": "as the optimizer read them"}


def op_words(op: str) -> str:
    """What an op ``sweep.analysis.reductions.classify`` names means, as words: :data:`OP_WORDS`, a
    mean or sum over one dim only, ``other``, a multiple of the mean, of a mean over one dim or of
    this rank's own gradient; else ``op`` itself."""
    return OP_WORDS.get(op) or (f"the mean over {op[len('mean over '):]} only: the reduction never crossed "
                                "the other mesh dims" if op.startswith("mean over ") else
                                f"the sum over {op[len('sum over '):]} only, not a mean over every rank"
                                if op.startswith("sum over ") else
                                "not the mean over the ranks nor any op of it" if op == "other" else
                                f"{op} over the ranks" if op.endswith(" the mean") else
                                f"{op}: a scale on a reduction over part of the ranks" if " over " in op else
                                f"{op}: no reduction, a scale alone" if op.endswith("own gradient") else op)


def names_text(names: Sequence[str], limit: int = 6) -> str:
    """``a, b, c`` (at most ``limit``, then ``and N more``)."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _calls(calls: Sequence[Dict[str, Any]]) -> List[str]:
    out: List[str] = []
    for c in calls:
        text = f"{c['op']} over {c['group']} (reduce_op {c.get('reduce_op')})"
        if text not in out:
            out.append(text)
    return out


def _reduction(values: Dict[str, Any]) -> Dict[str, Any]:
    names = values["parameters"]
    return {"op_text": op_words(values["op"]), "names": names_text(names),
            "they": "they are" if len(names) > 1 else "it is", "signature": signature(values.get("causes")),
            "carried": _calls(values.get("calls") or []),
            "unseen_text": None if values.get("calls") else values.get("unseen")}


def _coverage(values: Dict[str, Any]) -> Dict[str, Any]:
    names = values["parameters"]
    return {"names": names_text(names), "were": "were" if len(names) > 1 else "was",
            "them": "them" if len(names) > 1 else "it"}


def _norm(values: Dict[str, Any]) -> Dict[str, Any]:
    step = values.get("loss_step")
    when = (f", before the losses show it (they first {values['loss_word']} at step {step})" if step is not None
            else ", though the losses do not show it")
    ratio = values.get("ratio")  # a NaN norm has no ratio to give (inf: a standalone norm of 0, said so)
    nan = isinstance(ratio, float) and math.isnan(ratio) or str(ratio).lower() == "nan"
    place = NORM_PLACE[values["stage"]]
    if values["stage"] == "pre" and (values.get("accum") or 1) > 1:  # the micro-batches add up before it
        place = "in the forward, the backward or the accumulation of the micro-batches (before any reduction)"
    elif values["stage"] == "read" and values.get("by_hand"):  # the engine reduced again after the backward
        place = ("in the engine's own reductions in its clipping or optimizer step, or after them (clipping, scaling "
                 "or code that touches the gradients)")
    elif values["stage"] == "reduced" and values.get("ran_other"):  # sweep.run.judge: an N140 of the same step
        place = "in the reduction (it ran another op than the mean, above)"
    elif values["stage"] == "reduced" and (values.get("accum") or 1) > 1 and values.get("equal"):
        place = ("in the reduction, or where the micro-batches' reduced gradients add up (one dropped or zeroed "
                 "between them)")
    elif values["stage"] == "reduced" and not values.get("equal"):  # the norms before it were not compared
        place = ("in the forward, the backward or the reduction (the gradients before it were not compared: with "
                 "sharded data each rank's are its own rows')")
    return {"stage_words": NORM_STAGE[values["stage"]], "place": place, "when": when, "ratio": None if nan else ratio}


REDUCTION = NoteKind(
    code="N140", name="a gradient reduction ran another op", family=FAMILY,
    template="the gradient reduction of step {step} ran {op_text} for {names}[ ({unreduced:,} of {total:,} gradient "
             "elements left unreduced)][: {they} x{scale:.6g} the mean][ ({signature})][ (carried by {carried})]"
             "[ (its calls not seen: {unseen_text}; judged from the gradients it returned)]",
    rests_on="every rank's local gradients before the reduction (gathered over the ranks) against the reduced "
             "gradient each rank holds after it: the candidate op it matches (mean, sum, max, min, none, a mean over "
             "one dim, clipped before the reduction, a multiple), the first step that shows it; the ledger's calls "
             "that carried the parameters",
    not_claimed="which line of code ran the op: the calls name what was called, the values what it made",
    example={"step": 0, "op": "sum", "parameters": ["layer0.weight", "layer0.bias"], "unreduced": None, "total": None,
             "scale": 4.0, "causes": {"ratio": 4.0, "factors": ["world_size"],
                                      "causes": ["a sum where a mean was expected"]},
             "calls": [{"op": "reduce_scatter_tensor", "group": "dp", "reduce_op": "SUM"}], "unseen": None},
    fill=_reduction,
)
NEVER_CARRIED = NoteKind(
    code="N141", name="gradients no reduction carried", family=FAMILY,
    template="{names} {were} carried by no gradient reduction in step {step}[ (the reductions carried {carried:,} of "
             "the {total:,} gradient elements)]: each rank keeps its own gradient for {them}",
    rests_on="the ledger's gradient reductions of the grads span with the parameters each carried (engines that do "
             "not say are not judged), the first step",
    not_claimed="that the values differ yet (with replicated data a skipped reduction of equal gradients changes "
                "nothing)",
    example={"parameters": ["layer1.bias"], "step": 0, "carried": 1600, "total": 1625},
    fill=_coverage,
)
NOT_ACROSS = NoteKind(
    code="N142", name="gradients never reduced across a dim", family=FAMILY,
    template="{names} {were} reduced over {crossed} but never across {dim} in step {step}: the ranks along {dim} keep "
             "gradients that differ",
    rests_on="the ledger's gradient reductions with the parameters each carried (an engine's own call in its "
             "optimizer step given a parameter's gradient itself included), against the mesh dims of more than "
             "one rank each gradient must cross (a call over every rank crosses them all)",
    not_claimed="which call should have crossed it",
    example={"parameters": ["w"], "crossed": ["dp_shard"], "dim": "dp_replicate", "step": 0},
    fill=_coverage,
)
TWICE = NoteKind(
    code="N143", name="gradients reduced twice over a group", family=FAMILY,
    template="{names} {were} reduced more than once over {groups} in step {step}: a gradient is reduced once per "
             "group it crosses",
    rests_on="the ledger's gradient reductions with the parameters each carried: the same group twice in a step",
    not_claimed="that the result is off (two means over one group are still its mean; two sums are not)",
    example={"parameters": ["w"], "groups": ["dp_replicate"], "step": 0},
    fill=_coverage,
)
NORM = NoteKind(
    code="N144", name="gradient norm departs", family=FAMILY,
    template="the gradient norm departs at step {step} {stage_words}[ (equal {equal})]: distributed "
             "{distributed:.6g}, standalone {standalone:.6g} ([x{ratio:.6g}; ]most in {parameter})[: above "
             "train.clip_grad_norm={max_norm:g}, not clipped to it in the distributed copy (the standalone copy's "
             "is)], so the difference arises "
             "{place}{when}",
    rests_on="both copies' per-step gradient norms before the reduction (replicated data only), after it and as the "
             "optimizer read them (relative 1e-4 in float32, 3e-2 in bfloat16), before the first loss that differs "
             "or fails",
    not_claimed="the cause inside the stage: the stage and the parameter point at where to look",
    example={"step": 1, "stage": "read", "equal": "after the reduction", "distributed": 5.0, "standalone": 0.5,
             "ratio": 10.0, "parameter": "layer0.weight", "max_norm": 1.0, "loss_step": 2, "loss_word": "differ"},
    fill=_norm,
)

IGNORED = NoteKind(
    code="N145", name="parameters the engine's reducer leaves out", family=FAMILY,
    template="{parameters} {are} not among the parameters the engine's reducer carries (DDP's "
             "parameters_to_ignore): {theirs} never reduced",
    rests_on="the engine's reducer's list of the parameters it carries against the model's parameters "
             "(sweep.train.observers.reductions)",
    not_claimed="that their gradients differ yet (with replicated data they are equal until the weights part)",
    example={"parameters": ["layer1.bias"]},
    fill=lambda values: {"are": "are" if len(values["parameters"]) > 1 else "is",
                         "theirs": "their gradients are" if len(values["parameters"]) > 1 else "its gradient is"},
)

CLIPPED_FIRST = NoteKind(
    code="N146", name="gradients clipped before the engine reduced them", family=FAMILY,
    template="train.clip_grad_norm={max_norm:g} clipped the gradients of step {step} before the engine reduced them "
             "by hand ({calls} call(s) over {groups} in {where}): each rank clipped by the norm of its own "
             "unreduced gradients, not of their mean",
    rests_on="the ledger's calls in the order they ran: reductions given a parameter's gradient itself, or a flat "
             "buffer of them, in the engine's optimizer step, or in its clipping after the norm's own all-reduce",
    not_claimed="that the clipped gradients differ: ranks whose unreduced gradients agree (the same data on every "
                "replica), or a norm under the threshold, clip alike",
    example={"max_norm": 1.0, "step": 0, "calls": 4, "groups": ["dp_replicate"], "where": ["its optimizer step"]},
    fill=lambda values: {"groups": ", ".join(values["groups"]), "where": " and ".join(values["where"])},
)

KINDS = [REDUCTION, NEVER_CARRIED, NOT_ACROSS, TWICE, NORM, IGNORED, CLIPPED_FIRST]
