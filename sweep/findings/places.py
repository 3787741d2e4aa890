"""Where a job's copies first differ, in words: the place's sentences rendered from the analysis's data.

The analysis finds the place as data (``sweep.analysis.trace.locate``'s first differing tensor,
``sweep.analysis.modules.compare_modules``'s first module, merged over the ranks and with each
other by ``sweep.analysis.evidence``); this module is the one that words it, as the note
catalog words a job's notes. Its callers are the edges: the job's ``result.json``
(``sweep.run.job``: each place's ``description`` beside its data), the report's columns
(``sweep.report.summary``), J103 and J104, and the notes that quote a place (N183, N186).

Every function takes the place's dict as the analysis returns it (and as ``result.json`` keeps
it) and returns its sentence, or ``None`` where the dict holds no place (a ``note`` saying why
nothing was traced). Sizes print with 3 significant digits (``rel 0.13``), a module's with 2,
a scale with 4: as the records' floats are read, not rounded.

May import: ``sweep.records`` only (the rules of the findings wing read it; no analysis).
"""

from __future__ import annotations

import math

from typing import Any, Dict, Optional, Sequence

Place = Dict[str, Any]
TENSOR_DATA = ("step", "kind", "name", "abs_diff", "rel_diff")  # what a tensor's sentence reads, at least
MODULE_DATA = ("module", "step", "phase", "rel_out")  # what a module's sentence reads, at least


def _plural(items: Sequence[Any], word: str) -> str:
    """``rank 1``, ``ranks 0, 2``: ``word`` and the items, plural for more than one."""
    return f"{word}{'s' if len(items) > 1 else ''} {', '.join(map(str, items))}"


# --- tensors: sweep.analysis.trace ---------------------------------------------------------


def missing_text(missing: Sequence[Dict[str, Any]]) -> str:
    """One sentence naming every tensor one copy holds and the other lacks
    (``sweep.analysis.trace.missing_names``; no ``"; "`` inside, so it stays one note):
    ``only the distributed copy has the parameter extra.weight, ...``; ``""`` for none."""
    parts = []
    for side in ("distributed", "standalone"):
        names = [m for m in missing if m["only_in"] == side]
        if names:
            listed = ", ".join(f"{'buffer' if 'buffer' in m['kind'] else 'parameter'} {m['name']}" for m in names)
            parts.append(f"only the {side} copy has the {listed}")
    return " and ".join(parts) + " (not compared: the copies differ in what they hold)" if parts else ""


def tensor_text(found: Optional[Place]) -> Optional[str]:
    """The sentence of a first differing tensor (``sweep.analysis.trace.locate``,
    ``first_difference`` or ``final_buffers``, as merged over the ranks by
    ``sweep.analysis.evidence.first_tensor_over_ranks`` and
    ``sweep.analysis.judging.each_ranks_shards``): ``layer1.bias grad at step 3, abs 1e-05, rel
    0.002; weights identical before``, then, in this order, its first difference beyond the
    rounding envelope (``beyond_rounding``), the tensors only one copy holds (``missing``), a
    rerun that did not repeat the losses' difference (``not_repeated_from``) and each rank's own
    shard finding (``shards_by_rank``). ``None`` for a dict that is no place (a ``note``); an
    older ``result.json``'s place without its data, its ``description``."""
    if not found:
        return None
    if not all(key in found for key in TENSOR_DATA) and found.get("description"):
        return found["description"]  # an older result.json's place: its sentence only
    if "step" in found:
        text = _tensor(found) + _envelope_text(found)
    elif "last_step" in found:  # no tensor differs in the traced steps
        both = " both copies hold" if found.get("missing") else ""
        text = f"no tensor{both} differs in steps 0-{found['last_step']}"
    else:  # no place: a note; an older result.json's place holds its sentence only
        return found.get("description")
    if found.get("missing"):
        text += "; " + missing_text(found["missing"])
    if found.get("not_repeated_from") is not None:
        text += (f" in the tracing rerun, though this run's losses differ from step {found['not_repeated_from']}: "
                 "that launch did not repeat the difference (nondeterministic? repeat=3 tells)")
    if found.get("shards_by_rank"):
        said = ", ".join(f"rank {rank}: " + (_plural(held, "held by rank") if held else "every shard differs")
                         for rank, held in sorted(found["shards_by_rank"].items(), key=lambda kv: int(kv[0])))
        text += f"; each rank's own finding: {said}"
    return text


def _envelope_text(found: Place) -> str:
    """What a first difference within its rounding envelope adds: the first one beyond it
    (``beyond_rounding``, a tensor's dict), or that every traced tensor stays within."""
    if "beyond_rounding" not in found:
        return ""
    if found["beyond_rounding"]:
        return "; first beyond its rounding envelope: " + _tensor(found["beyond_rounding"])
    text = f"; every traced tensor within its rounding envelope in steps 0-{found.get('last_step')}"
    if found.get("bound_set_by"):
        text += f" ({found['name']}'s{_set_by(found)})"
    updates = found.get("updates") or {}
    if updates.get("real_step") is not None:  # the sum over the parameters is measured against its own envelope
        text += (f", but not their update differences summed over every parameter, beyond float rounding from "
                 f"update {updates['real_step']}")
    return text


def _tensor(found: Place) -> str:
    """One tensor's place without what the search around it adds (:func:`tensor_text`):
    its name, kind and step, its sizes (and the multiple of its envelope, ``envelope_ratio``),
    what the kind adds (:func:`_update_text`) and the dim-0 shards that differ."""
    sizes = f"abs {float(found['abs_diff']):.3g}, rel {float(found['rel_diff']):.3g}"
    if found.get("nonfinite"):  # sweep.analysis.trace.first_difference_in
        sizes = "non-finite (NaN or infinite) in one copy where the other is not"
    elif found.get("envelope_ratio") is not None:
        sizes += f" ({float(found['envelope_ratio']):.3g}x its rounding envelope)"
    elif found.get("beyond_rounding"):  # a first difference within rounding, a later one beyond (_envelope_text)
        sizes += f" (within its rounding envelope{_set_by(found)})"
    kind, name, step = found["kind"], found["name"], found["step"]
    if kind == "initial":
        text = f"{name} initial weights (before any step), {sizes}"
    elif kind == "initial_buffer":
        text = f"buffer {name} initial value (before any step), {sizes}"
    elif kind == "buffer" and found.get("after_last_step"):  # sweep.analysis.trace.final_buffers
        text = (f"buffer {name} after the last step ({step}), {sizes}: a statistic the forward updates, which the "
                "training losses do not read") + _frozen_text(found)
    elif kind == "buffer":
        text = f"buffer {name} after the forward of step {step}, {sizes}" + (
            f"; weights {_agree(found)} before" if step > 0 else "")
    else:
        text = f"{name} {kind} at step {step}, {sizes}" + _update_text(found)
    return text + _shards_text(found.get("shards"))


def _set_by(found: Place) -> str:
    """``, which layers.0.attn.in_proj_bias sets for every weight: rel 0.147 from its twin at
    step 3``: the tensor whose own rounding sets a within-envelope tensor's bound, where another
    (``bound_set_by``, ``sweep.analysis.trace.envelope_setters_in``); ``""`` otherwise."""
    setter = found.get("bound_set_by")
    if not setter:
        return ""
    return (f", which {setter['name']} sets for every {found['kind']}: rel {float(setter['rel']):.3g} from its twin "
            f"at step {setter['step']}")


def _frozen_text(found: Place) -> str:
    """What a buffer that ended apart adds where the distributed copy's never moved from its value
    before the first step (``frozen``, ``sweep.run.judge.frozen``): its update was lost, and where
    this rank holds it as a shard (``held``), how."""
    if not found.get("frozen"):
        return ""
    if found.get("held"):
        held = found["held"]
        return (f"; the distributed copy's never moved from its value before step 0, and this rank holds it as "
                f"shard {held['shard']} of {held['shards']} along dim {held['dim']}: the engine shards it as a "
                "parameter, so the forward updates a gathered copy that resharding drops")
    return ("; the distributed copy's never moved from its value before step 0: the forward's update never reached "
            "it (a module left in eval mode, a momentum of 0, or an engine that swaps out the tensor it updates)")


def _agree(found: Place) -> str:
    """How the tensors before ``found`` agree: ``identical``, or ``within their rounding
    envelope`` where ``found`` was searched beyond the envelope (``searched_beyond``)."""
    return "within their rounding envelope" if found.get("searched_beyond") else "identical"


def _update_text(found: Place) -> str:
    """What a gradient's or a weight's place adds: near zero, a pure scale and its signature,
    and where it arises (before or after the reduction)."""
    text = f" (zero up to rounding: rel to the largest {found['kind']})" if found.get("near_zero") else ""
    if found.get("scale") is not None:
        text += _scale_text(found)
    if found["kind"] == "grad":
        text += f"; weights {_agree(found)} before" if found["step"] > 0 else "; the first gradient (initial weights equal)"
    elif found.get("grad_only_in"):
        text += (f"; only the {found['grad_only_in']} copy has a gradient for it at that step: requires_grad or "
                 "the parameter's use differs between the copies, or the engine never handed the optimizer the "
                 "reduced gradient (a reduction left pending)")
    elif found.get("forward_writes"):  # sweep.run.judge.forward_writes: N192
        text += (f"; gradients of that step {_agree(found)} (as reduced): the standalone copy's forward changes it in "
                 "place, a change a sharding engine's gathered copy does not keep")
    elif found.get("grads_recorded", True):
        # searched beyond the envelope: the gradients may differ within it, never "identical"
        text += f"; gradients of that step {_agree(found)} (as reduced): it arises after the reduction, in clipping, " \
                "scaling or the optimizer step"
    else:
        text += " (past the steps whose gradients are recorded: compare.trace_after)"
    return text


def signature(causes: Optional[Dict[str, Any]]) -> Optional[str]:
    """``x4 = world_size: a sum where a mean was expected`` for ``sweep.analysis.collectives.scale_causes``'
    answer (the factors a ratio equals, and what each means); ``None`` for none."""
    if not causes:
        return None
    return f"x{float(causes['ratio']):.4g} = {' or '.join(causes['factors'])}" + \
        (f": {', or '.join(causes['causes'])}" if causes["causes"] else "")


def _scale_text(found: Place) -> str:
    """``; the distributed grad is x0.5 the standalone one (x0.5 = 1/world_size)``, and whether the
    other gradients share the factor (``scale_shared``, ``scale_alone``)."""
    shared = found.get("scale_shared")
    text = f"; the distributed {found['kind']} is x{float(found['scale']):.4g} the standalone one"
    causes = found.get("scale_causes")
    named = signature(causes) or found.get("scale_signature")  # (an older record: its text)
    updates = found.get("updates") if isinstance(found.get("updates"), dict) else {}
    stopped = (f"; but the difference is over after update {updates['until']}, and an op the reduction runs at every "
               "step would not stop") if updates.get("until") is not None else ""  # sweep.analysis.trace.update_onset
    if causes and found.get("scale_alone"):  # a known factor on one gradient: its own reduction, or a factor on it
        why = ", or ".join(causes["causes"]) or "a factor"
        text += (f" (x{float(causes['ratio']):.4g} = {' or '.join(causes['factors'])}, this tensor only: the other "
                 f"gradients are not scaled alike; {why} in its own reduction, or a factor on it alone{stopped})")
    elif named:
        text += f" ({named}{stopped})"
    elif found.get("scale_alone"):
        text += " (this tensor only, the other gradients are not scaled alike: not a reduction's factor)"
    if shared:
        text += (f", and so are {', '.join(shared[:4])}{' and more' if len(shared) > 4 else ''}, not every "
                 "gradient: the reduction scales some parameters otherwise (two paths: sharded and unsharded ones)")
    return text


def _shards_text(shards: Optional[Dict[str, Any]]) -> str:
    """``; only dim-0 shard 1 of 2 differs, held by rank 1`` (``differs beyond its rounding
    envelope`` where only that shard's difference is beyond it: ``shards["beyond"]``; ``""``
    without shards)."""
    if not shards:
        return ""
    many = len(shards["differ"]) > 1
    held = ", " + _plural(shards["ranks"], "held by rank") if shards.get("ranks") else ""
    beyond = " beyond its rounding envelope" if shards.get("beyond") else ""
    return (f"; only dim-0 {_plural(shards['differ'], 'shard')} of {shards['of']} "
            f"differ{'' if many else 's'}{beyond}{held}")


def located_text(tensor: Optional[Place], world_size: Optional[int]) -> Optional[str]:
    """The first differing tensor as the report's column gives it: :func:`tensor_text` (or the
    ``note`` saying why nothing was traced), and, on several ranks, which rank found it
    (``(rank r)``, or ``(every rank)``; not where the sentence names the shards and their
    ranks). ``None`` for no finding."""
    tensor = tensor or {}
    text = tensor_text(tensor) or tensor.get("note")
    if text and "step" in tensor and tensor.get("rank") is not None and (world_size or 1) > 1 \
            and not tensor.get("shards") and not (tensor.get("beyond_rounding") or {}).get("shards"):
        every = len(tensor.get("ranks") or []) == world_size
        text += " (every rank)" if every else f" (rank {tensor['rank']})"
    return text


# --- modules: sweep.analysis.modules ----------------------------------------------------------


def module_text(module: Optional[Place]) -> Optional[str]:
    """The sentence of a job's first differing module (``sweep.analysis.modules
    .compare_modules``' ``first``, merged over the ranks by ``first_over_ranks`` and with the
    first tensor by ``sweep.analysis.evidence.place``), or of a comparison where none differs
    (``traced_steps``); ``None`` for a dict that is no place (a ``note``); an older
    ``result.json``'s place without its data, its ``description``."""
    if not module:
        return None
    if not all(key in module for key in MODULE_DATA) and module.get("description"):
        return module["description"]  # an older result.json's place: its sentence only
    if module.get("module") is not None:
        text = _module(module) + _ranks_text(module)
    elif "traced_steps" in module:
        steps = module["traced_steps"] or 0
        agree = "within their rounding envelope" if module.get("envelope_measured", True) else "exactly"
        text = (f"every module's forward output and output gradient agree {agree} in the traced steps 0-{steps - 1}"
                if steps else "no module trace recorded")
    else:  # no place: a note; an older result.json's place holds its sentence only
        return module.get("description")
    return text + _computes_on_text(module)


def _module(first: Place) -> str:
    """``layer1 forward output at step 0, inputs agree, rel 0.001 (40x its rounding envelope)``,
    or for a backward ``layer1 backward at step 0: the gradient of its output agrees, ...``; the
    multiple of the envelope where one was measured (``first["bound"]`` is ``margin`` x it)."""
    if first.get("where") == "buffer":  # sweep.run.across.buffer_owner
        return (f"{first['module']} forward at step {first['step']}: its output agrees, its buffer {first['buffer']} "
                f"updates otherwise (rel {float(first['rel_out']):.3g})")
    call = f" (call {first['call'] + 1})" if first.get("call") else ""
    rel = first["rel_in"] if first.get("where") == "input" else first["rel_out"]
    times = f" ({float(rel) / float(first['bound']) * float(first.get('margin', 4.0)):.3g}x its rounding envelope)" \
        if first.get("bound") and rel is not None and math.isfinite(float(rel)) else ""  # inf: a NaN in one copy
    rows = first.get("rows_in") if first.get("where") == "input" else first.get("rows_out")
    if rows and first["phase"] == "forward":  # sweep.analysis.modules._rows_apart
        part, where = ("input", "before") if first.get("where") == "input" else ("forward output", "inside")
        return (f"{first['module']}{call} {part} at step {first['step']} holds other rows: {rows[0]} in the "
                f"standalone copy, {rows[1]} here, while every module before it agrees: a discrete choice {where} "
                "it (routing, a threshold, a top-k) went otherwise (a difference within rounding can flip it, as a "
                "fault can)")
    if first.get("where") == "input":
        return (f"{first['module']}{call} input at step {first['step']} differs, rel {float(first['rel_in']):.2g}{times}, "
                f"while every module before it agrees: it arises before {first['module']}'s forward (a pre-forward "
                "hook, e.g. FSDP2 casting inputs to param_dtype, or its parent's code)")
    if first["phase"] == "forward":
        inputs = "inputs agree" if first.get("rel_in") is not None else "inputs not recorded"
        return (f"{first['module']}{call} forward output at step {first['step']}, {inputs}, "
                f"rel {float(first['rel_out']):.2g}{times}")
    if first["module"] == "(loss)":
        return (f"the loss's gradient at step {first['step']} ({first['gradient_of']}'s output) differs, "
                f"rel {float(first['rel_out']):.2g}{times}, though every forward output agrees")
    return (f"{first['module']} backward at step {first['step']}: the gradient of its output agrees, the next "
            f"gradient autograd produced ({first['gradient_of']}'s output{call}) differs, "
            f"rel {float(first['rel_out']):.2g}{times}")


def _ranks_text(module: Place) -> str:
    """`` (every rank)``, `` (ranks 0, 1)``: the ranks naming the module
    (``sweep.analysis.modules.first_over_ranks``: ``ranks``, ``every``), and those that recorded
    it in one copy only (``uncompared``: `` (rank 0; rank 1 recorded it in one copy only: not
    compared there)``); ``""`` for one rank's."""
    if "ranks" not in module:
        return ""
    blind = module.get("uncompared") or []
    unseen = (f"; {_plural(blind, 'rank')} recorded it in one copy only: not compared there" if blind else "")
    return (" (every rank)" if module.get("every") else f" ({_plural(module['ranks'], 'rank')}{unseen})")


def _computes_on_text(module: Place) -> str:
    """What ``sweep.analysis.evidence.place`` adds: that the copies part after the backward
    (``after_backward``), or the tensor that already differs when the module computes
    (``computes_on``: its ``kind``, ``step`` and ``name``)."""
    if module.get("after_backward"):
        return ": the copies part after the backward (in the reduction, clipping or the optimizer step)"
    on = module.get("computes_on")
    if not on:
        return ""
    if on["kind"] in ("buffer", "initial_buffer"):
        when = "before any step" if on["kind"] == "initial_buffer" else f"after the forward of step {on['step']}"
        return f"; buffer {on.get('name')} already differs {when} (first differing tensor): the module computes with it"
    if on["kind"] == "initial":
        return "; the initial weights already differ (first differing tensor): the module computes on them"
    return (f"; the weights already differ after step {on['step']}'s update (first differing tensor): the module "
            "computes on them")


def described(place: Optional[Place], text: Optional[str]) -> Optional[Place]:
    """``place`` with its sentence ``text`` beside its data as ``description`` (how
    ``result.json`` keeps it), a copy; ``place`` as it is where it has no sentence."""
    if not place or text is None:
        return place
    return dict(place, description=text)
