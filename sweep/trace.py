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


def first_difference(standalone: Trace, distributed: Trace, noise_floor: float = 0.0) -> Optional[Dict[str, Any]]:
    """The first ``(step, kind, name)`` whose two tensors differ by more than
    ``noise_floor`` (max absolute difference), in trace order (names sorted within a
    kind), or ``None`` if none does.

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
                before = step > 0 or kind == "weight"
                found = {"step": step, "kind": kind, "name": name, "abs_diff": diff, "rel_diff": rel,
                         "weights_identical_before": before}
                found["description"] = describe(found)
                return found
    return None


def describe(found: Dict[str, Any]) -> str:
    """``layer1.bias grad at step 3, abs 1e-05, rel 2e-3; weights identical before``."""
    text = f"{found['name']} {found['kind']} at step {found['step']}, abs {found['abs_diff']:.3g}, " \
           f"rel {found['rel_diff']:.3g}"
    if found["kind"] == "grad":
        text += "; weights identical before" if found["step"] > 0 else "; the first gradient (initial weights equal)"
    else:
        text += "; gradients of that step identical"
    return text
