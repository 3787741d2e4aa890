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

The rules read no tensor themselves: they read the *pair statistics* of every tensor both
copies hold (``sweep.analysis.pairs``: its largest difference, its size, dot products), so
a rank that streams them (``sweep.train.trace_book``, staged) and one that holds both
traces whole (full capture: the functions here that take two traces) reach the same
finding from the same numbers. Each rule has both forms: ``first_difference`` on two
traces, ``first_difference_in`` on their :data:`~sweep.analysis.pairs.PairTrace`; the
rounding envelope likewise (``envelope_bounds`` / ``envelope_bounds_in``, from the pairs of
the standalone copy and its twin).

Where the two copies part is :func:`locate`'s answer; how the difference starts (the
onset) is :func:`update_onset`'s, from the per-step *update differences*
(:func:`update_series`). The update, unlike the loss, does not take the sign and size of
each step's fresh sample, so a periodic or a constant fault shows as such on random data.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from sweep.analysis.collectives import scale_causes
from sweep.analysis.envelope import EnvelopeSetting
from sweep.analysis.pairs import (KINDS, PURE_SCALE_RESIDUAL, PairTrace, pair_trace, pure_scale,  # noqa: F401
                                  same_scale)

Trace = List[Dict[str, Dict[str, np.ndarray]]]
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
    return missing_names_in([{"ours": {k: list(v) for k, v in ours.items() if k in KINDS},
                              "theirs": {k: list(v) for k, v in theirs.items() if k in KINDS}}
                             for ours, theirs in zip(standalone, distributed)])


def missing_names_in(pairs: PairTrace) -> List[Dict[str, Any]]:
    """:func:`missing_names` from the names each copy recorded (a :data:`PairTrace`'s
    ``ours`` and ``theirs``)."""
    seen: Dict[tuple, Dict[str, Any]] = {}
    for step, entry in enumerate(pairs):
        for kind in KINDS:
            if kind == "grad" or kind not in entry["ours"] or kind not in entry["theirs"]:
                continue
            ours, theirs = set(entry["ours"][kind]), set(entry["theirs"][kind])
            for side, names in (("standalone", ours - theirs), ("distributed", theirs - ours)):
                for name in names:
                    seen.setdefault((name, side), {"name": name, "kind": kind, "step": step, "only_in": side})
    return sorted(seen.values(), key=lambda m: (m["name"], m["only_in"]))


# A tensor whose largest value is below this share of the largest value of its kind in that
# step (every gradient, every weight) is zero up to rounding: a gradient that cancels
# exactly in theory (a bias feeding a normalisation) carries rounding noise of the size
# of the terms that cancel, so its difference is judged against its kind's scale, never
# against its own near-zero values (whose relative difference is O(1) noise).
NEAR_ZERO = 1e-3


@dataclass(frozen=True)
class Search:
    """How the first difference is searched (:func:`first_difference`, :func:`locate` and
    their ``_in`` forms).

    Attributes:
        noise_floor: the largest absolute difference (``max |a - b|``, the tensors' own
            units) that counts as none (``compare.noise_floor``; 0: any difference counts).
        rank: the rank that gathered the compared tensors (or recorded its shards): the ranks
            named as holding differing dim-0 shards are those of its shard group.
        known: the factors a reduction may scale gradients by, by name (``{"world_size": 4.0,
            "grad_accum_steps": 2.0, ...}``, ``None`` values for factors that do not apply):
            what a pure scale is matched against (``sweep.analysis.collectives
            .scale_causes``); ``None``: none.
        layout: parameter name -> its number of dim-0 shards, gathered into the full tensors
            compared (``None``: not sharded). Read where the pair statistics are made from two
            traces (:func:`first_difference`, :func:`locate`); the pair statistics carry it in
            their rows (``"of"``, ``"chunks"``), so the ``_in`` forms do not read it.
        margin: ``compare.envelope_margin``, the envelope's bounds over the twin's difference:
            searched against bounds, only some dim-0 shards are named beyond them where the
            others stay within the twin's difference itself (:func:`_shards_apart`; 1: within
            the bound). :func:`locate_in` sets it from its ``envelope``.
    """

    noise_floor: float = 0.0
    rank: int = 0
    known: Optional[Dict[str, Optional[float]]] = None
    layout: Optional[Dict[str, int]] = None
    margin: float = 1.0


def differing_shards(a: np.ndarray, b: np.ndarray, shards: int, noise_floor: float = 0.0) -> List[int]:
    """Which of ``shards`` dim-0 chunks of two full tensors of one shape differ by more than
    ``noise_floor``: chunk ``i`` holds rows ``[i c, (i + 1) c)``, ``c = ceil(rows /
    shards)`` (``torch.chunk``'s split, which FSDP2 uses for its dim-0 shards)."""
    if a.ndim == 0 or not a.shape[0]:
        return []
    rows = np.abs(a - b).reshape(a.shape[0], -1).max(axis=1) > noise_floor
    size = -(-a.shape[0] // shards)
    return sorted({int(i) // size for i in np.flatnonzero(rows)})


def first_difference(standalone: Trace, distributed: Trace, search: Search = Search(),
                     bounds: Optional[Bounds] = None) -> Optional[Dict[str, Any]]:
    """The first ``(step, kind, name)`` whose two tensors differ by more than
    ``search.noise_floor`` (max absolute difference, :class:`Search`) and, with ``bounds`` (:func:`envelope_bounds`:
    the relative size each tensor's rounding envelope allows), by more than its bound, in
    trace order: kinds in :data:`KINDS` order, within a kind by cause where the step
    records an ``"order"`` (the gradients as autograd produced them), else by name; or
    ``None`` if none does. A tensor without a bound (the initial weights, which the copies
    must share exactly) counts from any difference.

    Returns ``{"step", "kind", "name", "abs_diff", "rel_diff", "weights_identical_before",
    "grads_recorded", "searched_beyond"}`` (and ``"bound"``, searched with ``bounds``), data
    only (``sweep.findings.places.tensor_text`` words it):
    ``rel_diff`` is ``abs_diff / scale``, ``scale`` the
    standalone tensor's ``max|.|``, or, for a tensor that is zero up to rounding in both
    copies (``max|.|`` below :data:`NEAR_ZERO` x the largest ``max|.|`` of any standalone
    tensor of that kind in that step), that largest one (then ``"near_zero": True``);
    ``inf`` for a zero scale; a shape mismatch counts as a difference with
    ``abs_diff`` ``inf``, and so does an element that is NaN or infinite in one copy only (then
    ``"nonfinite": True``); ``grads_recorded``: the trace holds this step's gradient of that
    parameter (so a weight difference can say its gradients were identical). With
    ``search.layout`` (parameter name -> its number of dim-0 shards, gathered into the full
    tensors compared here) and when only some shards differ, also ``"shards": {"of": k,
    "differ": [i, ...], "ranks": [...]}`` (with ``bounds``: only some shards differ beyond the
    tensor's envelope, each shard's largest difference against it, ``"beyond": True`` where
    that is above ``noise_floor``): the ranks that hold those shards in the shard
    group of ``search.rank`` (the rank that gathered the tensors), ``(rank // k) k + i`` (a mesh
    ``(replicate, shard)`` of consecutive ranks, ``init_device_mesh``'s order). A gradient
    that is a pure multiple of the standalone one (:func:`pure_scale`) adds ``"scale"``;
    where every gradient of that step is scaled alike (a reduction's factor) and the factor
    matches one of ``search.known`` (``{"world_size": 4, ...}``,
    ``sweep.analysis.collectives.scale_causes``), ``"scale_causes"``; where the other
    gradients are not, ``"scale_alone": True`` (or, where some others are scaled alike,
    ``"scale_shared"``: their names), with ``"scale_causes"`` too where the factor matches
    (that tensor's own reduction: a hand engine reducing each gradient apart).
    """
    return first_difference_in(pair_trace(standalone, distributed, search.layout), search, bounds)


def first_difference_in(pairs: PairTrace, search: Search = Search(),
                        bounds: Optional[Bounds] = None) -> Optional[Dict[str, Any]]:
    """:func:`first_difference` from the pair statistics (``sweep.analysis.pairs``): the
    layout is in the rows (``"of"``, ``"chunks"``; ``search.layout`` is not read); ``bounds``
    by ``(step, kind, name)``, the step an index into ``pairs``."""
    noise_floor = search.noise_floor
    for step, entry in enumerate(pairs):
        ours_grads, theirs_grads = entry["ours"].get("grad"), entry["theirs"].get("grad") or []
        # a step whose gradients either copy recorded (an empty list: the copy had none at all, an
        # engine that never handed the optimizer its reduced gradients)
        grads_traced = "grad" in entry["ours"] and "grad" in entry["theirs"] and bool(ours_grads or theirs_grads)
        for kind in KINDS:
            rows = entry["pairs"].get(kind) or {}
            shared = _by_cause(rows, entry["order"].get(kind))
            kind_scale = max((rows[n]["scale_a"] for n in shared), default=0.0)
            for name in shared:
                row = rows[name]
                diff = row["abs"]
                if not diff > noise_floor:
                    continue
                same = row["shape_a"] == row["shape_b"]
                rel, near_zero = _relative(row, kind_scale)
                bound = (bounds or {}).get((step, kind, name))
                if bounds is not None and bound is not None and not rel > bound:
                    continue
                before = kind not in ("initial", "initial_buffer") and (step > 0 or kind == "weight")
                found = {"step": step, "kind": kind, "name": name, "abs_diff": diff, "rel_diff": rel,
                         "weights_identical_before": before, "searched_beyond": bounds is not None,
                         **({"bound": bound} if bound is not None else {}),
                         "grads_recorded": bool(ours_grads) and name in ours_grads}
                if grads_traced and (name in (ours_grads or [])) != (name in theirs_grads):
                    found["grad_only_in"] = "standalone" if name in (ours_grads or []) else "distributed"
                if near_zero:
                    found["near_zero"] = True
                if same and diff == float("inf"):  # NaN or inf in one copy only (pairs.mend_nonfinite)
                    found["nonfinite"] = True
                shards = _shards_apart(row, bound * diff / rel if bound is not None and 0 < rel < float("inf")
                                       else None, search) if same else None
                if shards:
                    found["shards"] = shards
                ratio = row.get("scale") if same and kind == "grad" else None
                if ratio is not None:
                    found["scale"] = ratio
                    # a reduction scales every gradient alike: a factor on this tensor alone is no reduction's
                    alike = all(same_scale(rows[n], ratio) for n in shared)
                    sharing = [n for n in shared if n != name and same_scale(rows[n], ratio)]
                    # several scaled alike, others not: two reduction paths (sharded, unsharded), still a
                    # reduction's factor; alone, a known one (x2 = world_size) is its own reduction's
                    causes = scale_causes(ratio, search.known or {})
                    if causes:
                        found["scale_causes"] = causes
                    if not alike and sharing:
                        found["scale_shared"] = sorted(sharing)
                    elif not alike:
                        found["scale_alone"] = True
                return found
    return None


def _shards_apart(row: Dict[str, Any], bound_abs: Optional[float], search: Search) -> Optional[Dict[str, Any]]:
    """The dim-0 shards of a pair row (``"of"`` k, ``"chunks"``: each shard's largest ``|a - b|``)
    that alone differ: ``{"of", "differ", "ranks"}`` (and ``"beyond": True`` where measured
    against the envelope), or ``None`` where all do, none does, or the rest cannot be told
    apart from them. Without an envelope (``bound_abs`` ``None``: the tensor's bound in its
    own units) a shard differs beyond ``search.noise_floor``. With one, a shard is beyond
    ``bound_abs`` (sharded data rounds every shard), and the others must stay within the
    rounding itself, ``bound_abs / search.margin`` (the twin's own difference): a fault that
    reaches every shard, just under the bound in some, is no one shard's."""
    k, chunks = int(row.get("of", 1)), list(row.get("chunks") or [])
    if k <= 1 or not chunks:
        return None
    floor = max(search.noise_floor, bound_abs) if bound_abs is not None else search.noise_floor
    parts = [i for i, m in enumerate(chunks) if m > floor]
    if not parts or len(parts) == k:
        return None
    if floor > search.noise_floor:
        rounding = max(search.noise_floor, floor / max(search.margin, 1.0))
        if any(not m <= rounding for i, m in enumerate(chunks) if i not in parts):
            return None
    return {"of": k, "differ": parts, "ranks": [search.rank // k * k + i for i in parts],
            **({"beyond": True} if floor > search.noise_floor else {})}


def _relative(row: Dict[str, Any], kind_scale: float) -> Tuple[float, bool]:
    """``(rel, near_zero)`` of a pair row as :func:`first_difference` measures it: ``abs``
    over the standalone tensor's ``max|.|``, or over ``kind_scale`` (the largest ``max|.|``
    of the standalone tensors of that kind in that step) where the tensor is zero up to
    rounding in both copies (:data:`NEAR_ZERO`); ``inf`` for a zero scale, and for an ``abs`` of
    ``inf`` (a shape mismatch, or an element non-finite in one copy only: no scale makes it small)."""
    if row["abs"] == float("inf"):  # a shape mismatch, or a NaN or an infinity in one copy only
        return float("inf"), False
    same = row["shape_a"] == row["shape_b"]
    both = max(row["scale_a"], row["scale_b"]) if same else row["scale_a"]
    near_zero = both < NEAR_ZERO * kind_scale  # in both copies: a fault that makes it large is no noise
    scale = kind_scale if near_zero else row["scale_a"]
    return (row["abs"] / scale if scale > 0 else float("inf")), near_zero


def final_buffers(standalone: Dict[str, Any], distributed: Dict[str, Any], last_step: int,
                  noise_floor: float = 0.0, twin: Optional[Dict[str, Any]] = None,
                  envelope: EnvelopeSetting = EnvelopeSetting()) -> Optional[Dict[str, Any]]:
    """The first buffer (by name: ``{name: array}`` of each copy, after the last step) that
    differs, as :func:`first_difference`'s dict of kind ``buffer`` at ``last_step`` (a running
    statistic the forward updates: BatchNorm's ``running_mean`` / ``moving_mean``), or ``None``.
    With ``twin`` (the standalone copy's twin's buffers after the last step: the rounding
    envelope), only one that differs by more than ``envelope.margin`` times the twin's
    difference (:func:`envelope_bounds`, at least one unit in the last place of
    ``envelope.dtype``); without it, any difference beyond ``noise_floor`` (absolute, the
    buffers' units). Adds ``"after_last_step": True`` and, with ``twin``, ``"envelope_ratio"``
    (its relative difference in multiples of the envelope)."""
    margin = envelope.margin
    bounds = envelope_bounds([{"buffer": standalone}], [{"buffer": twin}], margin, envelope.dtype) if twin else None
    found = first_difference([{"buffer": standalone}], [{"buffer": distributed}], Search(noise_floor), bounds)
    if found is None:
        return None
    found = dict(found, step=last_step, after_last_step=True)
    if found.get("bound"):
        found["envelope_ratio"] = found["rel_diff"] / found["bound"] * margin
    return found


Bounds = Dict[Tuple[int, str, str], float]
UNBOUNDED = ("initial", "initial_buffer")  # kinds without an envelope: the copies must start equal


def envelope_bounds(standalone: Trace, twin: Trace, margin: float, dtype: str) -> Bounds:
    """The rounding envelope of every traced tensor (``sweep.analysis.envelope``): for each
    ``(step, kind, name)`` both traces hold, ``margin`` times the largest relative difference
    between the standalone copy and its twin (nudged by one unit in the last place of
    ``dtype``) of any tensor of that kind over the traced steps, measured as
    :func:`first_difference` measures (``max |a - b|`` over ``max |a|``, or over its kind's
    largest where the tensor is zero up to rounding), never below one unit in the last place
    of ``dtype`` (relative: the smallest difference the values can show; a twin that shows
    none bounds rounding below one unit, so the margin does not multiply it). Pooled over the kind and the steps because rounding acts by rare
    events too (a ReLU whose input rounds across zero, a bf16 sum that cancels): one draw
    shows them in some tensor at some step, not in every tensor at every step; the losses,
    over many more steps, keep a per-step envelope. The initial weights and buffers get no
    bound (the copies must start equal; the twin is nudged by design). Cut ``twin`` to the
    compared copy's shards first (:func:`to_shards`) where that copy holds shards, so both
    differences are over the same elements. From the pair statistics
    (:func:`envelope_bounds_in`), as the staged trace computes it."""
    return envelope_bounds_in(pair_trace(standalone, twin), margin, dtype)


def envelope_bounds_in(pairs: PairTrace, margin: float, dtype: str) -> Bounds:
    """:func:`envelope_bounds` from the pair statistics of the standalone copy (``ours``)
    and its twin (``theirs``): per kind the largest :func:`kind_envelope` over the steps."""
    pooled: Dict[str, float] = {}
    keys: List[Tuple[int, str, str]] = []
    for step, entry in enumerate(pairs):
        for kind in KINDS:
            rows = entry["pairs"].get(kind) or {}
            if kind in UNBOUNDED or not rows:
                continue
            largest, names = kind_envelope(rows)
            pooled[kind] = max(pooled.get(kind, 0.0), largest)
            keys.extend((step, kind, name) for name in names)
    return {key: envelope_bound(pooled[key[1]], margin, dtype) for key in keys}


def envelope_bound(largest: float, margin: float, dtype: str) -> float:
    """A tensor's relative bound from its kind's largest relative difference between the
    standalone copy and its twin (``largest``, pooled as :func:`envelope_bounds` pools it):
    ``margin`` x it, at least :func:`envelope_floor` (the smallest difference the values can
    show: a twin that shows none bounds rounding below one unit, so the margin does not
    multiply it)."""
    return max(margin * largest, envelope_floor(dtype))


def kind_envelope(rows: Dict[str, Dict[str, Any]]) -> Tuple[float, List[str]]:
    """One step's rows of one kind, standalone copy against its twin: ``(the largest
    relative difference, the names it bounds)`` (:func:`envelope_bounds`; a tensor of
    another shape or empty bounds nothing, a NaN counts as none)."""
    rels = _kind_rels(rows)
    return max(rels.values(), default=0.0), list(rels)


def _kind_rels(rows: Dict[str, Dict[str, Any]]) -> Dict[str, float]:
    """:func:`kind_envelope`'s relative difference of each tensor it bounds, by name."""
    kind_scale = max((row["scale_a"] for row in rows.values()), default=0.0)
    rels = {}
    for name, row in rows.items():
        if row["shape_a"] != row["shape_b"] or not int(np.prod(row["shape_a"], dtype=np.int64)):
            continue
        rel, _ = _relative(row, kind_scale)
        rels[name] = 0.0 if row["abs"] == 0 else rel
    return rels


def envelope_setters_in(pairs: PairTrace) -> Dict[str, Dict[str, Any]]:
    """Per kind, the tensor whose difference between the standalone copy and its twin sets the
    pooled envelope (:func:`envelope_bounds_in`: the largest over the kind and the steps):
    ``{kind: {"name", "step", "rel"}}``, so that a tensor called within its envelope can say
    whose rounding bounds it (one chaotic tensor, an attention bias no gradient moves under
    Adam, can set every weight's)."""
    found: Dict[str, Dict[str, Any]] = {}
    for step, entry in enumerate(pairs):
        for kind in KINDS:
            rows = entry["pairs"].get(kind) or {}
            if kind in UNBOUNDED or not rows:
                continue
            for name, rel in _kind_rels(rows).items():
                if rel > found.get(kind, {}).get("rel", 0.0):
                    found[kind] = {"name": name, "step": step, "rel": rel}
    return found


def envelope_floor(dtype: str) -> float:
    """The smallest envelope: one unit in the last place of ``dtype``, relative
    (``2^(1 - significand bits)``, ``sweep.analysis.envelope.SIGNIFICAND_BITS``; float32's
    when unknown)."""
    from sweep.analysis.envelope import SIGNIFICAND_BITS

    return 2.0 ** (1 - SIGNIFICAND_BITS.get(dtype, 24))


def _by_cause(names: Any, order: Optional[Sequence[str]]) -> List[str]:
    """``names`` in the order the step produced them where the trace gives one (``order``:
    a step's ``"order"[kind]``, e.g. the gradients in the order autograd produced them:
    the last layer's first), then the rest by name."""
    rank = {name: i for i, name in enumerate(order or ())}
    return sorted(names, key=lambda n: (rank.get(n, len(rank)), n))


def to_shards(standalone: Trace, distributed: Trace, rank: int) -> Trace:
    """``standalone`` with each tensor cut to the slice ``distributed`` holds where this
    rank records a shard rather than the full tensor (:func:`to_shard`, tensor by tensor)."""
    out = []
    for ours, theirs in zip(standalone, distributed):
        step = {}
        for kind, tensors in ours.items():
            step[kind] = {}
            for name, full in tensors.items():
                if not isinstance(full, np.ndarray):  # an entry that is no tensor (the module trace's "order")
                    step[kind][name] = full
                    continue
                shard = theirs.get(kind, {}).get(name)
                step[kind][name] = to_shard(full, None if shard is None else np.shape(shard), rank)
        out.append(step)
    return out


def to_shard(full: np.ndarray, shard: Optional[Sequence[int]], rank: int) -> np.ndarray:
    """The slice of the standalone tensor ``full`` that this rank's shard (of shape
    ``shard``) holds, where a sharding engine that does not gather (e.g. hyper-parallel on
    MindSpore) records a shard rather than the full tensor: dim-0 sharding over ``k = full /
    shard`` ranks, rank ``r`` holding slice ``r % k`` (shard groups of consecutive ranks). A
    tensor whose shapes do not fit that (or no ``shard``) is left whole (and then differs by
    shape)."""
    rows = shard_rows(np.shape(full), shard, rank)
    return full if rows is None else full[rows[0]:rows[1]]


def shard_rows(full: Sequence[int], shard: Optional[Sequence[int]], rank: int) -> Optional[Tuple[int, int]]:
    """The rows ``[r0, r1)`` of a tensor of shape ``full`` that this rank's shard of shape
    ``shard`` holds (:func:`to_shard`), or ``None`` where the shapes fit no such slice."""
    full, shard = tuple(full), None if shard is None else tuple(shard)
    fits = (shard is not None and len(full) and shard != full and len(shard) == len(full) and shard[0]
            and full[0] % shard[0] == 0 and full[1:] == shard[1:])
    if not fits:
        return None
    n = shard[0]
    index = rank % (full[0] // n)
    return index * n, (index + 1) * n


def locate(standalone: Trace, distributed: Trace, last_step: int, search: Search = Search(),
           twin: Optional[Trace] = None, envelope: EnvelopeSetting = EnvelopeSetting()) -> Dict[str, Any]:
    """:func:`first_difference` (searched as ``search`` says, :class:`Search`), and, with the
    twin's trace (``twin``: the standalone copy's twin, ``sweep.train.twin``, its weights
    nudged by one unit in the last place of ``envelope.dtype``; cut to the compared shards,
    :func:`to_shards`), whether it stays within its rounding envelope (``envelope.margin`` x
    the twin's difference, :func:`envelope_bounds`): if it does, also
    the first tensor beyond its envelope (``beyond_rounding``: a dict like the first, or
    ``None``); where it does not, ``envelope_ratio`` (its relative difference in multiples of
    the envelope). Without ``twin`` nothing is called rounding (the
    envelope was not measured: ``"envelope": "not measured"``). No ``"step"`` if none
    differs. Always ``last_step``. ``updates`` holds the onset from the
    update differences (:func:`update_onset`, with ``rel`` and ``along`` per step, and the
    twin's ``envelope`` per step) when the traces have initial weights. ``search.layout`` and
    ``search.rank``: as for :func:`first_difference` (which shards, so which ranks, differ);
    ``last_step``: the last traced step (0-based). Tensors only one copy holds
    (:func:`missing_names`) are listed under ``missing``. Data only: the sentence is
    ``sweep.findings.places.tensor_text``'s. From the pair statistics (:func:`locate_in`), as
    the staged trace reads them."""
    return locate_in(pair_trace(standalone, distributed, search.layout), last_step, search,
                     twin=pair_trace(standalone, twin) if twin else None, envelope=envelope)


def locate_in(pairs: PairTrace, last_step: int, search: Search = Search(), twin: Optional[PairTrace] = None,
              envelope: EnvelopeSetting = EnvelopeSetting()) -> Dict[str, Any]:
    """:func:`locate` from the pair statistics (``sweep.analysis.pairs``; the layout is in
    the rows, ``search.layout`` is not read): ``pairs`` the distributed copy's against the
    standalone one, ``twin`` the twin's against the standalone one (``None`` or empty: the
    envelope not measured)."""
    margin, dtype = envelope.margin, envelope.dtype
    series = update_series_in(pairs)
    grown = update_series_in(twin)["rel"] if twin else None
    updates = dict(update_onset(series, grown, margin, dtype), **series) if series["rel"] else None
    bounds = envelope_bounds_in(twin, margin, dtype) if twin else None
    found = dict(_locate(pairs, search, bounds, margin), last_step=last_step)
    if twin and found.get("bound") is not None and "envelope_ratio" not in found:  # within its envelope: whose?
        setter = envelope_setters_in(twin).get(found["kind"])
        if setter and setter["name"] != found["name"]:
            found["bound_set_by"] = setter
    if updates is not None:
        found["updates"] = updates
    missing = missing_names_in(pairs)
    if missing:  # never silently: "initial weights equal" holds only for what both copies hold
        found["missing"] = missing
    return found


def _locate(pairs: PairTrace, search: Search, bounds: Optional[Bounds], margin: float) -> Dict[str, Any]:
    """:func:`locate_in`'s first difference and its envelope: the first as ``search`` finds
    it, then, where ``bounds`` (:func:`envelope_bounds_in`; ``None``: not measured) holds it
    within ``margin`` x the twin's difference, the first beyond its bound; ``{}`` for none."""
    found = first_difference_in(pairs, search)
    if found is None:
        return {}
    if bounds is None:
        found["envelope"] = "not measured"
        return found
    bound = bounds.get((found["step"], found["kind"], found["name"]))
    if bound is None or found["rel_diff"] > bound:  # beyond its envelope (or no envelope: initial weights)
        if bound is not None:
            found["bound"] = bound
            found["envelope_ratio"] = found["rel_diff"] / bound * margin
        return found
    found["bound"] = bound
    beyond = first_difference_in(pairs, replace(search, margin=margin), bounds)
    found["beyond_rounding"] = beyond
    return found


UPDATE_EVENT = 2.0  # an event: an update difference over this many times the step before's
NOISE_BALANCE = 0.5  # noise: |mean sign of the error along the update| (or |sum| / sum of |.|) below this
ABRUPT_SHARE = 0.1  # abrupt: the first real update difference is this share of the largest
PERIOD_GAP = 0.1  # periodic: the steps of one phase stand apart from the rest by this share of the largest
OVER_SHARE = 0.25  # over: the aftermath of a fault that stopped stays below this share of its largest step
QUIET_STEPS = 3  # over: after the last large update difference, this many traced steps (and 2x its span) stay small
UPDATE_ONSET_RULE = (
    "onset from the update differences (traced jobs): with u_t = w_t - w_(t-1) the standalone copy's update "
    "of step t and e_t the distributed copy's update minus it (over every parameter), rel_t = |e_t| / |u_t| "
    "and along_t = (e_t . u_t) / |u_t|^2 (the error's signed share along the update: +1 for a doubled update); "
    "a step is real if rel_t is beyond its rounding envelope (more than compare.envelope_margin x the largest "
    "rel of the standalone copy's twin up to that step: sweep.analysis.envelope; without a twin every differing "
    f"step is) and an event if it is real, rel_t > {UPDATE_EVENT:g} x rel_(t-1) and rel_t >= {ABRUPT_SHARE:g} x "
    "the largest rel. periodic (period n >= 2, the smallest) if, from the first real step, the steps of one phase "
    "of n (3 or more) stand apart in rel, in along, or in either's change from the step before (a sawtooth on a "
    f"trend), from all other steps, by at least {PERIOD_GAP:g} x the series' largest size; abrupt and over "
    f"(until: its last step) if the large steps (rel >= {OVER_SHARE:g} x the largest) start at the first real "
    f"step and the steps after the last of them, {QUIET_STEPS} or more and at least twice as many as the large "
    "steps span, are small and do not keep the first real step's sign along the update by count (the mean of "
    f"sign(along_t) over them, signed by the first real step's, under {NOISE_BALANCE:g}: a fault on one step "
    "or a few, then none: what differs later is its aftermath, which undoes it or takes both signs; one that "
    "keeps its sign is still there, lasting or fading); "
    f"noise if along takes both signs alike, by count or by size: |mean of sign(along_t)| < {NOISE_BALANCE:g} "
    f"or |sum of along_t| / sum of |along_t| < {NOISE_BALANCE:g}, over 3 or more real steps, as for random "
    "noise (fresh random noise on n steps keeps both near 1/sqrt(n); by size as well, because the steps after a "
    "noisy one carry its effect with one sign while the noisy steps dominate the size; a fault that scales, "
    f"skips, delays or repeats an update errs one way by both); abrupt if the first real step's rel is >= "
    f"{ABRUPT_SHARE:g} x the largest; growth otherwise; none when no step is real (within the envelope: float "
    "rounding). The losses see update t from step t + 1"
)


def update_series(standalone: Trace, distributed: Trace) -> Dict[str, List[float]]:
    """Per traced step ``t`` (the entries with weights, in order), over every parameter
    both copies record with one shape: ``rel[t] = |e_t| / |u_t|`` and ``along[t] = (e_t .
    u_t) / |u_t|^2``, with ``u_t = w_t - w_(t-1)`` the standalone copy's update (``w_(-1)``:
    step 0's ``"initial"`` weights, each copy its own) and ``e_t`` the distributed copy's
    update minus it; Euclidean norms over the concatenated parameters, float64, summed
    parameter by parameter in name order (the weights' ``"uu"``, ``"ee"``, ``"eu"``,
    ``sweep.analysis.pairs.pair_stats``). ``rel`` is ``inf`` (``along`` 0) where the
    standalone update is zero and the other is not. Returns ``{"rel": [...], "along":
    [...]}``, empty lists without initial weights."""
    return update_series_in(pair_trace(standalone, distributed))


def update_series_in(pairs: PairTrace) -> Dict[str, List[float]]:
    """:func:`update_series` from the weights' update statistics (``"uu"``, ``"ee"``,
    ``"eu"`` of ``sweep.analysis.pairs.pair_stats``)."""
    series: Dict[str, List[float]] = {"rel": [], "along": []}
    if not pairs or "initial" not in pairs[0]["ours"] or "initial" not in pairs[0]["theirs"]:
        return series
    initial = pairs[0]["pairs"].get("initial") or {}
    names = sorted(n for n, row in initial.items() if row["shape_a"] == row["shape_b"])
    for entry in pairs:
        if "weight" not in entry["ours"] or "weight" not in entry["theirs"]:
            break
        rows = entry["pairs"]["weight"]
        uu = ee = eu = 0.0
        for name in names:
            uu, ee, eu = uu + rows[name]["uu"], ee + rows[name]["ee"], eu + rows[name]["eu"]
        un, en = float(np.sqrt(uu)), float(np.sqrt(ee))
        if un > 0:
            series["rel"].append(en / un)
            series["along"].append(eu / un ** 2)
        else:
            series["rel"].append(float("inf") if en > 0 else 0.0)
            series["along"].append(0.0)
    return series


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


def update_envelope(twin_rel: Optional[Sequence[float]], steps: int, margin: float = 4.0,
                    dtype: str = "float32") -> Optional[np.ndarray]:
    """Per update step, the size an update difference may reach by float rounding: ``margin``
    x the largest ``rel`` of the standalone copy's twin over the traced steps (``twin_rel``:
    :func:`update_series` of the standalone trace against the twin's; the largest over the
    window, as :func:`envelope_bounds` pools: rounding's rare events fall on some step of a
    draw, not on each), never below one unit in the last place of ``dtype`` (relative).
    ``None`` without a twin (not measured); ``steps`` long."""
    from sweep.analysis.envelope import SIGNIFICAND_BITS

    if twin_rel is None:
        return None
    grown = np.asarray([float(r) for r in twin_rel], np.float64)
    grown = np.where(np.isfinite(grown), grown, np.inf)
    largest = float(np.max(grown)) if grown.size else 0.0
    return np.full(steps, margin * max(largest, 2.0 ** (1 - SIGNIFICAND_BITS.get(dtype, 24))))


def update_onset(series: Dict[str, Sequence[float]], twin_rel: Optional[Sequence[float]] = None,
                 margin: float = 4.0, dtype: str = "float32") -> Dict[str, Any]:
    """How the update difference starts (:data:`UPDATE_ONSET_RULE`), from
    :func:`update_series`, with the twin's (``twin_rel``: the rounding envelope,
    :func:`update_envelope`; ``None``: not measured, every differing step is real). Returns
    ``{"pattern": "none" | "periodic" | "noise" | "abrupt" | "growth", "first_step": first
    differing update (or None), "real_step": first update beyond its envelope (or None),
    "period": n or None, "events": [update steps], "envelope": the bound of each step or
    None}``, and ``"until"`` (the last large update step of a fault that stopped) where it
    applies. Steps are update steps: the losses see update ``t`` from step ``t + 1``."""
    rel = np.asarray(series.get("rel", []), np.float64)
    along = np.asarray(series.get("along", []), np.float64)
    bound = update_envelope(twin_rel, rel.size, margin, dtype)
    differ = np.flatnonzero(rel > 0)
    out: Dict[str, Any] = {"first_step": int(differ[0]) if differ.size else None, "real_step": None, "period": None,
                           "events": [], "envelope": [float(b) for b in bound] if bound is not None else None}
    if not differ.size:
        return dict(out, pattern="none")
    with np.errstate(invalid="ignore"):
        real = np.flatnonzero(rel > bound) if bound is not None else differ
    if not real.size:  # within the envelope at every step: float rounding, no onset to name
        return dict(out, pattern="none")
    before = np.concatenate([[0.0], rel[:-1]])
    finite = rel[np.isfinite(rel)]
    largest = float(np.max(finite)) if finite.size else float("inf")
    out.update(real_step=int(real[0]),
               events=[int(t) for t in real if rel[t] > UPDATE_EVENT * before[t] and rel[t] >= ABRUPT_SHARE * largest])
    period = _period(rel, along, int(real[0]))
    if period is not None:
        return dict(out, pattern="periodic", period=period[0], events=period[1])
    large = np.flatnonzero(~np.isfinite(rel) | (rel >= OVER_SHARE * largest))
    span, quiet = int(large[-1]) - int(real[0]) + 1, rel.size - 1 - int(large[-1])
    after = along[int(large[-1]) + 1:]
    after = after[np.isfinite(after) & (after != 0)]
    # a fault that lasts or fades keeps its sign along the update after its large steps, by count as noise is
    # told (an odd step of the other sign allowed: a lasting scale under Adam); the aftermath of one that
    # stopped (weights that differ, then gradients that differ) undoes it or takes both signs (by count: one
    # large step of the aftermath does not outvote the rest)
    fading = after.size >= QUIET_STEPS and \
        float(np.mean(np.sign(after))) * float(np.sign(along[int(real[0])])) >= NOISE_BALANCE
    if large[0] == real[0] and quiet >= max(QUIET_STEPS, 2 * span) and not fading:  # over: it stopped
        return dict(out, pattern="abrupt", events=[int(t) for t in large], until=int(large[-1]))
    signs, sized = np.sign(along[real]), along[real][np.isfinite(rel[real])]
    # weighed by size: a large one-signed error is not outvoted by many tiny mixed-sign steps after it
    by_size = abs(float(np.sum(sized))) / float(np.sum(np.abs(sized))) if np.any(sized) else 1.0
    if signs.size >= 3 and by_size < NOISE_BALANCE:
        return dict(out, pattern="noise")
    abrupt = not np.isfinite(rel[real[0]]) or rel[real[0]] >= ABRUPT_SHARE * largest
    return dict(out, pattern="abrupt" if abrupt else "growth")


def tensor_rows(standalone: Trace, distributed: Trace, bounds: Optional[Bounds] = None) -> List[Dict[str, Any]]:
    """Every tensor both traces hold, compared: ``[{"step", "kind", "name", "order", "abs",
    "rel", "shape", "bound"}]`` in trace order (:func:`first_difference`'s: kinds in :data:`KINDS`
    order, within a kind by cause), ``rel`` against the standalone tensor's ``max|.|``
    (``inf`` for a zero one that differs; a shape mismatch gives ``inf`` for both), ``bound``
    the relative size its rounding envelope allows (``bounds``: :func:`envelope_bounds`;
    ``None`` without). The table behind ``sweep.load_trace``."""
    return tensor_rows_in(pair_trace(standalone, distributed), bounds)


def tensor_rows_in(pairs: PairTrace, bounds: Optional[Bounds] = None) -> List[Dict[str, Any]]:
    """:func:`tensor_rows` from the pair statistics."""
    out: List[Dict[str, Any]] = []
    for step, entry in enumerate(pairs):
        for kind in KINDS:
            rows = entry["pairs"].get(kind) or {}
            for i, name in enumerate(_by_cause(rows, entry["order"].get(kind))):
                row = rows[name]
                if row["shape_a"] != row["shape_b"]:
                    diff = rel = float("inf")
                else:
                    diff, scale = row["abs"], row["scale_a"]
                    rel = diff / scale if scale > 0 else (float("inf") if diff > 0 else 0.0)
                out.append({"step": step, "kind": kind, "name": name, "order": i, "abs": diff, "rel": rel,
                            "shape": list(row["shape_b"]), "bound": (bounds or {}).get((step, kind, name))})
    return out
