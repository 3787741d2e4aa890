"""N120-N131: the optimizer as it ran against the ``optimizer`` section, and the two copies' weight
decay, loss scale and learning rates (``sweep.analysis.collectives``: ``optimizer_notes``,
``decay_notes``, ``loss_scale_notes``, ``lr_notes``)."""

from __future__ import annotations

from typing import Any, Dict

from sweep.findings.notes_catalog.base import NoteKind

FAMILY = "optimizer"
LR = "the lr each update read in each copy (features.lr: param group 0, after each update), relative 1e-6"
LR_SAYS = "lr differs from step {step}: distributed {distributed:.6g}, standalone {standalone:.6g} "


def _decay(values: Dict[str, Any]) -> Dict[str, Any]:
    shown = [f"{p['name']} ({float(p['distributed']):g} against {float(p['standalone']):g})"
             for p in values["parameters"]]
    return {"shown": shown, "more": values.get("more") or None}


def _scale(values: Dict[str, Any]) -> Dict[str, Any]:
    def show(v: Any) -> str:
        return "none" if v is None else f"{float(v):g}"

    return {"ran_text": show(values["ran"]), "configured_text": show(values["configured"])}


def _span(values: Dict[str, Any]) -> Dict[str, Any]:
    first, last = values["first"], values["last"]
    return {"span": f"step {first}" if first == last else f"steps {first}-{last}",
            "those": "that step" if first == last else "those steps"}


OPTIMIZER = NoteKind(
    code="N120", name="an optimizer setting ran otherwise", family=FAMILY,
    template="optimizer {key} ran {ran:.6g} in the {copy} copy (param group {group}), configured {configured:.6g}",
    rests_on="the optimizer's param groups as it held them at step 0 against the optimizer section (relative 1e-6, a "
             "float32 round trip)",
    not_claimed="that the setting changes the result (an eps far below the second moments does not)",
    example={"key": "eps", "ran": 1e-05, "copy": "distributed", "group": 0, "configured": 1e-08},
)
DECAY = NoteKind(
    code="N121", name="weight decay differs between the copies", family=FAMILY,
    template="weight decay differs between the copies for {shown}[ and {more} more] (distributed against "
             "standalone): the optimizer decays these parameters otherwise in one copy (its param groups or "
             "decay_flags)",
    rests_on="each copy's weight decay per parameter (torch's param groups, MindSpore's decay_flags), relative 1e-6",
    not_claimed="which copy's decay is the configured one",
    example={"parameters": [{"name": "layer0.bias", "distributed": 0.01, "standalone": 0.0}], "more": 0},
    fill=_decay,
)
LOSS_SCALE = NoteKind(
    code="N122", name="loss scale ran otherwise", family=FAMILY,
    template="loss scale ran {ran_text} in the {copy} copy, configured {configured_text}: the gradients the optimizer "
             "steps with are divided by it",
    rests_on="the loss scale as the copy's step applied it (torch: the gradient scaler's at step 0; MindSpore: "
             "1 / reciprocal_scale) against train.grad_scaler.init_scale, else the framework's unscaled value",
    not_claimed="that the update differs: a scale undone exactly changes nothing but rounding and overflow",
    example={"ran": 64.0, "copy": "distributed", "configured": 1.0},
    fill=_scale,
)
LR_CHANGED = NoteKind(
    code="N123", name="lr changed for some steps in one copy", family=FAMILY,
    template=LR_SAYS + "(at {span} only[ (x{ratio:g})], equal again from step {after}: the lr was changed for {those} "
                       "in one copy, the schedule itself agrees)",
    rests_on=LR + "; the steps that differ are consecutive and the lrs agree again after them",
    not_claimed="what changed it",
    example={"step": 3, "distributed": 0.002, "standalone": 0.001, "first": 3, "last": 3, "after": 4, "ratio": 2.0},
    fill=_span,
)
LR_AHEAD = NoteKind(
    code="N124", name="lr schedule runs ahead", family=FAMILY,
    template=LR_SAYS + "(the distributed copy's schedule runs {steps} step{steps|s} ahead of the standalone one: its "
                       "scheduler stepped more often (an extra scheduler.step()))",
    rests_on=LR + "; the distributed lrs equal the standalone ones that many steps later, at every step from there",
    not_claimed="where the extra step is called",
    example={"step": 1, "distributed": 0.0005, "standalone": 0.001, "steps": 1},
)
LR_BEHIND = NoteKind(
    code="N125", name="lr schedule runs behind", family=FAMILY,
    template=LR_SAYS + "(the distributed copy's schedule runs {steps} step{steps|s} behind the standalone one: its "
                       "scheduler stepped less often (a skipped scheduler.step()))",
    rests_on=LR + "; the distributed lrs equal the standalone ones that many steps earlier, at every step from there",
    not_claimed="where the step is skipped",
    example={"step": 1, "distributed": 0.001, "standalone": 0.0005, "steps": 1},
)
LR_STUCK = NoteKind(
    code="N126", name="lr scheduler does not step", family=FAMILY,
    template=LR_SAYS + "(the distributed copy's lr stops moving while the standalone one's follows its schedule: its "
                       "scheduler does not step)",
    rests_on=LR + "; the distributed lrs are constant from there, the standalone ones are not",
    not_claimed="why the scheduler does not step",
    example={"step": 1, "distributed": 0.001, "standalone": 0.0009},
)
LR_ONLY_DISTRIBUTED = NoteKind(
    code="N127", name="lr scheduler steps in one copy only", family=FAMILY,
    template=LR_SAYS + "(the standalone copy's lr stays put while the distributed one's moves: a scheduler steps only "
                       "in the distributed copy)",
    rests_on=LR + "; the standalone lrs are constant from there, the distributed ones are not",
    not_claimed="which scheduler",
    example={"step": 1, "distributed": 0.0009, "standalone": 0.001},
)
LR_SCALED = NoteKind(
    code="N128", name="lr scaled in one copy", family=FAMILY,
    template=LR_SAYS + "(the distributed lr is x{ratio:.4g} the standalone one at every step from there: a scaled lr "
                       "(base lr, or a factor applied in one copy))",
    rests_on=LR + "; one ratio (relative 1e-6) at every step from there",
    not_claimed="where the factor is applied",
    example={"step": 0, "distributed": 0.0005, "standalone": 0.001, "ratio": 0.5},
)
LR_SHAPE = NoteKind(
    code="N129", name="lr schedules differ in shape", family=FAMILY,
    template=LR_SAYS + "(the copies' schedules differ in shape: another schedule in one copy)",
    rests_on=LR + "; none of a changed span, a shift, a stuck scheduler or a ratio fits",
    not_claimed="which schedule either copy ran",
    example={"step": 2, "distributed": 0.0007, "standalone": 0.0008},
)
LR_LENGTH = NoteKind(
    code="N130", name="lr recorded for other steps", family=FAMILY,
    template="lr recorded for {distributed} steps in the distributed copy, {standalone} in the standalone one",
    rests_on=LR + "; the lrs agree where both were recorded",
    not_claimed="that the steps trained differ",
    example={"distributed": 4, "standalone": 5},
)


def _held(values: Dict[str, Any]) -> Dict[str, Any]:
    many = len(values["parameters"]) + int(values.get("more") or 0) > 1
    return {"other": "standalone" if values["copy"] == "distributed" else "distributed",
            "more": values.get("more") or None, "they": "they never move" if many else "it never moves"}


NOT_HELD = NoteKind(
    code="N131", name="a parameter one copy's optimizer does not step", family=FAMILY,
    template="the {copy} copy's optimizer does not hold {parameters|and}[ and {more} more], which the {other} "
             "copy's steps: {they} there (left out of its param groups)",
    rests_on="the parameters each copy's optimizer held in its param groups at step 0 (torch; MindSpore: its "
             "parameters with decay_flags), by name",
    not_claimed="that a gradient reached them (a parameter without one is not stepped either way)",
    example={"copy": "distributed", "parameters": ["pos"], "more": 0},
    fill=_held,
)

KINDS = [OPTIMIZER, DECAY, LOSS_SCALE, LR_CHANGED, LR_AHEAD, LR_BEHIND, LR_STUCK, LR_ONLY_DISTRIBUTED, LR_SCALED,
         LR_SHAPE, LR_LENGTH, NOT_HELD]
