"""The first tensor that differs: per-parameter gradients (after reduction) and weights
(after the step) of the two copies, step by step, compared to find where the runs part.

A *trace* is a list, one entry per step, of ``{"buffer": {name: array}, "grad": {name:
array}, "weight": {name: array}}`` with full (unsharded) float arrays: a rank gathers a
sharded tensor before it records it (``DTensor.full_tensor()``). Within a step the
buffers come first (the forward updates them: running statistics), then the gradients
(the backward, then the reduction), then the weights (the optimizer step). Step 0's
entry also holds ``"initial"`` and ``"initial_buffer"``, the weights and buffers before
any step; steps past the gradient window hold no ``"grad"``. Names are canonical
(:func:`canonical_name`); a name one copy records and the other lacks is reported
(:func:`missing_names`), never dropped silently. Pure numpy.

Where the two copies part is :func:`locate`'s answer; how the difference starts (the
onset) is :func:`update_onset`'s, from the per-step *update differences*
(:func:`update_series`). The update, unlike the loss, does not take the sign and size of
each step's fresh sample, so a periodic or a constant fault shows as such on random data.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from sweep.analysis.collectives import scale_signature

Trace = List[Dict[str, Dict[str, np.ndarray]]]
KINDS = ("initial", "initial_buffer", "buffer", "grad", "weight")  # a step's order; "initial*" at step 0 only
# Path segments that wrappers insert into parameter and module names (activation checkpointing,
# FSDP1, torch.compile, DDP/DataParallel; MindSpore's Cell.recompute(), whose cell holds the
# original as ``_recompute_cell.wrap_cell``): dropped anywhere in a dotted name (canonical_name).
WRAPPER_SEGMENTS = ("_checkpoint_wrapped_module", "_fsdp_wrapped_module", "_orig_mod", "module", "_recompute_cell",
                    "wrap_cell")


def canonical_name(name: str) -> str:
    """A parameter's or buffer's dotted name without the segments wrappers insert
    (:data:`WRAPPER_SEGMENTS`, anywhere in the path): ``module.layers.0._checkpoint_wrapped_module.w``
    -> ``layers.0.w``, so both copies name one tensor alike whatever wraps them."""
    return ".".join(part for part in name.split(".") if part not in WRAPPER_SEGMENTS)


def missing_names(standalone: Trace, distributed: Trace) -> List[Dict[str, Any]]:
    """The tensors one copy records and the other lacks, over every step and kind of the
    two traces: ``[{"name", "kind", "step", "only_in": "standalone" | "distributed"}]``,
    one entry per (name, side), at the first step it is missing, sorted by name. A
    gradient that only one copy has is left out (a frozen or unused parameter has none),
    so are steps only one trace reaches."""
    seen: Dict[tuple, Dict[str, Any]] = {}
    for step in range(min(len(standalone), len(distributed))):
        for kind in KINDS:
            if kind == "grad" or kind not in standalone[step] or kind not in distributed[step]:
                continue
            ours, theirs = set(standalone[step][kind]), set(distributed[step][kind])
            for side, names in (("standalone", ours - theirs), ("distributed", theirs - ours)):
                for name in names:
                    seen.setdefault((name, side), {"name": name, "kind": kind, "step": step, "only_in": side})
    return sorted(seen.values(), key=lambda m: (m["name"], m["only_in"]))


def missing_text(missing: Sequence[Dict[str, Any]]) -> str:
    """One sentence naming every tensor of :func:`missing_names` (no ``"; "`` inside, so it
    stays one note): ``only the distributed copy has the parameter extra.weight, ...``."""
    parts = []
    for side in ("distributed", "standalone"):
        names = [m for m in missing if m["only_in"] == side]
        if names:
            listed = ", ".join(f"{'buffer' if 'buffer' in m['kind'] else 'parameter'} {m['name']}" for m in names)
            parts.append(f"only the {side} copy has the {listed}")
    return " and ".join(parts) + " (not compared: the copies differ in what they hold)" if parts else ""
# Relative differences below this are float rounding (summation order; fp32's epsilon is
# 1.2e-7 and a few steps of accumulation stay far below 1e-4), not a fault, which moves
# its first tensor by 1e-3 or more (a scale, a missing reduction, a skipped step).
ROUNDING_REL = 1e-4
# A tensor whose largest value is below this share of the largest value of its kind in that
# step (every gradient, every weight) is zero up to rounding: a gradient that cancels
# exactly in theory (a bias feeding a normalisation) carries rounding noise of the size
# of the terms that cancel, so its difference is judged against its kind's scale, never
# against its own near-zero values (whose relative difference is O(1) noise).
NEAR_ZERO = 1e-3


def differing_shards(a: np.ndarray, b: np.ndarray, shards: int, noise_floor: float = 0.0) -> List[int]:
    """Which of ``shards`` dim-0 chunks of two full tensors of one shape differ by more than
    ``noise_floor``: chunk ``i`` holds rows ``[i c, (i + 1) c)``, ``c = ceil(rows /
    shards)`` (``torch.chunk``'s split, which FSDP2 uses for its dim-0 shards)."""
    if a.ndim == 0 or not a.shape[0]:
        return []
    rows = np.abs(a - b).reshape(a.shape[0], -1).max(axis=1) > noise_floor
    size = -(-a.shape[0] // shards)
    return sorted({int(i) // size for i in np.flatnonzero(rows)})


def first_difference(standalone: Trace, distributed: Trace, noise_floor: float = 0.0,
                     min_rel: float = 0.0, layout: Optional[Dict[str, int]] = None,
                     rank: int = 0, known: Optional[Dict[str, Optional[float]]] = None) -> Optional[Dict[str, Any]]:
    """The first ``(step, kind, name)`` whose two tensors differ by more than
    ``noise_floor`` (max absolute difference) and by at least ``min_rel`` (relative), in
    trace order: kinds in :data:`KINDS` order, within a kind by cause where the step
    records an ``"order"`` (the gradients as autograd produced them), else by name; or
    ``None`` if none does.

    Returns ``{"step", "kind", "name", "abs_diff", "rel_diff", "weights_identical_before",
    "grads_recorded", "description"}``: ``rel_diff`` is ``abs_diff / scale``, ``scale`` the
    standalone tensor's ``max|.|``, or, for a tensor that is zero up to rounding in both
    copies (``max|.|`` below :data:`NEAR_ZERO` x the largest ``max|.|`` of any standalone
    tensor of that kind in that step), that largest one (then ``"near_zero": True``);
    ``inf`` for a zero scale; a shape mismatch counts as a difference with
    ``abs_diff`` ``inf``; ``grads_recorded``: the trace holds this step's gradient of that
    parameter (so a weight difference can say its gradients were identical). With
    ``layout`` (parameter name -> its number of dim-0 shards, gathered into the full
    tensors compared here) and when only some shards differ, also ``"shards": {"of": k,
    "differ": [i, ...], "ranks": [...]}``: the ranks that hold those shards in the shard
    group of ``rank`` (the rank that gathered the tensors), ``(rank // k) k + i`` (a mesh
    ``(replicate, shard)`` of consecutive ranks, ``init_device_mesh``'s order). A gradient
    that is a pure multiple of the standalone one (:func:`pure_scale`) adds ``"scale"``;
    where every gradient of that step is scaled alike (a reduction's factor) and the factor
    matches one of ``known`` (``{"world_size": 4, ...}``,
    ``sweep.analysis.collectives.scale_signature``), ``"scale_signature"``; where the other
    gradients are not, ``"scale_alone": True``.
    """
    for step in range(min(len(standalone), len(distributed))):
        for kind in KINDS:
            ours, theirs = standalone[step].get(kind, {}), distributed[step].get(kind, {})
            shared = _by_cause(set(ours) & set(theirs), standalone[step].get("order", {}).get(kind))
            kind_scale = max((_scale(ours[n]) for n in shared), default=0.0)
            for name in shared:
                a, b = np.asarray(ours[name], np.float64), np.asarray(theirs[name], np.float64)
                if a.shape != b.shape:
                    diff = float("inf")
                else:
                    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
                if not diff > noise_floor:
                    continue
                both = max(_scale(a), _scale(b)) if a.shape == b.shape else _scale(a)
                near_zero = both < NEAR_ZERO * kind_scale  # in both copies: a fault that makes it large is no noise
                scale = kind_scale if near_zero else _scale(a)
                rel = diff / scale if scale > 0 else float("inf")
                if rel < min_rel:
                    continue
                before = kind not in ("initial", "initial_buffer") and (step > 0 or kind == "weight")
                found = {"step": step, "kind": kind, "name": name, "abs_diff": diff, "rel_diff": rel,
                         "weights_identical_before": before, "min_rel": min_rel,
                         "grads_recorded": bool(ours_grads := standalone[step].get("grad")) and name in ours_grads}
                theirs_grads = distributed[step].get("grad") or {}
                if ours_grads and theirs_grads and (name in ours_grads) != (name in theirs_grads):
                    found["grad_only_in"] = "standalone" if name in ours_grads else "distributed"
                if near_zero:
                    found["near_zero"] = True
                k = (layout or {}).get(name, 1)
                parts = differing_shards(a, b, k, noise_floor) if k > 1 and a.shape == b.shape else []
                if parts and len(parts) < k:
                    found["shards"] = {"of": k, "differ": parts,
                                       "ranks": [rank // k * k + i for i in parts]}
                ratio = pure_scale(a, b) if a.shape == b.shape and kind == "grad" else None
                if ratio is not None:
                    found["scale"] = ratio
                    # a reduction scales every gradient alike: a factor on this tensor alone is no reduction's
                    alike = all(_same_scale(ours[n], theirs[n], ratio) for n in shared)
                    signature = scale_signature(ratio, known or {}) if alike else None
                    if signature:
                        found["scale_signature"] = signature
                    if not alike:
                        found["scale_alone"] = True
                found["description"] = describe(found)
                return found
    return None


def final_buffers(standalone: Dict[str, Any], distributed: Dict[str, Any], last_step: int,
                  noise_floor: float = 0.0) -> Optional[Dict[str, Any]]:
    """The first buffer (by name: ``{name: array}`` of each copy, after the last step) that
    differs beyond float rounding (``ROUNDING_REL``), as :func:`first_difference`'s dict of
    kind ``buffer`` at ``last_step`` (a running statistic the forward updates: BatchNorm's
    ``running_mean`` / ``moving_mean``), or ``None``."""
    found = first_difference([{"buffer": standalone}], [{"buffer": distributed}], noise_floor,
                             min_rel=ROUNDING_REL)
    if found is None:
        return None
    found = dict(found, step=last_step)
    found["description"] = (f"buffer {found['name']} after the last step ({last_step}), abs {found['abs_diff']:.3g}, "
                            f"rel {found['rel_diff']:.3g}: a statistic the forward updates, which the training "
                            "losses do not read") + _shards_text(found.get("shards"))
    return found


PURE_SCALE_RESIDUAL = 1e-3  # b is r * a when |b - r a| <= this share of |b|


def pure_scale(a: np.ndarray, b: np.ndarray) -> Optional[float]:
    """``r`` when ``b`` is ``r`` times ``a`` (least squares ``r = a.b / a.a``, residual
    within :data:`PURE_SCALE_RESIDUAL` of ``|b|``) and ``r`` is not 1, else ``None``."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    aa, bb = float(np.dot(a, a)), float(np.linalg.norm(b))
    if aa == 0 or bb == 0:
        return None
    r = float(np.dot(a, b)) / aa
    if abs(r - 1.0) < 1e-3 or float(np.linalg.norm(b - r * a)) > PURE_SCALE_RESIDUAL * bb:
        return None
    return r


def _same_scale(a: Any, b: Any, ratio: float) -> bool:
    """Whether ``b`` is ``ratio`` times ``a`` (both zero counts), within :data:`PURE_SCALE_RESIDUAL`."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return False
    norm = float(np.linalg.norm(b))
    if norm == 0.0:
        return not np.any(a)
    return float(np.linalg.norm(b - ratio * a)) <= PURE_SCALE_RESIDUAL * norm


def _by_cause(names: Any, order: Optional[Sequence[str]]) -> List[str]:
    """``names`` in the order the step produced them where the trace gives one (``order``:
    a step's ``"order"[kind]``, e.g. the gradients in the order autograd produced them:
    the last layer's first), then the rest by name."""
    rank = {name: i for i, name in enumerate(order or ())}
    return sorted(names, key=lambda n: (rank.get(n, len(rank)), n))


def _scale(tensor: Any) -> float:
    """``max|tensor|`` (0.0 for an empty one), float64."""
    values = np.asarray(tensor, np.float64)
    return float(np.max(np.abs(values))) if values.size else 0.0


def to_shards(standalone: Trace, distributed: Trace, rank: int) -> Trace:
    """``standalone`` with each tensor cut to the slice ``distributed`` holds where this
    rank records a shard rather than the full tensor (a sharding engine that does not
    gather, e.g. hyper-parallel on MindSpore): dim-0 sharding over ``k = full / shard``
    ranks, rank ``r`` holding slice ``r % k`` (shard groups of consecutive ranks). A
    tensor whose shapes do not fit that is left whole (and then differs by shape)."""
    out = []
    for ours, theirs in zip(standalone, distributed):
        step = {}
        for kind, tensors in ours.items():
            step[kind] = {}
            for name, full in tensors.items():
                shard = theirs.get(kind, {}).get(name)
                if not isinstance(full, np.ndarray):  # an entry that is no tensor (the module trace's "order")
                    step[kind][name] = full
                    continue
                fits = (shard is not None and full.ndim and shard.shape != full.shape and shard.shape[0]
                        and full.shape[0] % shard.shape[0] == 0 and full.shape[1:] == shard.shape[1:])
                if fits:
                    n = shard.shape[0]
                    index = rank % (full.shape[0] // n)
                    full = full[index * n:(index + 1) * n]
                step[kind][name] = full
        out.append(step)
    return out


def locate(standalone: Trace, distributed: Trace, noise_floor: float, last_step: int,
           layout: Optional[Dict[str, int]] = None, rank: int = 0,
           known: Optional[Dict[str, Optional[float]]] = None) -> Dict[str, Any]:
    """:func:`first_difference`, and if that one is within float rounding
    (:data:`ROUNDING_REL`), also the first tensor beyond it (``beyond_rounding``: a dict
    like the first, or ``None``), added to the description; ``{"description": "no tensor
    differs in steps 0-<last_step>"}`` if none differs. ``updates`` holds the onset from
    the update differences (:func:`update_onset`, with ``rel`` and ``along`` per step) when
    the traces have initial weights. ``layout`` and ``rank``: as for
    :func:`first_difference` (which shards, so which ranks, differ). Tensors only one
    copy holds (:func:`missing_names`) are listed under ``missing`` and named in the
    description (which then says "no tensor both copies hold differs" when nothing else does)."""
    series = update_series(standalone, distributed)
    updates = dict(update_onset(series), **series) if series["rel"] else None
    found = _locate(standalone, distributed, noise_floor, last_step, layout, rank,
                    systematic=bool(updates and updates.get("systematic")), known=known)
    if updates is not None:
        found["updates"] = updates
    missing = missing_names(standalone, distributed)
    if missing:  # never silently: "initial weights equal" holds only for what both copies hold
        found["missing"] = missing
        if "step" not in found:
            found["description"] = f"no tensor both copies hold differs in steps 0-{last_step}"
        found["description"] += "; " + missing_text(missing)
    return found


def _locate(standalone: Trace, distributed: Trace, noise_floor: float, last_step: int,
            layout: Optional[Dict[str, int]], rank: int, systematic: bool,
            known: Optional[Dict[str, Optional[float]]] = None) -> Dict[str, Any]:
    found = first_difference(standalone, distributed, noise_floor, layout=layout, rank=rank, known=known)
    if found is None:
        return {"description": f"no tensor differs in steps 0-{last_step}"}
    if found["rel_diff"] < ROUNDING_REL:
        beyond = first_difference(standalone, distributed, noise_floor, min_rel=ROUNDING_REL, layout=layout,
                                  rank=rank, known=known)
        found["beyond_rounding"] = beyond
        if beyond:
            found["description"] += f"; first beyond rounding (rel >= {ROUNDING_REL:g}): " + beyond["description"]
        elif systematic:
            found["description"] += (f"; within rounding's size (rel < {ROUNDING_REL:g}) but one sign along every "
                                     "update: systematic, not rounding")
        else:
            found["description"] += f"; rounding only (rel < {ROUNDING_REL:g}) in steps 0-{last_step}"
    return found


def describe(found: Dict[str, Any]) -> str:
    """``layer1.bias grad at step 3, abs 1e-05, rel 2e-3; weights identical before``; for
    every kind, initial weights and buffers too, the dim-0 shards that differ and the
    ranks holding them where only some do (``found["shards"]``: a per-rank init seed
    shows as ``only dim-0 shard 1 of 2 differs, held by rank 1``)."""
    sizes = f"abs {found['abs_diff']:.3g}, rel {found['rel_diff']:.3g}"
    if found["kind"] == "initial":
        text = f"{found['name']} initial weights (before any step), {sizes}"
    elif found["kind"] == "initial_buffer":
        text = f"buffer {found['name']} initial value (before any step), {sizes}"
    elif found["kind"] == "buffer":
        text = f"buffer {found['name']} after the forward of step {found['step']}, {sizes}" + (
            f"; weights {_agree(found)} before" if found["step"] > 0 else "")
    else:
        text = f"{found['name']} {found['kind']} at step {found['step']}, {sizes}" + _update_text(found)
    return text + _shards_text(found.get("shards"))


def _agree(found: Dict[str, Any]) -> str:
    """How the tensors before ``found`` agree: ``identical``, or ``within rounding (rel <
    1e-4)`` where ``found`` was searched beyond rounding (its ``min_rel``): those may differ
    below it."""
    return f"within rounding (rel < {found['min_rel']:g})" if found.get("min_rel") else "identical"


def _update_text(found: Dict[str, Any]) -> str:
    """What a gradient's or a weight's description adds: near zero, a pure scale and its
    signature, and where it arises (before or after the reduction)."""
    text = ""
    if found.get("near_zero"):
        text += f" (zero up to rounding: rel to the largest {found['kind']})"
    if found.get("scale") is not None:
        text += f"; the distributed {found['kind']} is x{found['scale']:.4g} the standalone one" + (
            f" ({found['scale_signature']})" if found.get("scale_signature") else
            " (this tensor only, the other gradients are not scaled alike: not a reduction's factor)"
            if found.get("scale_alone") else "")
    if found["kind"] == "grad":
        text += f"; weights {_agree(found)} before" if found["step"] > 0 else "; the first gradient (initial weights equal)"
    elif found.get("grad_only_in"):
        text += (f"; only the {found['grad_only_in']} copy has a gradient for it: requires_grad (or the "
                 "parameter's use) differs between the copies")
    elif found.get("grads_recorded", True):
        # searched beyond rounding (min_rel): the gradients may differ below it, never "identical"
        text += f"; gradients of that step {_agree(found)} (as reduced): it arises after the reduction, in clipping, " \
                "scaling or the optimizer step"
    else:
        text += " (past the steps whose gradients are recorded: compare.trace_after)"
    return text


def _shards_text(shards: Optional[Dict[str, Any]]) -> str:
    """``; only dim-0 shard 1 of 2 differs, held by rank 1`` (``""`` without shards)."""
    if not shards:
        return ""
    many = len(shards["differ"]) > 1
    held = f", held by rank{'s' if len(shards['ranks']) > 1 else ''} {', '.join(map(str, shards['ranks']))}" \
        if shards.get("ranks") else ""
    return (f"; only dim-0 shard{'s' if many else ''} {', '.join(map(str, shards['differ']))} of {shards['of']} "
            f"differ{'' if many else 's'}{held}")


UPDATE_EVENT = 2.0  # an event: an update difference over this many times the step before's
NOISE_BALANCE = 0.5  # noise: |mean sign of the error along the update| (or |sum| / sum of |.|) below this
ABRUPT_SHARE = 0.1  # abrupt: the first real update difference is this share of the largest
PERIOD_GAP = 0.1  # periodic: the steps of one phase stand apart from the rest by this share of the largest
SYSTEMATIC_STEPS = 6  # below rounding's size, yet one sign on this many differing steps or more (rounding: 2^-5)
OVER_SHARE = 0.25  # over: the aftermath of a fault that stopped stays below this share of its largest step
QUIET_STEPS = 3  # over: after the last large update difference, this many traced steps (and 2x its span) stay small
UPDATE_ONSET_RULE = (
    "onset from the update differences (traced jobs): with u_t = w_t - w_(t-1) the standalone copy's update "
    "of step t and e_t the distributed copy's update minus it (over every parameter), rel_t = |e_t| / |u_t| "
    "and along_t = (e_t . u_t) / |u_t|^2 (the error's signed share along the update: +1 for a doubled update); "
    f"a step is real if rel_t >= {ROUNDING_REL:g} (beyond float rounding) and an event if it is real, "
    f"rel_t > {UPDATE_EVENT:g} x rel_(t-1) and rel_t >= {ABRUPT_SHARE:g} x the largest rel. periodic (period n "
    ">= 2, the smallest) if, from the first real step, the steps of one phase of n (3 or more) stand apart in rel, "
    f"in along, or in either's change from the step before (a sawtooth on a trend), from all other steps, by at "
    f"least {PERIOD_GAP:g} x the series' largest size; abrupt and over (until: its last step) if the large steps "
    f"(rel >= {OVER_SHARE:g} x the largest) start at the first real step and the steps after the last of them, "
    f"{QUIET_STEPS} or more and at least twice as many as the large steps span, are small and do not all keep the "
    "first real step's sign along the update (a fault on one step or a few, then none: what differs later is its "
    "aftermath; one that keeps its sign is still there, fading); noise if along takes both signs alike, by count "
    f"or by size: |mean of sign(along_t)| < {NOISE_BALANCE:g} or |sum of along_t| / sum of |along_t| < "
    f"{NOISE_BALANCE:g}, over 3 or more real steps (differing steps when none is real), as for random noise or "
    "float rounding (fresh random noise on n steps keeps both near 1/sqrt(n); by size as well, because the steps "
    "after a noisy one carry its effect with one sign while the noisy steps dominate the size; a fault that "
    "scales, skips, delays or repeats an update errs one way by both); when no step is real but along keeps one "
    f"sign on every differing step, {SYSTEMATIC_STEPS} or more, the error is systematic, not rounding (rounding "
    "takes both signs): the first differing step counts as real (systematic); abrupt if the first real step's "
    f"rel is >= {ABRUPT_SHARE:g} x the largest; growth otherwise. When no step is real (float rounding only): "
    "growth if rel's second half averages over twice its first, noise otherwise. The losses see update t "
    "from step t + 1"
)


def _flat(tensors: Dict[str, np.ndarray], names: Sequence[str]) -> np.ndarray:
    return np.concatenate([np.asarray(tensors[n], np.float64).ravel() for n in names]) if names else np.zeros(0)


def update_series(standalone: Trace, distributed: Trace) -> Dict[str, List[float]]:
    """Per traced step ``t`` (the entries with weights, in order), over every parameter
    both copies record with one shape: ``rel[t] = |e_t| / |u_t|`` and ``along[t] = (e_t .
    u_t) / |u_t|^2``, with ``u_t = w_t - w_(t-1)`` the standalone copy's update (``w_(-1)``:
    step 0's ``"initial"`` weights, each copy its own) and ``e_t`` the distributed copy's
    update minus it; Euclidean norms over the concatenated parameters, float64.
    ``rel`` is ``inf`` (``along`` 0) where the standalone update is zero and the other is
    not. Returns ``{"rel": [...], "along": [...]}``, empty lists without initial weights."""
    series: Dict[str, List[float]] = {"rel": [], "along": []}
    if not standalone or "initial" not in standalone[0] or "initial" not in distributed[0]:
        return series
    ours_prev, theirs_prev = standalone[0]["initial"], distributed[0]["initial"]
    names = sorted(n for n in set(ours_prev) & set(theirs_prev) if np.shape(ours_prev[n]) == np.shape(theirs_prev[n]))
    a_prev, b_prev = _flat(ours_prev, names), _flat(theirs_prev, names)
    for ours, theirs in zip(standalone, distributed):
        if "weight" not in ours or "weight" not in theirs:
            break
        a, b = _flat(ours["weight"], names), _flat(theirs["weight"], names)
        u, e = a - a_prev, (b - b_prev) - (a - a_prev)
        un, en = float(np.linalg.norm(u)), float(np.linalg.norm(e))
        if un > 0:
            series["rel"].append(en / un)
            series["along"].append(float(np.dot(e, u)) / un ** 2)
        else:
            series["rel"].append(float("inf") if en > 0 else 0.0)
            series["along"].append(0.0)
        a_prev, b_prev = a, b
    return series


def one_sign_along(updates: Dict[str, Any]) -> bool:
    """Whether the update error keeps one sign along the update on every differing step
    (``along_t`` of :func:`update_series` where ``rel_t > 0``, two or more of them): a
    systematic error (a scale, a skipped or repeated update), which rounding is not (it
    takes both signs)."""
    rel = np.asarray(updates.get("rel") or [], np.float64)
    along = np.asarray(updates.get("along") or [], np.float64)
    signs = np.sign(along[(rel > 0) & np.isfinite(rel)]) if rel.size == along.size else np.zeros(0)
    return signs.size >= 2 and bool(np.all(signs == signs[0])) and signs[0] != 0


def _period(rel: np.ndarray, along: np.ndarray, start: int) -> Optional[Any]:
    """``(n, steps)``: the smallest period ``n >= 2`` whose steps ``start + r + i n`` (3 or
    more) stand apart from every other step from ``start`` on, by a gap of
    :data:`PERIOD_GAP` x the series' largest size, in ``rel``, in ``along``, or in their
    change from the step before (a sawtooth on a trend: a momentum buffer cleared every n
    steps peaks at every clearing, each peak above the last cycle's but not above every
    later step); ``None`` if none does."""
    window = np.arange(start, rel.size)
    with np.errstate(invalid="ignore"):
        changes = [np.diff(series, prepend=0.0) for series in (rel, along)]  # x_t - x_(t-1), x_(-1) = 0
    candidates = [x for x in (rel, along, *changes) if np.all(np.isfinite(x[window]))]
    for n in range(2, window.size // 3 + 1):
        for r in range(n):
            phase = window[(window - start) % n == r]
            rest = window[(window - start) % n != r]
            if phase.size < 3 or not rest.size:
                continue
            for series in candidates:
                gap = PERIOD_GAP * float(np.max(np.abs(series[window])))
                high = float(np.min(series[phase])) - float(np.max(series[rest]))
                low = float(np.min(series[rest])) - float(np.max(series[phase]))
                if gap > 0 and max(high, low) >= gap:
                    return n, [int(t) for t in phase]
    return None


def update_onset(series: Dict[str, Sequence[float]]) -> Dict[str, Any]:
    """How the update difference starts (:data:`UPDATE_ONSET_RULE`), from
    :func:`update_series`. Returns ``{"pattern": "none" | "periodic" | "noise" | "abrupt" |
    "growth", "first_step": first differing update (or None), "real_step": first update
    beyond rounding (or None), "period": n or None, "events": [update steps]}``, and
    ``"until"`` (the last large update step of a fault that stopped) or ``"systematic":
    True`` (an error below rounding's size that keeps one sign: real all the same) where
    they apply. Steps are update steps: the losses see update ``t`` from step ``t + 1``."""
    rel = np.asarray(series.get("rel", []), np.float64)
    along = np.asarray(series.get("along", []), np.float64)
    differ = np.flatnonzero(rel > 0)
    if not differ.size:
        return {"pattern": "none", "first_step": None, "real_step": None, "period": None, "events": []}
    real = np.flatnonzero(rel >= ROUNDING_REL)
    before = np.concatenate([[0.0], rel[:-1]])
    finite = rel[np.isfinite(rel)]
    largest = float(np.max(finite)) if finite.size else float("inf")
    events = [int(t) for t in real if rel[t] > UPDATE_EVENT * before[t] and rel[t] >= ABRUPT_SHARE * largest]
    out = {"first_step": int(differ[0]), "real_step": int(real[0]) if real.size else None, "period": None,
           "events": events}
    period = _period(rel, along, int(real[0])) if real.size else None
    if period is not None:
        return dict(out, pattern="periodic", period=period[0], events=period[1])
    if real.size:
        large = np.flatnonzero(~np.isfinite(rel) | (rel >= OVER_SHARE * largest))
        span, quiet = int(large[-1]) - int(real[0]) + 1, rel.size - 1 - int(large[-1])
        after = along[int(large[-1]) + 1:]
        after = np.sign(after[np.isfinite(after) & (after != 0)])
        # a fault that fades keeps its sign along the update after its large steps; the aftermath of
        # one that stopped (weights that differ, then gradients that differ) takes both signs
        fading = after.size >= QUIET_STEPS and bool(np.all(after == np.sign(along[int(real[0])])))
        if large[0] == real[0] and quiet >= max(QUIET_STEPS, 2 * span) and not fading:  # over: it stopped
            return dict(out, pattern="abrupt", events=[int(t) for t in large], until=int(large[-1]))
    steps = real if real.size else differ
    signs, sized = np.sign(along[steps]), along[steps][np.isfinite(rel[steps])]
    # weighed by size: a large one-signed error is not outvoted by many tiny mixed-sign steps after it
    by_size = abs(float(np.sum(sized))) / float(np.sum(np.abs(sized))) if np.any(sized) else 1.0
    if signs.size >= 3 and by_size < NOISE_BALANCE:
        return dict(out, pattern="noise")
    if not real.size and signs.size >= SYSTEMATIC_STEPS and abs(float(np.mean(signs))) == 1.0:
        # one sign on every differing step: a systematic error below rounding's size
        out.update(real_step=int(differ[0]), systematic=True)
        real = differ
    if real.size:
        abrupt = not np.isfinite(rel[real[0]]) or rel[real[0]] >= ABRUPT_SHARE * largest
        return dict(out, pattern="abrupt" if abrupt else "growth")
    half = rel.size // 2
    growing = half >= 1 and float(np.mean(rel[half:])) > 2.0 * float(np.mean(rel[:half]))
    return dict(out, pattern="growth" if growing else "noise")


def tensor_rows(standalone: Trace, distributed: Trace) -> List[Dict[str, Any]]:
    """Every tensor both traces hold, compared: ``[{"step", "kind", "name", "order", "abs",
    "rel", "shape"}]`` in trace order (:func:`first_difference`'s: kinds in :data:`KINDS`
    order, within a kind by cause), ``rel`` against the standalone tensor's ``max|.|``
    (``inf`` for a zero one that differs; a shape mismatch gives ``inf`` for both). The
    table behind ``sweep.load_trace``."""
    rows: List[Dict[str, Any]] = []
    for step in range(min(len(standalone), len(distributed))):
        for kind in KINDS:
            ours, theirs = standalone[step].get(kind, {}), distributed[step].get(kind, {})
            names = _by_cause(set(ours) & set(theirs), standalone[step].get("order", {}).get(kind))
            for i, name in enumerate(names):
                a, b = np.asarray(ours[name], np.float64), np.asarray(theirs[name], np.float64)
                if a.shape != b.shape:
                    diff = rel = float("inf")
                else:
                    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
                    scale = _scale(a)
                    rel = diff / scale if scale > 0 else (float("inf") if diff > 0 else 0.0)
                rows.append({"step": step, "kind": kind, "name": name, "order": i, "abs": diff, "rel": rel,
                             "shape": list(b.shape)})
    return rows
