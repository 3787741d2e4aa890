"""Pair statistics: what the first-difference rules (``sweep.analysis.trace``) read of two
copies' tensors, one tensor pair at a time, so that the rules never need the tensors
themselves.

Two paths give the same statistics, computed by the same function (:func:`pair_stats`):

- *full capture*: both copies' traces held whole (``sweep.analysis.trace``'s ``Trace``,
  one dict of arrays a step) and compared at the end (:func:`pair_trace`);
- *staged*: a rank streams one copy's tensors to a scratch spool and computes each pair's
  statistics as the other copy reaches the same step (``sweep.train.trace_book``), keeping
  only the rows.

Either way the result is a :data:`PairTrace`: per traced step, ``{"ours": {kind: [name]},
"theirs": {kind: [name]}, "order": {kind: [name]}, "pairs": {kind: {name: row}}}``: the
names each copy recorded for each kind it recorded (``ours``: the reference, the standalone
copy), the order the reference's step produced them in where it records one (the gradients
as autograd produced them), and one row of :func:`pair_stats` per tensor both copies hold.
Pure numpy.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

PairRow = Dict[str, Any]
PairTrace = List[Dict[str, Dict[str, Any]]]
KINDS = ("initial", "initial_buffer", "buffer", "grad", "weight")  # a step's order; "initial*" at step 0 only

PURE_SCALE_RESIDUAL = 1e-3  # b is r * a when |b - r a| <= this share of |b|
BLOCK = 1 << 18  # elements of float64 work at a time: a tensor is read once, its block's work stays in cache


def _rows(values: np.ndarray) -> np.ndarray:
    """``values`` as a 2-D ``(rows, columns)`` view: dim 0 kept, the rest flattened (a 0-d
    tensor is one row of one)."""
    return values.reshape(values.shape[0], -1) if values.ndim and values.shape[0] else values.reshape(1, -1)


def _blocks(rows: int, columns: int) -> List[Tuple[int, int]]:
    """Row ranges of about :data:`BLOCK` elements each."""
    step = max(1, BLOCK // max(columns, 1))
    return [(r, min(r + step, rows)) for r in range(0, rows, step)]


def _dots(a: np.ndarray, b: Optional[np.ndarray] = None) -> Tuple[float, float, float]:
    """``(a.a, a.b, b.b)`` in float64, block by block (``b`` ``None``: ``a.a`` only)."""
    a2 = _rows(a)
    b2 = _rows(b) if b is not None else None
    aa = ab = bb = 0.0
    for r0, r1 in _blocks(*a2.shape):
        x = a2[r0:r1].astype(np.float64).ravel()
        aa += float(np.dot(x, x))
        if b2 is not None:
            y = b2[r0:r1].astype(np.float64).ravel()
            ab += float(np.dot(x, y))
            bb += float(np.dot(y, y))
    return aa, ab, bb


def pure_scale(a: np.ndarray, b: np.ndarray) -> Optional[float]:
    """``r`` when ``b`` is ``r`` times ``a`` (least squares ``r = a.b / a.a``, residual
    ``|b - r a|`` within :data:`PURE_SCALE_RESIDUAL` of ``|b|``) and ``r`` is not 1, else
    ``None``; from the dot products (:func:`scale_from`)."""
    return scale_from(*_dots(np.asarray(a), np.asarray(b)))


def scale_from(aa: float, ab: float, bb: float) -> Optional[float]:
    """:func:`pure_scale` from ``a.a``, ``a.b`` and ``b.b``: ``|b - r a|^2 = b.b - 2 r a.b +
    r^2 a.a`` (float64: a residual of 1e-3 |b| is a millionth of ``b.b``, far above its
    rounding), so shards' partial sums give it too."""
    if not np.all(np.isfinite([aa, ab, bb])):  # a NaN or an infinity in either gradient: no factor
        return None
    norm_b = float(np.sqrt(bb))
    if aa == 0 or norm_b == 0:
        return None
    r = ab / aa
    if abs(r - 1.0) < 1e-3:
        return None
    residual = float(np.sqrt(max(bb - 2.0 * r * ab + r * r * aa, 0.0)))
    return None if residual > PURE_SCALE_RESIDUAL * norm_b else r


def pair_stats(a: Any, b: Any, kind: str, shards: int = 1,
               prev: Optional[Tuple[Any, Any]] = None) -> PairRow:
    """The statistics of one tensor pair that the rules read: ``a`` the reference copy's
    (standalone) tensor, ``b`` the other copy's, float arrays (float32 values; compared in
    float64, a block of rows at a time: :data:`BLOCK`; the sums are taken shard by shard, in
    shard order, so that shards compared apart and merged, :func:`merge_partials`, give the same
    numbers bit for bit).

    Returns ``{"shape_a", "shape_b": [int], "abs": max |a - b|, "scale_a", "scale_b": max |.|
    of each, "norm_a": |a| (Euclidean), "diff_norm": |a - b|, "aa": a.a, "dd": its square}``, all float64 (a
    shape mismatch: ``abs`` and ``diff_norm`` ``inf``; an empty tensor: zeros; an element that is NaN or
    infinite in one copy and not the same in the other: ``abs`` and ``diff_norm`` ``inf``, a difference
    beyond any envelope, unless both copies' gradients hold non-finite values somewhere in the shard, an
    overflow a gradient scaler skips in both; the same non-finite value in both: no difference there,
    :func:`mend_nonfinite`), and

    - with ``shards`` > 1 (its dim-0 shards in the distributed copy) and one shape:
      ``"of": shards, "chunks"``: the largest ``|a - b|`` in each dim-0 chunk ``torch.chunk``
      makes (FSDP2's shards: chunk ``i`` holds rows ``[i c, (i + 1) c)``, ``c = ceil(rows /
      shards)``);
    - ``kind="grad"``, one shape: ``"ab"``, ``"bb"`` (dot products: whether another
      gradient is scaled alike, :func:`same_scale`) and ``"scale"``: :func:`pure_scale`;
    - ``prev=(a_prev, b_prev)`` (kind ``weight``: each copy's weights one step before, one
      shape throughout): ``"uu"``, ``"ee"``, ``"eu"``, the update statistics
      (``sweep.analysis.trace.update_series``): ``u = a - a_prev`` the reference's update,
      ``e = (b - b_prev) - u`` the error of the other's, ``uu = u.u``, ``ee = e.e``,
      ``eu = e.u``.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or not (a.ndim and a.shape[0]) or shards <= 1:
        row = partial_stats(a, b, kind, prev)
        row.pop("chunk", None)
        if shards > 1 and a.shape == b.shape:
            row.update(of=int(shards), chunks=[])
        return row
    size = -(-a.shape[0] // shards)
    bounds = [(r, min(r + size, a.shape[0])) for r in range(0, a.shape[0], size)]
    parts = [partial_stats(a[r0:r1], b[r0:r1], kind, None if prev is None else
                           (np.asarray(prev[0])[r0:r1], np.asarray(prev[1])[r0:r1])) for r0, r1 in bounds]
    return merge_partials(parts, list(a.shape), list(b.shape), kind, shards)


def partial_stats(a: Any, b: Any, kind: str, prev: Optional[Tuple[Any, Any]] = None) -> PairRow:
    """:func:`pair_stats` of one slice of a tensor pair (a shard), without ``"of"`` and
    ``"chunks"``, with ``"chunk"``: the largest ``|a - b|`` over its rows (``inf`` for an element
    non-finite in one copy only, :func:`mend_nonfinite`; ``None`` for no row)."""
    a, b = np.asarray(a), np.asarray(b)
    row: PairRow = {"shape_a": [int(n) for n in a.shape], "shape_b": [int(n) for n in b.shape],
                    "scale_a": _absmax(a), "scale_b": _absmax(b)}
    if a.shape != b.shape:
        row["aa"] = _dots(a)[0]
        row.update(norm_a=float(np.sqrt(row["aa"])), abs=float("inf"), diff_norm=float("inf"))
        return row
    grad, updates = kind == "grad", prev is not None and np.shape(prev[0]) == np.shape(prev[1]) == a.shape
    a2, b2 = _rows(a), _rows(b)
    p2 = (_rows(np.asarray(prev[0])), _rows(np.asarray(prev[1]))) if updates else None
    sums = dict.fromkeys(("aa", "ab", "bb", "dd", "uu", "ee", "eu"), 0.0)
    row_max = np.zeros(a2.shape[0])
    both: Optional[bool] = None  # both copies non-finite somewhere (read once, where a block holds any)
    for r0, r1 in _blocks(*a2.shape):
        x, y = a2[r0:r1].astype(np.float64), b2[r0:r1].astype(np.float64)
        fx = x.ravel()
        sums["aa"] += float(np.dot(fx, fx))
        if grad:
            fy = y.ravel()
            sums["ab"] += float(np.dot(fx, fy))
            sums["bb"] += float(np.dot(fy, fy))
        if p2 is not None:
            u, e = p2[0][r0:r1].astype(np.float64), p2[1][r0:r1].astype(np.float64)
            np.subtract(x, u, out=u)  # the reference's update
            np.subtract(y, e, out=e)
            np.subtract(e, u, out=e)  # the other's update minus it
            fu, fe = u.ravel(), e.ravel()
            sums["uu"] += float(np.dot(fu, fu))
            sums["ee"] += float(np.dot(fe, fe))
            sums["eu"] += float(np.dot(fe, fu))
        with np.errstate(invalid="ignore"):  # inf - inf: NaN, mended below
            np.subtract(x, y, out=y)
        np.abs(y, out=y)
        fd = y.ravel()
        part = float(np.dot(fd, fd))
        if not np.isfinite(part):  # a NaN or an infinity in either copy (a float32 |a - b| never overflows float64)
            if both is None:  # (gradients: an overflow a scaler skips in both copies; weights must agree)
                both = grad and not np.all(np.isfinite(a)) and not np.all(np.isfinite(b))
            mend_nonfinite(x, b2[r0:r1], y, both)
            part = float(np.dot(fd, fd))
        if y.size:
            row_max[r0:r1] = y.max(axis=1)
        sums["dd"] += part
    row.update(aa=sums["aa"], norm_a=float(np.sqrt(sums["aa"])), abs=float(np.max(row_max)) if a.size else 0.0,
               dd=sums["dd"], diff_norm=float(np.sqrt(sums["dd"])))
    real = a.ndim and a.shape[0]
    row["chunk"] = float(np.max(np.where(np.isnan(row_max), -np.inf, row_max))) if real else None
    if grad:
        row.update(ab=sums["ab"], bb=sums["bb"], scale=scale_from(sums["aa"], sums["ab"], sums["bb"]))
    if updates:
        row.update(uu=sums["uu"], ee=sums["ee"], eu=sums["eu"])
    return row


def nonfinite_apart(a: np.ndarray, b: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``(bad, apart)``, boolean arrays of ``a``'s shape: where either is not finite, and of
    those, where the two are not the same non-finite value (NaN and NaN, or one infinity, are
    the same). The one rule for losses (``sweep.analysis.compare.differing_steps``) and tensors
    (:func:`mend_nonfinite`)."""
    bad = ~(np.isfinite(a) & np.isfinite(b))
    return bad, bad & ~((a == b) | (np.isnan(a) & np.isnan(b)))


def mend_nonfinite(x: np.ndarray, b: np.ndarray, diff: np.ndarray, both: bool = False) -> None:
    """Mend ``diff`` (``|x - b|``, float64, in place) where either copy is not finite: 0 where
    both hold the same non-finite value, ``inf`` where only one does or they differ
    (:func:`nonfinite_apart`: a NaN in one copy is a difference no rounding makes, it counts
    beyond any envelope, as a shape mismatch does). With ``both`` (each copy's gradient holds a
    non-finite value somewhere: both overflowed, a step a gradient scaler skips in both, an
    inf in one and a NaN after the reduction's mean in the other) 0 there too: where both are
    non-finite anywhere, where they are is no difference either copy's update sees."""
    bad, apart = nonfinite_apart(x, b.astype(np.float64))
    diff[bad] = 0.0
    if not both:
        diff[apart] = np.inf


def merge_partials(parts: Sequence[PairRow], shape_a: List[int], shape_b: List[int], kind: str,
                   shards: int) -> PairRow:
    """One tensor pair's :func:`pair_stats` from its dim-0 shards' :func:`partial_stats`
    (``parts``, in shard order; ``shards`` the number of shards, ``shape_a``/``shape_b`` the
    whole tensors' shapes): the largest differences and sizes over the shards (a NaN in any
    makes it NaN), the sums added in shard order, one ``"chunks"`` entry per shard that holds
    rows."""
    row: PairRow = {"shape_a": list(shape_a), "shape_b": list(shape_b),
                    "scale_a": float(np.max([p["scale_a"] for p in parts])),
                    "scale_b": float(np.max([p["scale_b"] for p in parts]))}
    total = {key: 0.0 for key in ("aa", "dd", "ab", "bb", "uu", "ee", "eu")}
    for p in parts:
        for key in total:
            total[key] += p.get(key, 0.0)
    row.update(aa=total["aa"], norm_a=float(np.sqrt(total["aa"])))
    if shape_a != shape_b or any(p["shape_a"] != p["shape_b"] for p in parts):
        row.update(abs=float("inf"), diff_norm=float("inf"))
        return row
    row.update(abs=float(np.max([p["abs"] for p in parts])), dd=total["dd"], diff_norm=float(np.sqrt(total["dd"])),
               of=int(shards), chunks=[p["chunk"] for p in parts if p.get("chunk") is not None])
    if kind == "grad":
        row.update(ab=total["ab"], bb=total["bb"], scale=scale_from(total["aa"], total["ab"], total["bb"]))
    if all("uu" in p for p in parts):
        row.update(uu=total["uu"], ee=total["ee"], eu=total["eu"])
    return row


def equal_stats(values: np.ndarray, kind: str, shards: int = 1,
                prev: Optional[np.ndarray] = None) -> PairRow:
    """:func:`pair_stats` of a tensor with a bitwise-equal copy of itself (``values``: both
    copies' tensor, whose digests agree; ``prev``: its value one step before, also equal in
    both copies), without the second tensor: the same numbers, bit for bit."""
    return pair_stats(values, values, kind, shards, None if prev is None else (prev, prev))


def same_scale(row: PairRow, ratio: float) -> bool:
    """Whether the other copy's tensor is ``ratio`` times the reference's (both zero counts),
    within :data:`PURE_SCALE_RESIDUAL`, from a gradient row's dot products:
    ``|b - r a|^2 = b.b - 2 r a.b + r^2 a.a``."""
    if row["shape_a"] != row["shape_b"] or "bb" not in row:
        return False
    bb = row["bb"]
    if bb == 0.0:
        return row["aa"] == 0.0
    residual = bb - 2.0 * ratio * row["ab"] + ratio * ratio * row["aa"]
    return float(np.sqrt(max(residual, 0.0))) <= PURE_SCALE_RESIDUAL * float(np.sqrt(bb))


def _absmax(values: np.ndarray) -> float:
    """``max|values|`` (0.0 for an empty one; NaN where one is NaN), float64: ``max(max x, -min x)``,
    which is exact and needs no copy."""
    return float(np.maximum(values.max(), -values.min())) if values.size else 0.0


def update_names(initial_ours: Dict[str, Any], initial_theirs: Dict[str, Any]) -> List[str]:
    """The parameters the update differences run over: those both copies hold before any
    step with one shape, sorted by name."""
    return sorted(n for n in set(initial_ours) & set(initial_theirs)
                  if np.shape(initial_ours[n]) == np.shape(initial_theirs[n]))


def pair_trace(standalone: Sequence[Dict[str, Any]], distributed: Sequence[Dict[str, Any]],
               layout: Optional[Dict[str, int]] = None) -> PairTrace:
    """The :data:`PairTrace` of two full traces (``sweep.analysis.trace.Trace``: per step,
    ``{kind: {name: array}}`` and maybe ``"order"``), over the steps both hold. ``layout``:
    parameter name -> its number of dim-0 shards in the distributed copy (``"of"`` and
    ``"chunks"`` in its rows). The weights of the parameters of :func:`update_names` carry
    the update statistics (the step before: the previous step's weights, step 0's
    ``"initial"``)."""
    out: PairTrace = []
    steps = min(len(standalone), len(distributed))
    updating = update_names(standalone[0].get("initial", {}), distributed[0].get("initial", {})) \
        if steps and "initial" in standalone[0] and "initial" in distributed[0] else []
    prev = (standalone[0].get("initial", {}), distributed[0].get("initial", {})) if steps else ({}, {})
    for step in range(steps):
        ours, theirs = standalone[step], distributed[step]
        entry: Dict[str, Any] = {"ours": {}, "theirs": {}, "order": dict(ours.get("order") or {}), "pairs": {}}
        for kind in KINDS:
            if kind in ours:
                entry["ours"][kind] = list(ours[kind])
            if kind in theirs:
                entry["theirs"][kind] = list(theirs[kind])
            a_side, b_side = ours.get(kind, {}), theirs.get(kind, {})
            rows = {}
            for name in sorted(set(a_side) & set(b_side)):
                before = (prev[0][name], prev[1][name]) if kind == "weight" and name in updating \
                    and name in prev[0] and name in prev[1] else None
                rows[name] = pair_stats(a_side[name], b_side[name], kind, (layout or {}).get(name, 1), before)
            if kind in ours or kind in theirs:
                entry["pairs"][kind] = rows
        if "weight" in ours and "weight" in theirs:
            prev = (ours["weight"], theirs["weight"])
        out.append(entry)
    return out
