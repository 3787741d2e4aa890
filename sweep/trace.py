"""The first tensor that differs: per-parameter gradients (after reduction) and weights
(after the step) of the two copies, step by step, compared to find where the runs part.

A *trace* is a list, one entry per step, of ``{"grad": {name: array}, "weight": {name:
array}}`` with full (unsharded) float arrays: a rank gathers a sharded tensor before it
records it (``DTensor.full_tensor()``). Within a step the gradients come first (the
backward, then the reduction), then the weights (the optimizer step). Pure numpy.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

Trace = List[Dict[str, Dict[str, np.ndarray]]]
KINDS = ("grad", "weight")
# Relative differences below this are float rounding (summation order; fp32's epsilon is
# 1.2e-7 and a few steps of accumulation stay far below 1e-4), not a fault, which moves
# its first tensor by 1e-3 or more (a scale, a missing reduction, a skipped step).
ROUNDING_REL = 1e-4


def first_difference(standalone: Trace, distributed: Trace, noise_floor: float = 0.0,
                     min_rel: float = 0.0) -> Optional[Dict[str, Any]]:
    """The first ``(step, kind, name)`` whose two tensors differ by more than
    ``noise_floor`` (max absolute difference) and by at least ``min_rel`` (relative), in
    trace order (names sorted within a kind), or ``None`` if none does.

    Returns ``{"step", "kind", "name", "abs_diff", "rel_diff", "weights_identical_before",
    "description"}``: ``rel_diff`` is ``abs_diff / max|standalone|`` (``inf`` for a zero
    reference); a shape mismatch counts as a difference with ``abs_diff`` ``inf``.
    """
    for step in range(min(len(standalone), len(distributed))):
        for kind in KINDS:
            ours, theirs = standalone[step].get(kind, {}), distributed[step].get(kind, {})
            for name in sorted(set(ours) & set(theirs)):
                a, b = np.asarray(ours[name], np.float64), np.asarray(theirs[name], np.float64)
                if a.shape != b.shape:
                    diff = float("inf")
                else:
                    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
                if not diff > noise_floor:
                    continue
                scale = float(np.max(np.abs(a))) if a.size else 0.0
                rel = diff / scale if scale > 0 else float("inf")
                if rel < min_rel:
                    continue
                before = step > 0 or kind == "weight"
                found = {"step": step, "kind": kind, "name": name, "abs_diff": diff, "rel_diff": rel,
                         "weights_identical_before": before}
                found["description"] = describe(found)
                return found
    return None


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
                fits = (shard is not None and full.ndim and shard.shape != full.shape and shard.shape[0]
                        and full.shape[0] % shard.shape[0] == 0 and full.shape[1:] == shard.shape[1:])
                if fits:
                    n = shard.shape[0]
                    index = rank % (full.shape[0] // n)
                    full = full[index * n:(index + 1) * n]
                step[kind][name] = full
        out.append(step)
    return out


def locate(standalone: Trace, distributed: Trace, noise_floor: float, last_step: int) -> Dict[str, Any]:
    """:func:`first_difference`, and if that one is within float rounding
    (:data:`ROUNDING_REL`), also the first tensor beyond it (``beyond_rounding``: a dict
    like the first, or ``None``), added to the description; ``{"description": "no tensor
    differs in steps 0-<last_step>"}`` if none differs."""
    found = first_difference(standalone, distributed, noise_floor)
    if found is None:
        return {"description": f"no tensor differs in steps 0-{last_step}"}
    if found["rel_diff"] < ROUNDING_REL:
        beyond = first_difference(standalone, distributed, noise_floor, min_rel=ROUNDING_REL)
        found["beyond_rounding"] = beyond
        found["description"] += (f"; first beyond rounding (rel >= {ROUNDING_REL:g}): " + beyond["description"]
                                 if beyond else f"; rounding only (rel < {ROUNDING_REL:g}) in steps 0-{last_step}")
    return found


def describe(found: Dict[str, Any]) -> str:
    """``layer1.bias grad at step 3, abs 1e-05, rel 2e-3; weights identical before``."""
    text = f"{found['name']} {found['kind']} at step {found['step']}, abs {found['abs_diff']:.3g}, " \
           f"rel {found['rel_diff']:.3g}"
    if found["kind"] == "grad":
        text += "; weights identical before" if found["step"] > 0 else "; the first gradient (initial weights equal)"
    else:
        text += "; gradients of that step identical"
    return text
