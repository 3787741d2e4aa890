"""The first module that differs: the two copies' module traces (``sweep.train.observers
.module_trace``: per step, every module's forward input and output and the gradient of each
output, as summaries with a row-complete sample) compared module by module.

The rule, per traced step, forward before backward:

- **forward**: in execution order (a module is recorded when its forward returns, so a
  child before its parent), the first module whose output differs beyond rounding
  (relative difference >= ``sweep.analysis.trace.ROUNDING_REL``) while its input agrees
  within it. That module's own computation (its weights as gathered, its casts, its
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
rows ``[r b, (r + 1) b)`` of the standalone copy's (``sweep.models.data``). Relative
difference: ``max |a - b| / max |a|`` over the compared samples (``inf`` for a zero
standalone tensor that differs, or for a shape that does not fit). Pure numpy.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from sweep.analysis.trace import ROUNDING_REL

Steps = Sequence[Dict[str, List[Dict[str, Any]]]]


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
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    scale = float(np.max(np.abs(a))) if a.size else 0.0
    return diff, (diff / scale if scale > 0 else (float("inf") if diff > 0 else 0.0))


def compare_modules(standalone: Steps, distributed: Steps, rank: int = 0, sharded: bool = False) -> Dict[str, Any]:
    """The first module that differs (module docstring) and every comparison made.

    Returns ``{"first": None or {"step", "phase": "forward" | "backward", "module", "call",
    "rel_in", "rel_out", "abs_out", "description"}, "rows": [{"step", "phase", "order",
    "module", "call", "abs_in", "rel_in", "abs", "rel", "shape", "dtype_standalone",
    "dtype_distributed"}], "description": str}``; in a backward ``first``, ``module`` is
    the module whose backward produced the differing gradient (``"(loss)"`` for the
    first gradient) and ``"gradient_of"`` the module whose output's gradient differs."""
    rows: List[Dict[str, Any]] = []
    first: Optional[Dict[str, Any]] = None
    steps = min(len(standalone), len(distributed))
    for step in range(steps):
        ours, theirs = standalone[step], distributed[step]
        for phase, field in (("forward", "output"), ("backward", "grad")):
            order, b_out = _joined(theirs[phase], field)
            _, a_out = _joined(ours[phase], field)
            a_in = _joined(ours[phase], "input")[1] if phase == "forward" else {}
            b_in = _joined(theirs[phase], "input")[1] if phase == "forward" else {}
            meta_a = {(e["module"], e["call"]): e.get(field) for e in ours[phase]}
            meta_b = {(e["module"], e["call"]): e.get(field) for e in theirs[phase]}
            previous_equal: Optional[tuple] = None
            parted = False  # some earlier module's output differs beyond rounding
            for i, key in enumerate(order):
                abs_out, rel_out = relative_difference(a_out.get(key), b_out.get(key), rank, sharded,
                                                       gradient=phase == "backward")
                abs_in, rel_in = relative_difference(a_in.get(key), b_in.get(key), rank, sharded) \
                    if phase == "forward" else (None, None)
                rows.append({"step": step, "phase": phase, "order": i, "module": key[0], "call": key[1],
                             "abs_in": abs_in, "rel_in": rel_in, "abs": abs_out, "rel": rel_out,
                             "shape": (meta_b.get(key) or {}).get("shape"),
                             "dtype_standalone": (meta_a.get(key) or {}).get("dtype"),
                             "dtype_distributed": (meta_b.get(key) or {}).get("dtype")})
                if first is not None or rel_out is None:
                    continue
                if phase == "forward" and rel_in is not None and rel_in >= ROUNDING_REL and not parted:
                    first = {"step": step, "phase": phase, "module": key[0], "call": key[1], "rel_in": rel_in,
                             "rel_out": rel_out, "abs_out": abs_out, "where": "input"}
                    continue
                if rel_out >= ROUNDING_REL:
                    parted = True
                if rel_out < ROUNDING_REL:
                    # a parent whose output is its last child's (same tensor, same gradient) does not
                    # replace that child as the module whose backward runs next
                    if previous_equal is None or not _encloses(key[0], previous_equal[0]):
                        previous_equal = key
                    continue
                if phase == "forward" and (rel_in is None or rel_in < ROUNDING_REL):
                    first = {"step": step, "phase": phase, "module": key[0], "call": key[1], "rel_in": rel_in,
                             "rel_out": rel_out, "abs_out": abs_out}
                elif phase == "backward":
                    maker = previous_equal[0] if previous_equal else "(loss)"
                    first = {"step": step, "phase": phase, "module": maker, "gradient_of": key[0],
                             "call": key[1], "rel_in": None, "rel_out": rel_out, "abs_out": abs_out}
            if first is not None:
                first["description"] = describe(first)
                return {"first": first, "rows": rows, "description": first["description"]}
    last = steps - 1
    return {"first": None, "rows": rows,
            "description": (f"every module's forward output and output gradient agree within rounding in steps "
                            f"0-{last}: the copies part after the backward (in the reduction, clipping or the "
                            "optimizer step)") if steps else "no module trace recorded"}


def _encloses(parent: str, child: str) -> bool:
    """Whether module ``parent`` contains module ``child`` (the root contains every one)."""
    return parent == "(model)" or child.startswith(parent + ".")


def describe(first: Dict[str, Any]) -> str:
    """``layer1 forward output at step 0, inputs equal, rel 1e-03``, or for backward
    ``layer1 backward at step 0: the gradient of its output agrees, the gradient it
    produced (layer0's output) differs, rel 2e-03``."""
    call = f" (call {first['call'] + 1})" if first.get("call") else ""
    if first.get("where") == "input":
        return (f"{first['module']}{call} input at step {first['step']} differs, rel {first['rel_in']:.2g}, while "
                f"every module before it agrees: it arises before {first['module']}'s forward (a pre-forward hook, "
                "e.g. FSDP2 casting inputs to param_dtype, or its parent's code)")
    if first["phase"] == "forward":
        inputs = "inputs equal" if first.get("rel_in") is not None else "inputs not recorded"
        return f"{first['module']}{call} forward output at step {first['step']}, {inputs}, rel {first['rel_out']:.2g}"
    if first["module"] == "(loss)":
        return (f"the loss's gradient at step {first['step']} ({first['gradient_of']}'s output) differs, "
                f"rel {first['rel_out']:.2g}, though every forward output agrees")
    return (f"{first['module']} backward at step {first['step']}: the gradient of its output agrees, the next "
            f"gradient autograd produced ({first['gradient_of']}'s output{call}) differs, rel {first['rel_out']:.2g}")


def first_over_ranks(found: Sequence[Tuple[Dict[str, Any], int]]) -> Optional[Dict[str, Any]]:
    """The job's first module over its ranks' (``[(first, rank)]``, ``first`` from
    :func:`compare_modules`): the earliest ``(step, phase)``, with ``rank`` (the lowest
    such) and ``ranks`` (every rank naming the same module then); ``None`` if no rank
    names one."""
    hits = [(f, r) for f, r in found if f]
    if not hits:
        return None
    key = lambda item: (item[0]["step"], item[0]["phase"] != "forward", item[1])  # noqa: E731
    best, rank = min(hits, key=key)
    same = sorted(r for f, r in hits if (f["step"], f["phase"], f["module"]) ==
                  (best["step"], best["phase"], best["module"]))
    out = dict(best, rank=rank, ranks=same)
    every = len(same) == len(found) and len(found) > 1
    out["description"] = best["description"] + (" (every rank)" if every else
                                                f" (rank{'s' if len(same) > 1 else ''} {', '.join(map(str, same))})")
    return out
