"""The distributed copy's collectives and optimizer, held against what the config implies.

The ledger (``sweep.engines.collectives``: every ``torch.distributed`` call a copy made,
op, dtype, element count, group, reduce op, and FSDP2's divide factors) is checked
against the engine's expectation (``TorchEngine.expected_collectives``: the reduce and
gather dtypes of the ``MixedPrecisionPolicy``, the groups of the ``DeviceMesh``'s dims, a
mean over the data-parallel degree, one reduction per unit per optimizer step) by
:func:`ledger_notes`; the optimizer's hyper-parameters as it ran
(``sweep.train.observers.optimizer_log``) against the ``optimizer`` section by
:func:`optimizer_notes`. Every mismatch is one note (no ``"; "`` inside: the report splits
notes on it). :func:`scale_signature` names a factor that matches a known cause (a sum
where a mean was expected: ``world_size``). Pure numpy.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

SCALE_TOL = 1e-3  # a ratio within this relative distance of a known factor is that factor


def dim_groups(mesh_shape: Sequence[int], mesh_dim_names: Sequence[str], rank: int) -> Dict[str, List[int]]:
    """The ranks of ``rank``'s group along each mesh dim: ``{dim name: [ranks]}`` for a
    row-major ``DeviceMesh`` of consecutive ranks (``init_device_mesh``'s layout), e.g.
    ``(2, 2)``, rank 1: ``{"dp_replicate": [1, 3], "dp_shard": [0, 1]}``."""
    shape = tuple(int(n) for n in mesh_shape)
    grid = np.arange(int(np.prod(shape))).reshape(shape)
    where = np.unravel_index(int(rank), shape)
    out = {}
    for d, name in enumerate(mesh_dim_names):
        index = list(where)
        index[d] = slice(None)
        out[str(name)] = [int(r) for r in grid[tuple(index)].ravel()]
    return out


def group_name(ranks: Sequence[int], groups: Dict[str, List[int]], world_size: int,
               with_ranks: bool = True) -> str:
    """``dp_shard (ranks 0, 1)`` (``with_ranks=False``: ``dp_shard``, the same text on
    every rank), ``world``, or ``ranks 0, 2`` for a group that is no mesh dim's."""
    listed = ", ".join(map(str, ranks))
    for name, members in groups.items():
        if sorted(members) == sorted(ranks):
            return f"{name} (ranks {listed})" if with_ranks else name
    if sorted(ranks) == list(range(world_size)):
        return f"world (ranks {listed})" if with_ranks else "world"
    return f"ranks {listed}"


def scale_signature(ratio: float, known: Dict[str, float]) -> Optional[str]:
    """The known factors ``ratio`` equals (within :data:`SCALE_TOL`), as text: ``known``
    maps a name (``world_size``, ``grad_accum_steps``, ``the replicate degree``) to its
    value (only values > 1 count). ``x4 = world_size: a sum where a mean was expected``;
    ``x0.25 = 1/world_size: divided by world_size twice``. Where several factors are
    equal (``world_size = grad_accum_steps = 2``) every one that matches is named, in
    ``known``'s order, joined by ``or``: the ratio alone cannot tell them apart, and the
    sweep's contrasts (the factor whose levels change the drift) decide. ``None`` if none
    matches."""
    if not (ratio > 0 and math.isfinite(ratio)):
        return None
    causes = {"world_size": ("a sum where a mean was expected", "divided by world_size twice"),
              "grad_accum_steps": ("the micro-batch losses summed, not averaged",
                                   "the loss divided by the micro-batch count twice"),
              "the replicate degree": ("the mean does not include the replicate dim",
                                       "divided by the replicate degree twice")}
    names, whys, shown = [], [], None
    for name, value in known.items():
        if value is None or value <= 1:
            continue
        for factor, text, which in ((value, name, 0), (1 / value, f"1/{name}", 1)):
            if abs(ratio - factor) <= SCALE_TOL * factor:
                shown = factor if shown is None else shown
                names.append(text)
                why = causes.get(name, ("", ""))[which]
                if why:
                    whys.append(why)
    if not names:
        return None
    return f"x{shown:.4g} = {' or '.join(names)}" + (f": {', or '.join(whys)}" if whys else "")


def _effective_divide(entry: Dict[str, Any]) -> float:
    """What a ``divide_factors`` entry divides the sum of the gradients by, in all: the
    pre- and post-divide factors, times the group size for an ``AVG`` reduction and the
    factor of a ``PREMUL_SUM`` (``_get_gradient_divide_factors``'s contract)."""
    out = float(entry.get("predivide") or 1.0) * float(entry.get("postdivide") or 1.0)
    if entry.get("reduce_scatter_op") == "AVG":
        out *= max(len(entry.get("reduce_scatter_group") or []), 1)
    elif entry.get("reduce_scatter_op") == "PREMUL_SUM" and entry.get("factor"):
        out *= float(entry["factor"])
    if entry.get("all_reduce_op") == "AVG" and entry.get("all_reduce_group"):
        out *= len(entry["all_reduce_group"])
    return out


def ledger_notes(entries: Sequence[Dict[str, Any]], expected: Optional[Dict[str, Any]], rank: int,
                 world_size: int) -> List[str]:
    """Every way ``entries`` (one rank's ledger) departs from ``expected`` (the engine's
    ``expected_collectives``; ``None``: no contract, no notes), one sentence each:
    a reduce-scatter or all-reduce in a dtype the policy does not give, over a group that
    is not the mesh dim's, a replicate dim never all-reduced, gradients divided by other
    than the data-parallel degree (named by :func:`scale_signature`), more reductions per
    step than units (gradient sync not off between micro-batches), an all-gather in
    another dtype than ``param_dtype``, and the clipping norm's reduction
    (:func:`clip_notes`)."""
    if not expected:
        return []
    groups = dim_groups(expected["mesh_shape"], expected["mesh_dim_names"], rank)
    notes: List[str] = []
    steps = sorted({int(e["step"]) for e in entries})

    def add(note: str) -> None:
        if note not in notes:
            notes.append(note)

    for note in clip_notes(entries, expected.get("clip"), groups, world_size):
        add(note)
    entries = [e for e in entries if e.get("span") != "clip"]  # the gradients' own reductions below

    for kind in ("reduce_scatter", "all_reduce", "all_gather"):
        want = expected.get(kind)
        if not want:
            continue
        calls = [e for e in entries if e["op"].startswith(kind) and int(e.get("numel") or 0) > 1]
        members = groups.get(want["dim"], [])
        for e in calls:
            where = group_name(e["group"], groups, world_size, with_ranks=False)
            if e.get("dtype") not in want["dtypes"]:
                add(f"{kind} ran in {e['dtype']} over {where}, expected {' or '.join(want['dtypes'])} "
                    f"({want['why']})")
            # reshard_after_forward=k also gathers over groups of k ranks (FSDP2), listed in "sizes"
            other = len(e["group"]) in (want.get("sizes") or []) and len(e["group"]) != len(members)
            if want.get("groups") is not None:  # the engine names every group a call may use
                if where not in want["groups"]:
                    add(f"{kind} over {where}, expected the {' or the '.join(want['groups'])} group")
            elif sorted(e["group"]) != sorted(members) and kind != "all_reduce" and not other:
                add(f"{kind} over {where}, expected the {want['dim']} group")
        if want["size"] > 1 and steps and kind != "all_gather":
            for step in steps:
                # any reduction over a group that holds this dim's group reduces over the dim
                # (one reduce-scatter over every rank covers both dims of an HSDP mesh)
                mine = [e for e in entries if e["step"] == step and e["op"].startswith(("reduce_scatter", "all_reduce"))
                        and int(e.get("numel") or 0) > 1 and set(members) <= set(e["group"])]
                reduced = any(e["step"] == step for e in entries if e["op"].startswith("reduce_scatter"))
                if not mine and (kind == "reduce_scatter" or reduced):
                    add(f"no {kind} over {want['dim']} in step {step}: "
                        + ("the replicas' gradients are never reduced across the replicate dim"
                           if kind == "all_reduce" else "the gradients are never reduced across the shard dim"))
                    break
    known = {"world_size": float(world_size), "grad_accum_steps": float(expected.get("grad_accum_steps") or 1),
             "the replicate degree": float(expected["mesh_shape"][0]) if len(expected["mesh_shape"]) == 2 else None}
    for e in (e for e in entries if e["op"] == "divide_factors"):
        # a mean divides by the ranks it sums over; summing over too few ranks is the
        # missing-collective note above, not a scale
        got = _effective_divide(e)
        summed = max(len(e.get("reduce_scatter_group") or []), 1) * max(len(e.get("all_reduce_group") or []), 1)
        if got > 0 and abs(got - summed) > 1e-9 * summed:
            ratio = summed / got
            sig = f"x{ratio:.4g}, the ranks summed: a sum where a mean was expected" if abs(got - 1) < 1e-9 else \
                scale_signature(ratio, known) or f"x{ratio:.4g}"
            add(f"the gradient reduction sums over {summed} ranks and divides by {got:g}, expected a mean "
                f"(divide by {summed}): the gradients run {sig}")
    replicate = expected.get("all_reduce")
    for step in steps:  # an all-reduce over the replicate dim for each gradient reduction, no more
        reductions = sum(1 for e in entries if e["step"] == step and e["op"] == "divide_factors")
        if not replicate or not reductions:
            break
        members = groups.get(replicate["dim"], [])
        extra = [e for e in entries if e["step"] == step and e["op"] == "all_reduce" and int(e.get("numel") or 0) > 1
                 and sorted(e["group"]) == sorted(members)]
        if len(extra) > reductions:
            ops = sorted({str(e.get("reduce_op")) for e in extra})
            add(f"{len(extra)} all_reduce calls over {replicate['dim']} in step {step} for {reductions} gradient "
                f"reduction(s) (reduce_op {', '.join(ops)}): an all-reduce FSDP2 does not make, the gradients are "
                "reduced across the replicas more than once")
    units = int(expected.get("units") or 0)
    for step in steps:
        count = sum(1 for e in entries if e["step"] == step and e["op"] == "divide_factors")
        if units and count > units:
            accum = int(expected.get("grad_accum_steps") or 1)
            add(f"{count} gradient reductions in step {step} for {units} fully_shard unit(s)"
                + (f" and grad_accum_steps={accum}: gradient sync is not off between micro-batches" if accum > 1
                   else ": some unit reduces more than once per step"))
    return notes


def clip_notes(entries: Sequence[Dict[str, Any]], want: Optional[Dict[str, Any]], groups: Dict[str, List[int]],
               world_size: int) -> List[str]:
    """Where the gradient clipping's norm was reduced otherwise than ``want`` (the
    contract's ``clip``: ``{"groups": names a norm's all-reduce may use, "size": ranks a
    full gradient is sharded over, "why"}``; ``None``: no clipping, or none to check),
    from the ledger entries made in the step's ``clip`` span, scalars included (a norm
    is one element): an all-reduce over another group (one that holds the shard group
    ``k`` times over counts each shard ``k`` times: a norm of summed squares runs
    ``x sqrt(k)``), or none at all over sharded gradients (each rank clips by the norm of
    its own shard). One note each, the first step it holds."""
    if not want:
        return []
    notes: List[str] = []
    allowed = list(want["groups"])
    steps = sorted({int(e["step"]) for e in entries if e["op"] != "divide_factors"})
    for step in steps:
        calls = [e for e in entries if e["step"] == step and e.get("span") == "clip" and e["op"] == "all_reduce"]
        if not calls and int(want.get("size") or 1) > 1:
            notes.append(f"the clipping norm of step {step} was never all-reduced: each rank clips by the norm of its "
                         f"own gradient shard, expected an all_reduce over the {' or the '.join(allowed)} group "
                         f"({want['why']})")
            break
        wrong = [e for e in calls if group_name(e["group"], groups, world_size, with_ranks=False) not in allowed]
        if wrong:
            e = wrong[0]
            where = group_name(e["group"], groups, world_size, with_ranks=False)
            members = [m for name in allowed for m in groups.get(name, [])] or list(range(world_size))
            times = len(e["group"]) / max(len(set(members)), 1)
            extra = (f": it holds the {allowed[0]} group {times:g} times over, so each shard is counted {times:g} "
                     f"times and a norm of summed squares runs x{math.sqrt(times):.4g}"
                     if set(members) < set(e["group"]) and times == int(times) else "")
            notes.append(f"the clipping norm of step {step} was all-reduced over {where} (reduce_op "
                         f"{e.get('reduce_op')}, {e.get('numel')} element(s)), expected the "
                         f"{' or the '.join(allowed)} group ({want['why']}){extra}")
            break
    return notes


def ledger_summary(entries: Sequence[Dict[str, Any]], rank: int, world_size: int,
                   expected: Optional[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The ledger's calls folded by ``(step, op, dtype, group, reduce_op)`` with their count
    and element total: ``[{"step", "span", "op", "dtype", "group": name, "reduce_op", "calls",
    "numel"}]`` (``span``: the part of the step, ``grads``, ``clip`` or ``update``) (divide-factor entries left out), for the record and ``sweep.load_trace``."""
    groups = dim_groups(expected["mesh_shape"], expected["mesh_dim_names"], rank) if expected else {}
    folded: Dict[tuple, Dict[str, Any]] = {}
    for e in entries:
        if e["op"] == "divide_factors":
            continue
        key = (e["step"], e.get("span"), e["op"], e.get("dtype"), tuple(e["group"]), e.get("reduce_op"))
        where = group_name(e["group"], groups, world_size) if e["group"] else str(e.get("group_name") or "unknown")
        row = folded.setdefault(key, {"step": e["step"], "span": e.get("span"), "op": e["op"], "dtype": e.get("dtype"),
                                      "group": where,
                                      "reduce_op": e.get("reduce_op"), "calls": 0, "numel": 0})
        row["calls"] += 1
        row["numel"] += int(e.get("numel") or 0)
    return list(folded.values())


OPTIMIZER_FIELDS = {"adam": ("lr", "betas", "eps", "weight_decay"), "adamw": ("lr", "betas", "eps", "weight_decay"),
                    "sgd": ("lr", "momentum", "weight_decay")}


def optimizer_notes(ran: Dict[str, Sequence[Dict[str, Any]]], configured: Dict[str, Any]) -> List[str]:
    """Each hyper-parameter a copy's optimizer held at step 0 (``ran``: ``{copy: [param
    group entries]}``) that differs from ``configured`` (the ``optimizer`` section;
    relative tolerance 1e-6, a float32 round trip), one note each: ``optimizer eps ran
    1e-05 in the distributed copy (param group 0), configured 1e-08``."""
    fields = OPTIMIZER_FIELDS.get(str(configured.get("name")), ())
    notes = []
    for copy, groups in ran.items():
        for group in groups or []:
            for key in fields:
                if key not in group or configured.get(key) is None:
                    continue
                got, want = np.atleast_1d(np.asarray(group[key], np.float64)), \
                    np.atleast_1d(np.asarray(configured[key], np.float64))
                if got.shape != want.shape or not np.allclose(got, want, rtol=1e-6, atol=0.0):
                    show = (lambda v: ", ".join(f"{x:.6g}" for x in v)) if got.size > 1 else (lambda v: f"{v[0]:.6g}")
                    notes.append(f"optimizer {key} ran {show(got)} in the {copy} copy (param group "
                                 f"{group.get('group', 0)}), configured {show(want)}")
    return notes


LR_REL = 1e-6  # lrs that differ by more than this, relative, differ (a float32 round trip is 6e-8)


def lr_notes(standalone: Optional[Sequence[float]], distributed: Optional[Sequence[float]]) -> List[str]:
    """The first step at which the two copies' lrs as they ran differ (``features.lr``: a
    float a step, param group 0, read after each update), as one note with both values:
    ``lr differs from step 3: distributed 0.0005, standalone 0.001 (the copies' schedules
    differ: a scheduler stepped otherwise in one copy)``; ``[]`` when they agree or one copy's
    lrs are unknown. A schedule fault whose step 0 is right is named at its step."""
    if not standalone or not distributed:
        return []
    for step, (a, b) in enumerate(zip(standalone, distributed)):
        if abs(float(a) - float(b)) > LR_REL * max(abs(float(a)), abs(float(b)), 1e-30):
            return [f"lr differs from step {step}: distributed {float(b):.6g}, standalone {float(a):.6g} (the "
                    "copies' schedules differ: a scheduler stepped otherwise in one copy)"]
    if len(standalone) != len(distributed):
        return [f"lr recorded for {len(distributed)} steps in the distributed copy, {len(standalone)} in the "
                "standalone one"]
    return []
