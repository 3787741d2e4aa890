"""The first module that differs: the two copies' module traces (``sweep.train.observers
.module_trace``: per step, every module's forward input and output and the gradient of each
output, as summaries with a row-complete sample) compared module by module.

The rule, per traced step, forward before backward:

- **forward**: in execution order (a module is recorded when its forward returns, so a
  child before its parent), the first module whose output differs beyond its rounding
  envelope while its input agrees within it. A module's envelope is the standalone copy's
  twin (``sweep.train.twin``: its weights nudged by one unit in the last place) against the
  standalone copy, on the same rows at the same step and call: a difference beyond
  ``margin`` times the largest the twin showed there up to that step (and beyond one unit
  in the last place of the coarser dtype either output ran in) is beyond rounding
  (``sweep.analysis.envelope``), whatever the tensor's own size. Without a twin, any
  difference counts (nothing is called rounding). That module's own computation (its weights as gathered, its casts, its
  code) made the difference: upstream modules agree, so the engineer looks there. A
  module whose *input* differs while every module before it agrees is named for its
  input (``"where": "input"``): the difference arose before its forward, in a
  pre-forward hook (FSDP2's cast of inputs to ``param_dtype``) or its parent's code.
- **backward** (when every forward agrees): in the order autograd produced the gradients
  of the modules' outputs, the first gradient that differs; the module whose backward
  ran just before it (the previous gradient, which agrees) produced it, or the loss
  when it is the first gradient.

A module called several times in a step is compared call by call; its micro-batches
(``train.grad_accum_steps``) are joined along dim 0 first, so a rank's rows line up with
the standalone copy's. With sharded data (``data.split=sharded``) rank ``r``'s rows are
rows ``[r b, (r + 1) b)`` of the standalone copy's (``sweep.models.data``); a tensor whose
dim 0 is not the batch is then left uncompared where it cannot line up (a gradient summed over
each copy's own sequences, a statistic over the batch, a seq-first layout, the tokens a mixture
of experts routes to one expert: ``_rows_of``). Relative
difference: ``max |a - b| / max |a|`` over the compared samples (``inf`` for a zero
standalone tensor that differs, or for a shape that does not fit). Pure numpy.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from sweep.analysis.envelope import SIGNIFICAND_BITS, EnvelopeSetting
from sweep.analysis.pairs import mend_nonfinite

Steps = Sequence[Dict[str, List[Dict[str, Any]]]]
ROOT = "(model)"  # the root module's name in a module trace (sweep.train.observers.module_trace.ROOT)


def _joined(entries: Sequence[Dict[str, Any]], field: str) -> Tuple[List[tuple], Dict[tuple, np.ndarray]]:
    """Entries by ``(module, call)`` in order of first appearance, each key's samples of
    ``field`` joined over micro-batches along dim 0 (``None`` where a micro-batch has none
    or the columns do not match)."""
    order: List[tuple] = []
    parts: Dict[tuple, List[Any]] = {}
    for e in entries:
        key = (e["module"], e["call"])
        if key not in parts:
            parts[key] = []
            order.append(key)
        parts[key].append(e.get(field))
    joined: Dict[tuple, Any] = {}
    for key, items in parts.items():
        samples = [np.asarray(s["sample"]) for s in items if s is not None]
        if len(samples) != len(items) or len({s.shape[1:] for s in samples}) != 1:
            joined[key] = None
        else:
            joined[key] = np.concatenate(samples, axis=0) if len(samples) > 1 else samples[0]
    return order, joined


def relative_difference(standalone: Optional[np.ndarray], distributed: Optional[np.ndarray], rank: int,
                        sharded: bool, gradient: bool = False) -> Tuple[Optional[float], Optional[float]]:
    """``(abs, rel)`` between two joined samples (module docstring), ``(None, None)`` when
    either is missing; with ``sharded`` the standalone rows are cut to this rank's, and a
    ``gradient``'s are multiplied by the number of shards ``k``: a mean loss over ``k``
    times the rows gives each row ``1/k`` of the gradient (the distributed mean over
    ranks restores it in the reduction, after the activations)."""
    if standalone is None or distributed is None:
        return None, None
    a, b = np.asarray(standalone, np.float64), np.asarray(distributed, np.float64)
    if sharded and a.shape[1:] == b.shape[1:] and b.shape[0] and a.shape[0] > b.shape[0] \
            and a.shape[0] % b.shape[0] == 0 and rank < a.shape[0] // b.shape[0]:
        shards = a.shape[0] // b.shape[0]
        a = a[rank * b.shape[0]:(rank + 1) * b.shape[0]] * (shards if gradient else 1)
    if a.shape != b.shape:
        return float("inf"), float("inf")
    d = np.abs(a - b)
    finite = np.isfinite(a)
    if not np.all(np.isfinite(d)):  # NaN or inf in either: a difference only where the copies' values part
        # (non-finite in both, anywhere: an overflow a gradient scaler skips in both, no difference either sees)
        mend_nonfinite(a, b, d, gradient and not np.all(finite) and not np.all(np.isfinite(b)))
    diff = float(np.max(d)) if a.size else 0.0
    if diff == float("inf"):
        return diff, diff
    scale = float(np.max(np.abs(a[finite]))) if finite.any() else 0.0
    return diff, (diff / scale if scale > 0 else (float("inf") if diff > 0 else 0.0))


def _unit(*dtypes: Optional[str]) -> float:
    """One unit in the last place, relative (``2^(1 - p)``), of the coarsest of ``dtypes``
    (``torch.bfloat16``, ``Float32``, ``None``...; unknown or none: float32's)."""
    bits = [SIGNIFICAND_BITS.get(str(d).rsplit(".", 1)[-1].lower(), 24) for d in dtypes if d]
    return 2.0 ** (1 - min(bits, default=24))


class _Envelope:
    """The module trace's rounding envelope (module docstring): per ``(phase, field, module,
    call)``, the largest relative difference of the twin from the standalone copy over the
    traced steps (the window, not each step: rounding's rare events, an input rounding across
    a ReLU's zero, fall on some step of one draw), measured over every row the two hold."""

    def __init__(self, standalone: Steps, twin: Optional[Steps], margin: float, dtype: str) -> None:
        self.twin, self.margin, self.unit = twin, margin, 2.0 ** (1 - SIGNIFICAND_BITS.get(dtype, 24))
        self.largest: Dict[tuple, float] = {}
        for ours, mine in zip(standalone, twin or []):
            for phase, fields in (("forward", ("output", "input")), ("backward", ("grad",))):
                for field in fields:
                    _, a = _joined(ours[phase], field)
                    _, t = _joined(mine[phase], field)
                    for key, sample in a.items():
                        # every row (the standalone copy's): a rank's rows are among them, and a
                        # relative difference does not depend on a gradient's 1/k on sharded data
                        _, rel = relative_difference(sample, t.get(key), 0, False)
                        if rel is not None:
                            slot = (phase, field, key)
                            self.largest[slot] = max(self.largest.get(slot, 0.0), rel)

    def bound(self, slot: tuple, standalone_dtype: Optional[str] = None) -> Optional[float]:
        """``margin`` x the envelope of ``slot`` (``(phase, field, (module, call))``), relative,
        at least one unit in the last place of the twin's nudge and of the standalone copy's
        output dtype (the smallest difference the values can show: a twin that shows none
        there bounds rounding below one unit, so the margin does not multiply it; the model's
        own precision, in both copies); ``None`` without a twin (nothing is rounding). A coarser
        dtype only the distributed copy's module computes in gives no room: it is no rounding of
        the configured precision but a departure from it (note ``N162``: a unit given
        ``param_dtype=bfloat16`` by hand under an fp32 policy)."""
        if self.twin is None:
            return None
        return max(self.margin * self.largest.get(slot, 0.0), self.unit, _unit(standalone_dtype))


def compare_modules(standalone: Steps, distributed: Steps, rank: int = 0, sharded: bool = False,
                    twin: Optional[Steps] = None, envelope: EnvelopeSetting = EnvelopeSetting()) -> Dict[str, Any]:
    """The first module that differs (module docstring) and every comparison made, rank
    ``rank``'s module trace (``distributed``) against the standalone copy's (with
    ``sharded``, its rows only: ``data.split=sharded``); ``twin``: the standalone copy's
    twin's module trace (the rounding envelope; ``None``: any difference counts);
    ``envelope``: its ``margin`` (``compare.envelope_margin``) and ``dtype`` (the twin's
    nudge), as in ``sweep.analysis.envelope``.

    Returns ``{"first": None or {"step", "phase": "forward" | "backward", "module", "call",
    "rel_in", "rel_out", "abs_out", "bound", "margin"}, "rows": [{"step", "phase",
    "order", "module", "call", "abs_in", "rel_in", "abs", "rel", "bound", "shape",
    "dtype_standalone", "dtype_distributed"}]}``, where none differs ``"first": None`` with
    ``traced_steps`` and ``envelope_measured`` (a twin bounded it); data only
    (``sweep.findings.places.module_text`` words it); in a backward
    ``first``, ``module`` is the module whose backward produced the differing gradient
    (``"(loss)"`` for the first gradient) and ``"gradient_of"`` the module whose output's
    gradient differs; ``bound`` is the relative size its envelope allows (``None``: no twin).
    The rows run up to the end of the phase (forward or backward of a step) where the first
    module differs."""
    rows: List[Dict[str, Any]] = []
    steps = min(len(standalone), len(distributed))
    bounds = _Envelope(standalone, twin, envelope.margin, envelope.dtype)
    for step in range(steps):
        for phase in ("forward", "backward"):
            compared = [{"step": step, **row}
                        for row in _phase_rows(standalone[step], distributed[step], phase, rank, sharded, bounds)]
            rows.extend(compared)
            first = _first_in_phase(compared, bounds)
            if first is not None:
                return {"first": dict(first, margin=envelope.margin), "rows": rows}
    # where the copies part is not this window's to say: a tensor beyond rounding in these steps
    # places it after the backward (sweep.analysis.evidence.place), none leaves it open
    return {"first": None, "rows": rows, "traced_steps": steps, "envelope_measured": twin is not None}


PHASE_FIELD = {"forward": "output", "backward": "grad"}  # what each phase compares: the output, its gradient


def _phase_rows(ours: Dict[str, List[Dict[str, Any]]], theirs: Dict[str, List[Dict[str, Any]]], phase: str,
                rank: int, sharded: bool, bounds: _Envelope) -> List[Dict[str, Any]]:
    """One phase's comparisons of one step, the standalone copy's entries (``ours``: a step
    of its module trace, ``{"forward": [...], "backward": [...]}``) against rank ``rank``'s
    (``theirs``), in the rank's order: :func:`compare_modules`'s rows without ``"step"``
    (``abs``/``rel`` of the output in the forward, of its gradient in the backward; the input
    too in the forward), ``rank`` and ``sharded`` as :func:`relative_difference` takes them,
    ``bound`` from ``bounds`` (relative; ``None``: no twin). Where the step's batch is cut
    across the ranks (:func:`_batch_split`), a tensor whose rows are not the batch's is left
    uncompared (``None``), as :func:`_rows_of` says."""
    field = PHASE_FIELD[phase]
    order, b_out = _joined(theirs[phase], field)
    _, a_out = _joined(ours[phase], field)
    forward = phase == "forward"
    a_in = _joined(ours[phase], "input")[1] if forward else {}
    b_in = _joined(theirs[phase], "input")[1] if forward else {}
    meta_a, meta_b = _metas(ours[phase], field), _metas(theirs[phase], field)
    in_a, in_b = _metas(ours[phase], "input"), _metas(theirs[phase], "input")
    split = sharded and _batch_split(ours, theirs)
    batch = _batch_rows(ours, theirs) if split else None
    rows = []
    for i, key in enumerate(order):
        abs_out, rel_out = relative_difference(a_out.get(key), b_out.get(key), rank, sharded, gradient=not forward)
        abs_in, rel_in = relative_difference(a_in.get(key), b_in.get(key), rank, sharded) if forward else (None, None)
        if split:
            out_rows = _rows_of(a_out.get(key), meta_a.get(key), b_out.get(key), meta_b.get(key), batch)
            in_rows = _rows_of(a_in.get(key), in_a.get(key), b_in.get(key), in_b.get(key), batch) if forward \
                else "none"
            if in_rows == "apart":
                abs_in, rel_in = None, None
            if out_rows == "apart" or (out_rows == "same" and (not forward or in_rows == "batch")):
                abs_out, rel_out = None, None  # (a sum or statistic over the batch: each copy's own rows)
        dtypes = ((meta_a.get(key) or {}).get("dtype"), (meta_b.get(key) or {}).get("dtype"))
        row = {"phase": phase, "order": i, "module": key[0], "call": key[1],
               "abs_in": abs_in, "rel_in": rel_in, "abs": abs_out, "rel": rel_out,
               "bound": bounds.bound((phase, field, key), dtypes[0]),
               "shape": (meta_b.get(key) or {}).get("shape"),
               "dtype_standalone": dtypes[0], "dtype_distributed": dtypes[1]}
        for name, rel, pair in (("rows_in", rel_in, (a_in, in_a, b_in, in_b)),
                                ("rows_out", rel_out, (a_out, meta_a, b_out, meta_b))):
            rows_apart = _rows_apart(key, rel, *pair)
            if rows_apart:
                row[name] = rows_apart
        rows.append(row)
    return rows


def _rows_apart(key: tuple, rel: Optional[float], a: Dict[tuple, Any], meta_a: Dict[tuple, Any],
                b: Dict[tuple, Any], meta_b: Dict[tuple, Any]) -> Optional[List[int]]:
    """``[standalone's rows, rank's rows]`` of a tensor compared as ``inf`` because its shapes
    differ in dim 0 alone (the rest equal): a discrete choice in the forward (routing, a
    threshold, a top-k) gave one copy other rows; ``None`` otherwise (a NaN's ``inf`` too)."""
    if rel is None or math.isfinite(rel):
        return None
    sa, sb = _shape(a.get(key), meta_a.get(key)), _shape(b.get(key), meta_b.get(key))
    if sa is None or sb is None or sa[1:] != sb[1:] or sa[0] == sb[0]:
        return None
    return [sa[0], sb[0]]


def _metas(entries: Sequence[Dict[str, Any]], field: str) -> Dict[tuple, Any]:
    """Each ``(module, call)``'s summary of ``field`` (its dtype and shape), the last micro-batch's."""
    return {(e["module"], e["call"]): e.get(field) for e in entries}


def _shape(sample: Optional[np.ndarray], meta: Optional[Dict[str, Any]]) -> Optional[Tuple[int, ...]]:
    """A joined sample's tensor shape: its rows (every micro-batch's), then the recorded
    tensor's other dims (the sample flattens them); ``None`` where either is missing."""
    if sample is None or not meta or not meta.get("shape"):
        return None
    return (int(np.shape(sample)[0]), *(int(n) for n in meta["shape"][1:]))


def _rows_of(a: Optional[np.ndarray], meta_a: Any, b: Optional[np.ndarray], meta_b: Any,
             batch: Optional[Tuple[int, int]] = None) -> str:
    """How a tensor's shapes in the two copies hold the batch where the data is sharded:
    ``"batch"`` (dim 0 is the batch: the standalone copy's rows are ``k`` times the rank's, the
    rest equal, and, where ``batch`` gives the model input's rows ``(standalone's, rank's)``
    (:func:`_batch_rows`), the same number of rows per input row in both: the rank's rows are
    comparable), ``"same"`` (equal shapes: no batch dim, a position embedding's output, or a
    statistic over the batch), ``"apart"`` (the batch on another dim, seq-first ``(T, B, C)``,
    rows picked by the values, as a mixture of experts routes tokens, or shapes that fit neither:
    no row lines up), or ``"none"`` (not recorded)."""
    sa, sb = _shape(a, meta_a), _shape(b, meta_b)
    if sa is None or sb is None:
        return "none"
    if sa == sb:
        return "same"
    if len(sa) == len(sb) and sa[1:] == sb[1:] and sb[0] and sa[0] > sb[0] and sa[0] % sb[0] == 0:
        if batch is not None and (sa[0] % batch[0] or sb[0] != sa[0] // batch[0] * batch[1]):
            return "apart"  # (rows that happen to divide: an expert's tokens, 8 of 16 here and 4 of 8 there)
        return "batch"
    return "apart"


def _batch_rows(ours: Dict[str, List[Dict[str, Any]]], theirs: Dict[str, List[Dict[str, Any]]]
                ) -> Optional[Tuple[int, int]]:
    """The model input's rows in the standalone copy and on the rank (the root module's first
    forward input, every micro-batch's), where both are recorded and the rank's are fewer; else
    ``None``."""
    key = (ROOT, 0)
    a, b = _joined(ours["forward"], "input")[1].get(key), _joined(theirs["forward"], "input")[1].get(key)
    sa = _shape(a, _metas(ours["forward"], "input").get(key))
    sb = _shape(b, _metas(theirs["forward"], "input").get(key))
    if sa is None or sb is None or not sb[0] or sa[0] <= sb[0]:
        return None
    return sa[0], sb[0]


def _batch_split(ours: Dict[str, List[Dict[str, Any]]], theirs: Dict[str, List[Dict[str, Any]]]) -> bool:
    """Whether this step's batch is cut across the ranks: some module's forward output holds
    fewer rows on the rank than in the standalone copy (``data.split=sharded`` over more than
    one rank). Then a tensor without the batch on dim 0 is not compared (:func:`_phase_rows`):
    the gradient of one that has no batch dim sums over each copy's own rows (a learned
    position embedding's output, shared by every sequence), and a forward output that reduced
    its batch-carrying input (a mean over the batch) is a statistic of those rows."""
    _, a = _joined(ours["forward"], "output")
    _, b = _joined(theirs["forward"], "output")
    meta_a, meta_b = _metas(ours["forward"], "output"), _metas(theirs["forward"], "output")
    return any(_rows_of(a.get(k), meta_a.get(k), b.get(k), meta_b.get(k)) == "batch" for k in b)


def _beyond(rel: Optional[float], bound: Optional[float]) -> bool:
    """Whether a relative difference is beyond its bound (any difference without one)."""
    return rel is not None and (rel > bound if bound is not None else rel > 0)


def _first_in_phase(rows: Sequence[Dict[str, Any]], bounds: _Envelope) -> Optional[Dict[str, Any]]:
    """The first module of one phase's rows (:func:`_phase_rows`, with ``"step"``) that
    differs by the module docstring's rule, as :func:`compare_modules`'s ``first`` without its
    ``margin``, or ``None``: a forward output beyond its envelope whose input is within
    its own, or an input beyond while no output before it is; a backward gradient beyond,
    named for the module whose backward ran before it. An input's bound is read from
    ``bounds`` here (the rows hold the output's)."""
    previous_equal: Optional[tuple] = None
    parted = False  # some earlier module's output differs beyond its envelope
    for row in rows:
        if row["rel"] is None:
            continue
        key, forward = (row["module"], row["call"]), row["phase"] == "forward"
        bound_in = bounds.bound(("forward", "input", key), row["dtype_standalone"]) \
            if forward else None
        found = {"step": row["step"], "phase": row["phase"], "module": key[0], "call": key[1],
                 "rel_in": row["rel_in"], "rel_out": row["rel"], "abs_out": row["abs"],
                 **{k: row[k] for k in ("rows_in", "rows_out") if k in row}}
        if forward and _beyond(row["rel_in"], bound_in) and not parted:
            return dict(found, bound=bound_in, where="input")
        if not _beyond(row["rel"], row["bound"]):
            # a parent whose output is its last child's (same tensor, same gradient) does not
            # replace that child as the module whose backward runs next
            if previous_equal is None or not _encloses(key[0], previous_equal[0]):
                previous_equal = key
            continue
        parted = True
        if forward and not _beyond(row["rel_in"], bound_in):
            return dict(found, bound=row["bound"])
        if not forward:
            maker = previous_equal[0] if previous_equal else "(loss)"
            return {"step": row["step"], "phase": row["phase"], "module": maker, "gradient_of": key[0],
                    "call": key[1], "rel_in": None, "rel_out": row["rel"], "abs_out": row["abs"],
                    "bound": row["bound"]}
    return None


def _encloses(parent: str, child: str) -> bool:
    """Whether module ``parent`` contains module ``child`` (the root contains every one)."""
    return parent == ROOT or child.startswith(parent + ".")


def first_over_ranks(found: Sequence[Tuple[Dict[str, Any], int]]) -> Optional[Dict[str, Any]]:
    """The job's first module over its ranks' (``[(first, rank)]``, ``first`` from
    :func:`compare_modules`): the earliest ``(step, phase)``, with ``rank`` (the lowest
    such), ``ranks`` (every rank naming the same module then) and ``every`` (every rank of
    several does); ``None`` if no rank names one."""
    hits = [(f, r) for f, r in found if f]
    if not hits:
        return None
    key = lambda item: (item[0]["step"], item[0]["phase"] != "forward", item[1])  # noqa: E731
    best, rank = min(hits, key=key)
    same = sorted(r for f, r in hits if (f["step"], f["phase"], f["module"]) ==
                  (best["step"], best["phase"], best["module"]))
    return dict(best, rank=rank, ranks=same, every=len(same) == len(found) and len(found) > 1)
