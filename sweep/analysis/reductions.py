"""The gradient reduction as it ran, held against what the mesh implies (issue 51).

Two kinds of evidence, both recorded by the distributed copy's observer
(``sweep.train.observers.reductions``):

* **what each gradient became** (:func:`classify`): every rank's local gradient before the
  reduction (gathered over the ranks) against the reduced gradient the rank holds after it.
  The candidate it matches is the op that ran, whatever op the call was given: the mean
  over the data-parallel ranks (what FSDP, DDP and hyper-parallel owe), their sum, max or
  min, the rank's own gradient (no reduction), the mean over one mesh dim's group only (a
  group the reduction never crossed), the mean of gradients each rank clipped first by its
  own norm (clipping before the reduction), or a pure multiple of the mean. A reduction
  inside a compiled graph is judged here too: its calls are out of sight, its result is not.
* **which calls carried it** (:func:`coverage_notes`): the ledger's gradient reductions
  (``sweep.engines.collectives``) with the parameters each carried: every gradient must be
  reduced exactly once over each mesh dim's group it is sharded or replicated over (or once
  over every rank), which the values alone cannot show with replicated data (a skipped
  reduction of equal gradients changes nothing there, yet).

And per step, both copies' gradient norms before and after the reduction and as the
optimizer read them (:func:`norm_notes`): a fault that moves the gradient norm (clipping,
scaling, logging that touches the gradients) is named at its step, before the losses show
it. Every note is data (``sweep.records.Note``: N140-N144, their sentences in
``sweep.findings.notes_catalog.reductions``). Pure numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from sweep.analysis.collectives import group_name, scale_causes
from sweep.records import Note, note

# relative residual within which a reduced gradient is a candidate: float32 reductions round at
# ~1e-7 (a sum over ranks in another order); bfloat16/float16 reductions at ~1e-2
MATCH_REL = {"float32": 1e-4, "float64": 1e-4, "bfloat16": 3e-2, "float16": 5e-3}
NEAR_ZERO = 1e-3  # a gradient below this share of the step's largest is judged against the largest
CLIP_EPS = 1e-6  # clip_grad_norm's coefficient: max_norm / (norm + 1e-6)


def match_rel(dtype: Optional[str]) -> float:
    """The relative residual (:data:`MATCH_REL`) within which a gradient reduced in ``dtype``
    matches a candidate; float32's for an unknown dtype."""
    return MATCH_REL.get(str(dtype or "float32").rsplit(".", 1)[-1].lower(), MATCH_REL["float32"])


def shard_rows(full_shape: Sequence[int], local_shape: Sequence[int], index: int,
               shards: Optional[int] = None) -> Optional[slice]:
    """The dim-0 rows of a tensor of ``full_shape`` that a rank holding ``local_shape`` at shard
    ``index`` of ``shards`` holds: ``torch.chunk``'s split (FSDP2, hyper-parallel: chunks of
    ``ceil(rows / k)`` rows, the last shorter or empty), every row where ``local_shape`` is
    ``full_shape``; ``None`` where the shapes fit no dim-0 split. Without ``shards``, the
    smallest ``k`` that fits: ambiguous where the rank's rows are a full chunk of one split and
    the short last chunk of another (16 rows, 4 a rank: shard 2 of 4 holds rows 8-12, of 3 rows
    12-16), so a caller that knows the number of shards gives it."""
    local, full = tuple(int(n) for n in local_shape), tuple(int(n) for n in full_shape)
    rows = full[0] if full else 0
    if local == full:
        return slice(0, rows)
    if not full or local[1:] != full[1:]:
        return None
    for k in ([int(shards)] if shards else range(2, rows + 2)):
        size = -(-rows // k) if k > 0 else rows
        start = min(index * size, rows)
        if min(size, rows - start) == local[0] and index < k:
            return slice(start, start + local[0])
    return None


def shard_of(full: np.ndarray, local_shape: Sequence[int], index: int,
             shards: Optional[int] = None) -> Optional[np.ndarray]:
    """The dim-0 slice of ``full`` a rank holding ``local_shape`` at shard ``index`` (of
    ``shards``) holds (:func:`shard_rows`), or the whole tensor where ``local_shape`` is
    ``full``'s; ``None`` where the shapes fit no dim-0 split."""
    if tuple(int(n) for n in local_shape) == full.shape:
        return full
    rows = shard_rows(full.shape, local_shape, index, shards)
    return None if rows is None else full[rows]


CHECK_ELEMENTS = 1 << 16  # of each gradient, about as many as the step's reduction check reads (its columns)


def check_columns(shape: Sequence[int], cap: int = CHECK_ELEMENTS) -> Optional[int]:
    """How many columns (the elements past dim 0, flattened) of a gradient of ``shape`` the reduction
    check reads on every row: ``cap // rows`` (at least 1) where the tensor has two dims or more
    and more than ``cap`` elements, else ``None`` (all of it); which ones:
    :func:`spread_columns`. Every row is kept: the ranks' dim-0 shards (FSDP2, hyper-parallel)
    stay as they are, and a fault in some rows (an embedding's tokens) stays in view. What the
    check decides is an op over whole tensors (a mean, a sum, a reduction in bfloat16, clipping
    by a rank's norm), which every column shows alike; a fault confined to columns left out (one
    column, a block narrower than the spread's stride) is not seen by this check (the tracing
    rerun compares every element)."""
    shape = tuple(int(n) for n in shape)
    if len(shape) < 2 or not shape[0]:
        return None
    columns = int(np.prod(shape[1:], dtype=np.int64))
    keep = max(1, cap // shape[0])
    return keep if keep < columns else None


def sampled(local: Dict[str, Any], reduced: Dict[str, Any],
            cap: int = CHECK_ELEMENTS) -> Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray]]:
    """``(local, reduced)`` cut to the columns :func:`check_columns` keeps (:func:`spread_columns`) of
    each parameter's full shape (``local``'s: a rank's gradients before the reduction;
    ``reduced``: after it, the full tensor or the rank's dim-0 shard, the same columns). A
    parameter whose two sides differ past dim 0 is left whole. Arrays become 2-D ``(rows, kept
    columns)`` copies."""
    cut_local, cut_reduced = {}, dict(reduced)
    for name, values in local.items():
        shape = np.shape(values)
        keep = check_columns(shape, cap)
        after = reduced.get(name)
        if keep is None or (after is not None and tuple(np.shape(after)[1:]) != tuple(shape[1:])):
            cut_local[name] = values
            continue
        cut_local[name] = _columns(values, keep)
        if after is not None:
            cut_reduced[name] = _columns(after, keep)
    return cut_local, cut_reduced


def spread_columns(columns: int, keep: int) -> np.ndarray:
    """``keep`` column indices spread evenly over ``columns`` (the first and the last among
    them): a fault on a block of columns wider than ``columns / keep`` lands on some, wherever
    the block is (a first-``keep`` cut missed one on the upper half of a weight's columns)."""
    return np.unique(np.linspace(0, columns - 1, num=keep).round().astype(np.int64))


def _columns(values: Any, keep: int) -> np.ndarray:
    array = np.asarray(values)
    flat = array.reshape(array.shape[0], int(np.prod(array.shape[1:], dtype=np.int64)))
    return flat[:, spread_columns(flat.shape[1], keep)]


def clip_coefficients(local_norms: Sequence[float], max_norm: Optional[float]) -> Optional[np.ndarray]:
    """Each rank's clipping coefficient ``min(1, max_norm / (norm + 1e-6))``
    (``torch.nn.utils.clip_grads_with_norm_``'s) of its own local gradient's global norm;
    ``None`` without ``max_norm``."""
    if max_norm is None:
        return None
    norms = np.asarray(local_norms, np.float64)
    return np.minimum(1.0, float(max_norm) / (norms + CLIP_EPS))


def candidates(local: np.ndarray, rank: int, groups: Dict[str, List[int]],
               clip: Optional[np.ndarray] = None) -> Dict[str, np.ndarray]:
    """What a reduced gradient may be, from ``local`` (every rank's local gradient stacked
    along a new dim 0, ``(world, ...)``): ``mean`` (over every rank: what is owed), ``sum``,
    ``max``, ``min``, ``none`` (this rank's own), ``mean over <dim>``/``sum over <dim>`` for each
    mesh dim whose group (``groups``: ``sweep.analysis.collectives.dim_groups``) is neither one
    rank nor all of them, and with ``clip`` (each rank's clipping coefficient) ``clipped
    before the reduction``: the mean of the gradients each rank clipped by its own norm."""
    world = local.shape[0]
    out = {"mean": local.mean(axis=0), "sum": local.sum(axis=0), "max": local.max(axis=0),
           "min": local.min(axis=0), "none": local[rank]}
    for name, members in groups.items():
        if 1 < len(members) < world:
            part = local[list(members)]
            out[f"mean over {name}"] = part.mean(axis=0)
            out[f"sum over {name}"] = part.sum(axis=0)
    if clip is not None and np.any(clip < 1.0):
        out["clipped before the reduction"] = (local * clip.reshape((-1,) + (1,) * (local.ndim - 1))).mean(axis=0)
    return out


def classify(cands: Dict[str, np.ndarray], reduced: np.ndarray, scale: float, tol: float,
             index: int = 0, shards: Optional[int] = None) -> Dict[str, Any]:
    """What one parameter's reduced gradient is, as it ran: which of ``cands`` it matches
    (:func:`measure`, then :func:`decide` at ``scale``).

    Args:
        cands: :func:`candidates` of every rank's local gradient before the reduction: name
            -> the candidate, float64 of the parameter's full shape (or already cut to
            ``reduced``'s rows), in :func:`candidates`' order (``mean`` first).
        reduced: the gradient this rank holds after the reduction, float64: the full tensor,
            or its dim-0 shard (:func:`shard_of`, shard ``index`` of ``shards``).
        scale: the size a difference is measured against (the parameter's ``max|mean|``, or
            the step's largest where this one is zero up to rounding).
        tol: the relative residual within which a candidate matches (:func:`match_rel`).

    Returns:
        ``{"op": the first candidate that matches, in :func:`candidates`' order (``mean`` when
        the mean does), or ``"x<f> the mean"`` for a pure multiple (:func:`decide`), or
        ``"other"``; "factor": least-squares ``reduced / mean``; "residual": the matched
        candidate's (or the mean's) relative residual}``; ``{"op": "unknown"}`` where the
        shapes do not fit.
    """
    measured = measure(cands, reduced, tol, scale, index, shards)
    return decide(measured, scale, tol) if measured is not None else {"op": "unknown", "factor": None, "residual": None}


def measure(cands: Dict[str, np.ndarray], reduced: np.ndarray, tol: float, least_scale: float,
            index: int = 0, shards: Optional[int] = None) -> Optional[Dict[str, Any]]:
    """What :func:`decide` reads, none of it relative to a scale, so a parameter can be measured
    before the step's largest gradient is known (``sweep.train.observers.reductions``: one pass).

    ``cands``, ``reduced``, ``tol``, ``index`` and ``shards`` as :func:`classify`'s; ``least_scale``: the
    smallest scale the decision may be made at (the parameter's own ``max|mean|``: the scale is
    that or the step's largest). Returns ``{"residuals": {candidate: max|reduced - candidate|},
    "factor": least-squares reduced / mean, "multiples": [(base, f, max|reduced - f base|)]}``:
    the multiples of the mean, the means over one dim and this rank's own gradient, in that
    order, measured only where no candidate matches at ``least_scale`` (else ``None``: a match
    at the least scale is one at any); ``None`` where the shapes do not fit, or where a value
    is NaN or infinite (an overflowing step, which a gradient scaler skips: no op is read from
    it). Float64 sums."""
    cut = {}
    for name, value in cands.items():
        part = shard_of(value, reduced.shape, index, shards)
        if part is None:
            return None
        cut[name] = part
    if not np.all(np.isfinite(reduced)) or not np.all(np.isfinite(cut["mean"])):
        return None
    residuals = {name: float(np.max(np.abs(reduced - value))) if value.size else 0.0 for name, value in cut.items()}
    mean = cut["mean"]
    denom = float(np.dot(mean.ravel(), mean.ravel()))
    factor = float(np.dot(reduced.ravel(), mean.ravel())) / denom if denom > 0 else None
    multiples = None
    if min(residuals.values()) / max(float(least_scale), 1e-30) > tol:
        multiples = []
        for name in ["mean"] + [n for n in cut if n.startswith("mean over ")] + ["none"]:
            base = cut[name].ravel()
            norm = float(np.dot(base, base))
            if norm > 0:
                f = float(np.dot(reduced.ravel(), base)) / norm
                multiples.append((name, f, float(np.max(np.abs(reduced - f * cut[name])))))
    return {"residuals": residuals, "factor": factor, "multiples": multiples}


def decide(measured: Dict[str, Any], scale: float, tol: float) -> Dict[str, Any]:
    """:func:`classify`'s answer from :func:`measure`'s figures at ``scale``: the mean where its
    residual relative to ``scale`` is within ``tol``; else the first other candidate within it
    (``ambiguous``: the others that are too, equal gradients on every rank make several
    candidates one); else a pure multiple ``f`` != 1 of a base (a grad_scale, a divisor: least
    squares, within ``tol`` of ``scale`` x ``max(|f|, 1)``), as ``"x<f> the mean"``; else
    ``"other"``."""
    size = max(float(scale), 1e-30)
    residuals = {name: value / size for name, value in measured["residuals"].items()}
    factor = measured["factor"]
    if residuals["mean"] <= tol:
        return {"op": "mean", "factor": factor, "residual": residuals["mean"]}
    matched = [name for name in residuals if name != "mean" and residuals[name] <= tol]
    if matched:
        out = {"op": matched[0], "factor": factor, "residual": residuals[matched[0]]}
        if len(matched) > 1:
            out["ambiguous"] = matched[1:]
        return out
    for name, f, off in measured["multiples"] or ():
        if abs(f - 1.0) > tol and off <= tol * size * max(abs(f), 1.0):
            words = "the mean" if name == "mean" else "this rank's own gradient" if name == "none" else f"the {name}"
            return {"op": f"x{f:.4g} {words}", "factor": factor, "residual": residuals["mean"], "scale": f}
    return {"op": "other", "factor": factor, "residual": residuals["mean"]}


@dataclass(frozen=True)
class Carriers:
    """The gradient reductions the ledger saw carry parameters, and what names their groups
    (:func:`reduction_notes`).

    Attributes:
        groups: this rank's mesh-dim groups, ``{dim name: [ranks]}``
            (``sweep.analysis.collectives.dim_groups``).
        world: the world size, in ranks.
        calls: the ledger's entries (``sweep.engines.collectives``) that name the parameters
            they carried: ``{"step", "op", "group": [ranks] (or "group_name"), "reduce_op",
            "params": [names]}``.
        unseen: why no call is in sight where none was seen (the engine's
            ``collectives_unchecked``, e.g. a reduction inside a compiled graph: its calls are
            out of sight, what it made of the gradients is not), or ``None``.
    """

    groups: Dict[str, List[int]]
    world: int
    calls: Sequence[Dict[str, Any]] = ()
    unseen: Optional[str] = None

    def values(self, step: int, names: Sequence[str]) -> Dict[str, Any]:
        """The calls of ``step`` that carried some of ``names`` (``{"op", "group": its name,
        "reduce_op"}`` each) and, without one, why none was seen (``unseen``: its first clause)."""
        mine = [e for e in self.calls if int(e.get("step", -1)) == step and set(e.get("params") or ()) & set(names)]
        calls = [{"op": e["op"], "reduce_op": e.get("reduce_op"),
                  "group": group_name(e.get("group") or [], self.groups, self.world, with_ranks=False)
                  if e.get("group") else str(e.get("group_name") or "an unnamed group")} for e in mine]
        return {"calls": calls, "unseen": self.unseen.split(":")[0] if self.unseen and not calls else None}


def reduction_notes(found: Dict[int, Dict[str, Dict[str, Any]]], known: Dict[str, Optional[float]],
                    carriers: Optional[Carriers] = None, sizes: Optional[Dict[str, int]] = None) -> List[Note]:
    """One note (``N140``) per way the gradients of a step departed from the mean over the ranks
    (``found``: step -> parameter -> :func:`classify`'s dict), the first step that shows it,
    naming the parameters, the op that ran and, for a pure multiple of the mean (a sum, ``x<f>
    the mean``), its factor where not 1 and the known factor it equals (``known``:
    ``world_size``, ..., ``sweep.analysis.collectives.scale_causes``), the calls that
    carried them or why none was seen (``carriers``: :class:`Carriers`; ``None``: none seen,
    no reason) and, for parameters left unreduced, their element count against the step's
    (``sizes``: parameter -> elements)."""
    carriers = carriers or Carriers({}, 1)
    notes: List[Note] = []
    seen = set()
    for step in sorted(found):
        by_op: Dict[str, List[str]] = {}
        for name, f in sorted(found[step].items()):
            if f.get("op") not in (None, "mean", "unknown"):
                by_op.setdefault(f["op"], []).append(name)
        for op, names in by_op.items():
            if op in seen:
                continue
            seen.add(op)
            factors = [found[step][n].get("factor") for n in names if found[step][n].get("factor") is not None]
            factor = float(np.median(factors)) if factors else None
            pure = op == "sum" or op.endswith(" the mean")  # a multiple of the mean: its factor says how far
            left = op == "none" and bool(sizes)
            notes.append(note("N140", step=int(step), op=op, parameters=list(names),
                              unreduced=sum(int(sizes.get(n, 0)) for n in names) if left else None,
                              total=sum(int(v) for v in sizes.values()) if left else None,
                              scale=factor if pure and factor and abs(factor - 1.0) > 1e-3 else None,
                              causes=scale_causes(factor, known) if pure and factor else None,
                              **carriers.values(step, names)))
    return notes


def crossing_needed(expected: Dict[str, Any]) -> List[str]:
    """The mesh dims every gradient must be reduced over: those of more than one rank."""
    return [str(d) for d, n in zip(expected["mesh_dim_names"], expected["mesh_shape"]) if int(n) > 1]


def coverage(calls: Sequence[Dict[str, Any]], params: Sequence[str], groups: Dict[str, List[int]],
             world: int) -> Dict[str, Dict[str, Any]]:
    """Per parameter, the gradient reductions that carried it in one step (``calls``: the
    ledger's reduce-scatters and all-reduces of the ``grads`` span with ``params``):
    ``{name: {"groups": [group names in call order], "calls": n}}``; a parameter no call
    carried has ``groups`` ``[]``."""
    out = {name: {"groups": [], "calls": 0} for name in params}
    for e in calls:
        where = group_name(e.get("group") or [], groups, world, with_ranks=False) if e.get("group") else "unknown"
        for name in e.get("params") or ():
            entry = out.setdefault(name, {"groups": [], "calls": 0})
            entry["groups"].append(where)
            entry["calls"] += 1
    return out


def _reduces(e: Dict[str, Any]) -> bool:
    return str(e.get("op", "")).startswith(("reduce", "all_reduce"))


def _unnamed_update(e: Dict[str, Any]) -> bool:
    """A ledger entry of a reduction of more than one element in the ``update`` span that names
    no parameter (a flat buffer of gradients an engine reduced by hand)."""
    return e.get("span") == "update" and e.get("params") is None and int(e.get("numel") or 0) > 1 and _reduces(e)


def later_reductions(entries: Sequence[Dict[str, Any]]) -> Dict[int, Optional[set]]:
    """Per step, the gradients an engine reduced after the backward, by hand: in its clipping
    or its optimizer step (the ``clip`` and ``update`` spans), calls given a parameter's
    gradient itself (``"params_from": "grad"``, ``sweep.engines.collectives``) name their
    parameters; a reduction of more than one element in the ``update`` span that names none (a
    flat buffer of gradients) makes the step's ``None``: which gradients it carried is unknown.
    Steps without such calls are absent."""
    out: Dict[int, Optional[set]] = {}
    for e in entries:
        step = int(e.get("step", 0))
        if e.get("span") in ("clip", "update") and e.get("params_from") == "grad" and _reduces(e):
            if out.get(step, set()) is not None:
                out.setdefault(step, set()).update(e.get("params") or ())
        elif _unnamed_update(e):
            out[step] = None
    return out


def reduced_by_hand(calls: Optional[Sequence[Dict[str, Any]]]) -> bool:
    """Whether a ledger summary (``sweep.analysis.collectives.ledger_summary``'s rows: ``{"span",
    "op", "calls", "numel", "given_grads", ...}``) shows gradients an engine reduced by hand after
    the backward, as :func:`later_reductions` reads the entries themselves: calls in the clipping
    or the optimizer step given a parameter's gradient itself, or reductions of more than one
    element a call in the optimizer step (a flat buffer of gradients; the clipping's own are its
    norms)."""
    return any(r.get("span") in ("clip", "update") and r.get("given_grads") or r.get("span") == "update"
               and _reduces(r) and int(r.get("numel") or 0) > int(r.get("calls") or 1) for r in calls or ())


def _after_clipping(entries: Sequence[Dict[str, Any]], params: int) -> List[Dict[str, Any]]:
    """A step's gradient reductions by hand (:func:`later_reductions`'s calls) that come after the
    clipping has read the gradients: every one in the optimizer step (the ``update`` span, which
    follows the clipping), and those in the clipping step after its norm's own reduction (a call
    of the ``clip`` span not given a gradient); ``entries`` in the order they ran. A call that names
    no parameter counts as a flat buffer of gradients only where it carries more elements than
    there are ``params``: a vector of norms (``get_total_norm`` of DTensor gradients, one a
    parameter) carries at most that many."""
    out, normed = [], False
    for e in entries:
        flat = _unnamed_update(e) and int(e.get("numel") or 0) > params
        by_hand = _reduces(e) and (e.get("params_from") == "grad" or flat)
        if e.get("span") == "clip" and _reduces(e) and e.get("params_from") != "grad":
            normed = True
        elif by_hand and (e.get("span") == "update" or e.get("span") == "clip" and normed):
            out.append(e)
    return out


def clip_order_notes(entries: Sequence[Dict[str, Any]], max_norm: Optional[float], groups: Dict[str, List[int]],
                     world: int, params: int = 0) -> List[Note]:
    """``N146`` where ``train.clip_grad_norm`` (``max_norm``; ``None``: no clipping, no note)
    clipped gradients that the engine reduced by hand only afterwards (:func:`_after_clipping`):
    the clipping's norm was each rank's own, of its unreduced gradients, where a mean's is owed
    (``torch.nn.utils.clip_grad_norm_`` after DDP's or FSDP2's reduction). The first step, with
    the groups the late calls crossed (``params``: how many parameters have gradients). A clipping
    that reduces nothing for its norm and an engine that reduces inside it leave their order
    unseen: no note."""
    if max_norm is None or world <= 1:
        return []
    for step in sorted({int(e.get("step", 0)) for e in entries}):
        late = _after_clipping([e for e in entries if int(e.get("step", 0)) == step], params)
        if late:
            crossed = sorted({group_name(e.get("group") or [], groups, world, with_ranks=False) if e.get("group")
                              else "unknown" for e in late})
            where = sorted({"its optimizer step" if e.get("span") == "update" else "its clipping, after the norm"
                            for e in late})
            return [note("N146", step=step, groups=crossed, calls=len(late), where=where, max_norm=float(max_norm))]
    return []


def _unnamed_crossings(entries: Sequence[Dict[str, Any]], step: int, groups: Dict[str, List[int]],
                       world: int) -> set:
    """The groups (dim names, or ``world``) crossed in ``step`` by reductions of more than one
    element in the ``update`` span that name no parameter (:func:`later_reductions`)."""
    return {group_name(e.get("group") or [], groups, world, with_ranks=False) if e.get("group") else "unknown"
            for e in entries if int(e.get("step", -1)) == step and _unnamed_update(e)}


def _twice(found: Dict[str, Dict[str, Any]], need: Sequence[str]) -> Dict[str, str]:
    """``{parameter: a group it was reduced over more than once}`` of :func:`coverage`'s
    ``found``: the same group twice, or a dim and then every rank (a reduce-scatter over
    ``dp_shard``, then an all-reduce over the world: rows of different shards summed)."""
    out: Dict[str, str] = {}
    for name, c in found.items():
        groups = c["groups"]
        hits = [g for g in groups if groups.count(g) > 1] + [d for d in need if d in groups and "world" in groups]
        if hits:
            out[name] = hits[0]
    return out


def coverage_notes(entries: Sequence[Dict[str, Any]], expected: Optional[Dict[str, Any]],
                   params: Union[Sequence[str], Callable[[int], Sequence[str]]],
                   sizes: Dict[str, int], rank: int, world: int) -> List[Note]:
    """Where a gradient was not reduced exactly once over each group it must cross
    (:func:`crossing_needed`; a call over every rank crosses them all), from the ledger's
    entries that name the parameters they carried (``params`` on an entry; engines that do
    not say are not judged here) in the ``grads`` span, and, where there are such, the
    reductions an engine gave a gradient itself in its clipping or optimizer step
    (:func:`later_reductions`: a replicate dim reduced by hand): never reduced (with the elements the
    step's reductions carried against the total of ``params``, where ``sizes`` knows them), not across a dim,
    or twice over one group (``N141``, ``N142``, ``N143``; not twice in a step whose micro-batches
    each reduced, ``synced_micro_batches``: ``N107`` says so). One note per way, the first step.
    ``params``: the parameters owed a reduction, or a function of the step giving them (a parameter
    without a gradient in a step is owed none in it: one the loss reads from a later step on). A
    hand reduction that names no parameter (a flat buffer) leaves "never reduced", and "never
    across" the dims it crossed, unsaid: it may have carried them."""
    from sweep.analysis.collectives import dim_groups, synced_micro_batches

    if not expected or world <= 1:
        return []
    kept = [e for e in entries if e.get("params") is not None and str(e.get("op", "")).startswith(
        ("reduce_scatter", "all_reduce"))]
    reductions = [e for e in kept if e.get("span") in (None, "grads")]
    if not reductions:
        return []
    reductions += [e for e in kept if e.get("span") in ("clip", "update") and e.get("params_from") == "grad"]
    groups = dim_groups(expected["mesh_shape"], expected["mesh_dim_names"], rank)
    need = crossing_needed(expected)
    synced = synced_micro_batches(entries, expected)
    notes: List[Note] = []
    done = set()
    for step in sorted({int(e["step"]) for e in reductions}):
        mine = [e for e in reductions if int(e["step"]) == step]
        found = coverage(mine, params(step) if callable(params) else params, groups, world)
        unnamed = _unnamed_crossings(entries, step, groups, world)
        never = [n for n, c in found.items() if not c["groups"]]
        if never and "never" not in done and not unnamed:
            done.add("never")
            carried = sum(int(sizes.get(n, 0)) for n, c in found.items() if c["groups"])
            total = sum(int(v) for n, v in sizes.items() if n in found)
            known = total > 0  # (sizes come from the step-0 reduction check: none where it did not run)
            notes.append(note("N141", parameters=never, step=step, carried=int(carried) if known else None,
                              total=int(total) if known else None))
        for dim in need:
            missed = [n for n, c in found.items() if c["groups"] and dim not in c["groups"]
                      and "world" not in c["groups"] and not (len(need) == 1 and "unknown" in c["groups"])]
            if missed and ("dim", dim) not in done and not unnamed & {dim, "world", "unknown"}:
                done.add(("dim", dim))
                crossed = sorted({g for n in missed for g in found[n]["groups"]})
                notes.append(note("N142", parameters=missed, crossed=crossed, dim=dim, step=step))
        twice = _twice(found, need) if step not in synced else {}  # (each micro-batch reduced: N107 says so)
        if twice and "twice" not in done:
            done.add("twice")
            names = sorted(twice)
            notes.append(note("N143", parameters=names, groups=sorted(set(twice.values())), step=step))
    return notes


# the gradient norm that departs from the standalone copy's by at least this, relative, departs
NORM_REL = {"float32": 1e-4, "bfloat16": 3e-2, "float16": 5e-3}


def _departs(a: float, b: float, rel: float) -> bool:
    if not (math.isfinite(a) and math.isfinite(b)):  # nan and nan, or inf and inf of one sign, agree
        return not ((math.isnan(a) and math.isnan(b)) or a == b)
    return abs(a - b) > rel * max(abs(a), abs(b), 1e-30)


def first_departure(standalone: Sequence[float], distributed: Sequence[float], rel: float) -> Optional[int]:
    """The first step at which two per-step norms differ by more than ``rel`` (relative)."""
    for step, (a, b) in enumerate(zip(standalone, distributed)):
        if _departs(float(a), float(b), rel):
            return step
    return None


def _total(per_param: Sequence[float]) -> float:
    return float(math.sqrt(sum(float(v) ** 2 for v in per_param)))


@dataclass(frozen=True)
class LossStep:
    """Where the job's losses part, for :func:`norm_notes`: ``step``, the first step (0-based)
    whose loss differs (``word="differ"``: copies bit-identical until a fault) or, where the
    copies differ by rounding from the start, fails (``word="fail"``); ``step=None`` where the
    losses do not show it."""

    step: Optional[int]
    word: str = "differ"


@dataclass(frozen=True)
class _Norms:
    """Both copies' per-step gradient norms (``{"params": [names], "pre"|"reduced"|"read": [[per
    parameter] per step]}``) over ``names``, the parameters both recorded."""

    standalone: Dict[str, Any]
    distributed: Dict[str, Any]
    names: List[str]

    def rows(self, copy: str, kind: str) -> Optional[List[List[float]]]:
        """``copy``'s (``"standalone"`` or ``"distributed"``) ``kind`` norms, a list of floats a step
        in :attr:`names`' order; ``None`` where that copy did not record them."""
        held = getattr(self, copy)
        rows = held.get(kind)
        if not rows:
            return None
        index = [held["params"].index(n) for n in self.names]
        return [[float(row[i]) for i in index] for row in rows]


def _first_stage(norms: _Norms, rel: float, sharded: bool) -> Optional[Tuple[int, int, str]]:
    """The earliest step at which the distributed copy's total norm departs from the standalone
    copy's by more than ``rel``, over the stages (before the reduction, unless ``sharded``: a
    rank's own gradient is its shard's; after it; as the optimizer read them; the standalone
    copy reduces nothing, so its ``reduced`` norms stand for ``pre``): ``(step, stage order,
    kind)``, the earlier stage on a tie; ``None`` where none departs."""
    stages = [("reduced", "reduced"), ("read", "read")]
    if not sharded:
        stages.insert(0, ("pre", "reduced"))  # the standalone copy reduces nothing
    first: Optional[Tuple[int, int, str]] = None
    for order, (kind, theirs) in enumerate(stages):
        ours, got = norms.rows("standalone", theirs), norms.rows("distributed", kind)
        if ours is None or got is None:
            continue
        step = first_departure([_total(r) for r in ours], [_total(r) for r in got], rel)
        if step is not None and (first is None or step < first[0]):
            first = (step, order, kind)
    return first


def _equal_before(norms: _Norms, kind: str, step: int, rel: float, sharded: bool) -> Optional[str]:
    """``after the reduction`` for a departure as the optimizer read them, ``before it`` for one
    in the reduction (replicated data only), where the stage before it agreed at ``step``
    within ``rel`` (the note says they were equal there); else ``None``."""
    if kind == "pre":
        return None
    earlier = norms.rows("distributed", "reduced" if kind == "read" else "pre")
    if earlier is None or not (kind == "read" or not sharded):
        return None
    prior = norms.rows("standalone", "reduced")
    if prior is not None and not _departs(_total(prior[step]), _total(earlier[step]), rel):
        return "after the reduction" if kind == "read" else "before it"
    return None


def norm_notes(standalone: Optional[Dict[str, Any]], distributed: Optional[Dict[str, Any]], rel: float,
               losses: LossStep, sharded: bool, max_norm: Optional[float] = None) -> List[Note]:
    """Where the distributed copy's gradient norm first departs from the standalone copy's
    (both ``{"params": [names], "pre": [[per parameter] per step], "reduced": [...], "read":
    [...]}``, ``sweep.train.observers.reductions``: before the reduction (this rank's own:
    compared with replicated data only, ``sharded=False``), after it, and as the optimizer
    read them), by more than ``rel`` (relative, :data:`NORM_REL`): one note (``N144``) naming the
    step, where in the step (before the reduction, in it, or between it and the optimizer:
    clipping, scaling, logging), both norms, the parameter that departs most, and
    that it comes before ``losses.step`` (:class:`LossStep`: the job's first differing loss,
    ``word="differ"``, or, where the copies differ by rounding from the start, its first
    failing one, ``"fail"``). With ``max_norm`` (``train.clip_grad_norm``), a norm the optimizer
    read above it in the distributed copy while the standalone copy clipped is said to be
    unclipped. ``[]`` where either copy's norms are unknown, none departs, or the first departure
    is not before ``losses.step`` (from there the weights or the forward already differ: the norm
    follows, it does not lead)."""
    if not standalone or not distributed:
        return []
    names = [n for n in distributed.get("params") or [] if n in (standalone.get("params") or [])]
    if not names:
        return []
    norms = _Norms(standalone, distributed, names)
    first = _first_stage(norms, rel, sharded)
    if first is None or (losses.step is not None and first[0] >= losses.step):
        return []  # (from the step the losses differ on, the weights or the forward already do: a consequence)
    step, _, kind = first
    ours = norms.rows("standalone", "reduced" if kind == "pre" else kind)[step]
    got = norms.rows("distributed", kind)[step]
    worst = max(range(len(names)), key=lambda i: abs(got[i] - ours[i]) / max(abs(ours[i]), 1e-30))
    a, b = _total(ours), _total(got)
    unclipped = kind == "read" and max_norm is not None and b > float(max_norm) * (1 + 1e-3) \
        and a <= float(max_norm) * (1 + 1e-3)
    return [note("N144", step=int(step), stage=kind, equal=_equal_before(norms, kind, step, rel, sharded),
                 by_hand=bool(distributed.get("by_hand")),
                 distributed=b, standalone=a, ratio=b / a if a else float("inf"), parameter=names[worst],
                 max_norm=float(max_norm) if unclipped else None, loss_step=losses.step, loss_word=losses.word)]
