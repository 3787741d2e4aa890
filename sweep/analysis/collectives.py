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
    ``expected_collectives``; ``None``: no contract, no notes), one sentence each, each once,
    in this order: the clipping norm's reduction (:func:`clip_notes`); per kind
    (reduce-scatter, all-reduce, all-gather), a call in a dtype the policy does not give or
    over a group that is not the mesh dim's, then a dim never reduced over
    (:func:`_call_notes`, :func:`_missing_notes`); gradients divided by other than the
    data-parallel degree (:func:`_divide_notes`, named by :func:`scale_signature`); more
    all-reduces over the replicate dim than gradient reductions (:func:`_replica_notes`);
    more reductions per step than units, gradient sync not off between micro-batches
    (:func:`_unit_notes`)."""
    if not expected:
        return []
    groups = dim_groups(expected["mesh_shape"], expected["mesh_dim_names"], rank)
    steps = sorted({int(e["step"]) for e in entries})
    found = clip_notes(entries, expected.get("clip"), groups, world_size)
    entries = [e for e in entries if e.get("span") != "clip"]  # the gradients' own reductions below
    for kind in ("reduce_scatter", "all_reduce", "all_gather"):
        want = expected.get(kind)
        if want:
            found += _call_notes(entries, kind, want, groups, world_size)
            found += _missing_notes(entries, kind, want, groups.get(want["dim"], []), steps)
    found += _divide_notes(entries, expected, world_size)
    found += _replica_notes(entries, expected.get("all_reduce"), groups, steps)
    found += _unit_notes(entries, expected, steps)
    return list(dict.fromkeys(found))  # each note once, in first-seen order


def _call_notes(entries: Sequence[Dict[str, Any]], kind: str, want: Dict[str, Any], groups: Dict[str, List[int]],
                world_size: int) -> List[str]:
    """Each ``kind`` call of more than one element (``entries``: the ledger without the
    ``clip`` span) in a dtype not in ``want["dtypes"]`` (``want``: the contract's entry for
    ``kind``), or over a group other than ``want["groups"]`` (names) where given, else other
    than the ``want["dim"]`` group (an all-reduce, or a group of one of ``want["sizes"]``'s
    sizes, FSDP2's ``reshard_after_forward=k`` gathers, excepted)."""
    notes: List[str] = []
    members = groups.get(want["dim"], [])
    for e in (e for e in entries if e["op"].startswith(kind) and int(e.get("numel") or 0) > 1):
        where = group_name(e["group"], groups, world_size, with_ranks=False)
        if e.get("dtype") not in want["dtypes"]:
            notes.append(f"{kind} ran in {e['dtype']} over {where}, expected {' or '.join(want['dtypes'])} "
                         f"({want['why']})")
        # reshard_after_forward=k also gathers over groups of k ranks (FSDP2), listed in "sizes"
        other = len(e["group"]) in (want.get("sizes") or []) and len(e["group"]) != len(members)
        if want.get("groups") is not None:  # the engine names every group a call may use
            if where not in want["groups"]:
                notes.append(f"{kind} over {where}, expected the {' or the '.join(want['groups'])} group")
        elif sorted(e["group"]) != sorted(members) and kind != "all_reduce" and not other:
            notes.append(f"{kind} over {where}, expected the {want['dim']} group")
    return notes


def _missing_notes(entries: Sequence[Dict[str, Any]], kind: str, want: Dict[str, Any], members: List[int],
                   steps: Sequence[int]) -> List[str]:
    """The first step (of ``steps``) with no reduce-scatter or all-reduce of more than one
    element over a group that holds ``members`` (the ``want["dim"]`` group's ranks) where
    the step needs one (``kind`` is ``reduce_scatter``, or the step reduced its gradients:
    a reduce-scatter or a divide-factors entry), as one note; ``[]`` for a dim of one rank
    and for ``all_gather``."""
    if want["size"] <= 1 or not steps or kind == "all_gather":
        return []
    for step in steps:
        # any reduction over a group that holds this dim's group reduces over the dim
        # (one reduce-scatter over every rank covers both dims of an HSDP mesh)
        mine = [e for e in entries if e["step"] == step and e["op"].startswith(("reduce_scatter", "all_reduce"))
                and int(e.get("numel") or 0) > 1 and set(members) <= set(e["group"])]
        # any gradient reduction of the step calls for it: a shard dim of size 1 reduce-scatters
        # nothing, FSDP2 still chooses its divide factors (verl's (n, 1) meshes)
        reduced = any(e["step"] == step for e in entries
                      if e["op"].startswith("reduce_scatter") or e["op"] == "divide_factors")
        if not mine and (kind == "reduce_scatter" or reduced):
            return [f"no {kind} over {want['dim']} in step {step}: "
                    + ("the replicas' gradients are never reduced across the replicate dim"
                       if kind == "all_reduce" else "the gradients are never reduced across the shard dim")]
    return []


def _divide_notes(entries: Sequence[Dict[str, Any]], expected: Dict[str, Any], world_size: int) -> List[str]:
    """Each ``divide_factors`` entry whose total divisor (:func:`_effective_divide`) is not
    the number of ranks it sums over (a mean), with the factor the gradients run at
    (:func:`scale_signature` against ``world_size``, ``grad_accum_steps`` and a 2-D mesh's
    replicate degree)."""
    known = {"world_size": float(world_size), "grad_accum_steps": float(expected.get("grad_accum_steps") or 1),
             "the replicate degree": float(expected["mesh_shape"][0]) if len(expected["mesh_shape"]) == 2 else None}
    notes: List[str] = []
    for e in (e for e in entries if e["op"] == "divide_factors"):
        # a mean divides by the ranks it sums over; summing over too few ranks is the
        # missing-collective note (:func:`_missing_notes`), not a scale
        got = _effective_divide(e)
        summed = max(len(e.get("reduce_scatter_group") or []), 1) * max(len(e.get("all_reduce_group") or []), 1)
        if got > 0 and abs(got - summed) > 1e-9 * summed:
            ratio = summed / got
            sig = f"x{ratio:.4g}, the ranks summed: a sum where a mean was expected" if abs(got - 1) < 1e-9 else \
                scale_signature(ratio, known) or f"x{ratio:.4g}"
            notes.append(f"the gradient reduction sums over {summed} ranks and divides by {got:g}, expected a mean "
                         f"(divide by {summed}): the gradients run {sig}")
    return notes


def _replica_notes(entries: Sequence[Dict[str, Any]], replicate: Optional[Dict[str, Any]],
                   groups: Dict[str, List[int]], steps: Sequence[int]) -> List[str]:
    """Each step with more all-reduces of more than one element over the replicate dim's
    group (``replicate``: the contract's ``all_reduce`` entry) than gradient reductions
    (divide-factors entries): an all-reduce FSDP2 does not make. Stops at the first step
    without a gradient reduction."""
    notes: List[str] = []
    for step in steps:  # an all-reduce over the replicate dim for each gradient reduction, no more
        reductions = sum(1 for e in entries if e["step"] == step and e["op"] == "divide_factors")
        if not replicate or not reductions:
            break
        members = groups.get(replicate["dim"], [])
        extra = [e for e in entries if e["step"] == step and e["op"] == "all_reduce" and int(e.get("numel") or 0) > 1
                 and sorted(e["group"]) == sorted(members)]
        if len(extra) > reductions:
            ops = sorted({str(e.get("reduce_op")) for e in extra})
            notes.append(f"{len(extra)} all_reduce calls over {replicate['dim']} in step {step} for {reductions} "
                         f"gradient reduction(s) (reduce_op {', '.join(ops)}): an all-reduce FSDP2 does not make, the "
                         "gradients are reduced across the replicas more than once")
    return notes


def _unit_notes(entries: Sequence[Dict[str, Any]], expected: Dict[str, Any], steps: Sequence[int]) -> List[str]:
    """Each step with more gradient reductions (divide-factors entries) than the contract's
    ``units`` (``fully_shard`` units): gradient sync not off between micro-batches with
    ``grad_accum_steps`` > 1, else a unit that reduces more than once."""
    units = int(expected.get("units") or 0)
    notes: List[str] = []
    for step in steps:
        count = sum(1 for e in entries if e["step"] == step and e["op"] == "divide_factors")
        if units and count > units:
            accum = int(expected.get("grad_accum_steps") or 1)
            notes.append(f"{count} gradient reductions in step {step} for {units} fully_shard unit(s)"
                         + (f" and grad_accum_steps={accum}: gradient sync is not off between micro-batches"
                            if accum > 1 else ": some unit reduces more than once per step"))
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


def decay_notes(decay: Dict[str, Dict[str, float]]) -> List[str]:
    """Where the two copies step a parameter with another weight decay (``decay``: ``{copy:
    {parameter: weight decay}}``, ``sweep.train.observers.optimizer_log``: torch's param
    groups, MindSpore's ``decay_flags``), one note naming the parameters and both values;
    ``[]`` with one copy's unknown or where they agree (relative 1e-6)."""
    ours, theirs = (decay or {}).get("standalone"), (decay or {}).get("distributed")
    if not ours or not theirs:
        return []
    differ = sorted(n for n in set(ours) & set(theirs)
                    if abs(float(ours[n]) - float(theirs[n])) > 1e-6 * max(abs(float(ours[n])), abs(float(theirs[n]))))
    if not differ:
        return []
    shown = ", ".join(f"{n} ({float(theirs[n]):g} against {float(ours[n]):g})" for n in differ[:4])
    more = f" and {len(differ) - 4} more" if len(differ) > 4 else ""
    return [f"weight decay differs between the copies for {shown}{more} (distributed against standalone): the "
            "optimizer decays these parameters otherwise in one copy (its param groups or decay_flags)"]


def loss_scale_notes(scales: Dict[str, Any], want: Optional[float]) -> List[str]:
    """Where a copy's loss scale as its step applied it (``scales``: ``{copy: value}``; torch:
    the gradient scaler's scale at step 0, ``None`` without one; MindSpore: the optimizer's
    ``1 / reciprocal_scale``) departs from ``want`` (``train.grad_scaler.init_scale`` when it is
    enabled, else the framework's unscaled value as its optimizer log says: ``None`` on torch,
    1 on MindSpore, ``sweep.train.observers.optimizer_log``)."""
    notes = []
    for copy in ("distributed", "standalone"):
        got = (scales or {}).get(copy, "absent")
        if got == "absent":
            continue
        same = (got is None and want is None) or (got is not None and want is not None
                                                  and abs(float(got) - float(want)) <= 1e-6 * abs(float(want)))
        if not same:
            shown = "none" if got is None else f"{float(got):g}"
            notes.append(f"loss scale ran {shown} in the {copy} copy, configured "
                         f"{'none' if want is None else f'{float(want):g}'}: the gradients the optimizer steps with "
                         "are divided by it")
    return notes


LR_REL = 1e-6  # lrs that differ by more than this, relative, differ (a float32 round trip is 6e-8)


def _same(a: float, b: float) -> bool:
    return abs(float(a) - float(b)) <= LR_REL * max(abs(float(a)), abs(float(b)), 1e-30)


def lr_cause(standalone: Sequence[float], distributed: Sequence[float], step: int) -> str:
    """Why the distributed lrs depart from the standalone ones from ``step``, from what differs:
    a schedule that runs ``k`` steps ahead of or behind the other's (a scheduler stepped more
    or less often), an lr that stops moving where the other's moves (a scheduler that does not
    step), a constant ratio (a scaled lr: a warmup or base lr otherwise), or, where none fits,
    another schedule. The sequences hold the lr each update read."""
    a, b = [float(x) for x in standalone], [float(x) for x in distributed]
    n = min(len(a), len(b))
    differ = [t for t in range(step, n) if not _same(a[t], b[t])]
    if differ and differ[-1] < n - 1 and differ == list(range(differ[0], differ[-1] + 1)):
        ratios = sorted({round(b[t] / a[t], 6) for t in differ if a[t]})
        scale = f" (x{ratios[0]:g})" if len(ratios) == 1 else ""
        span = f"step {differ[0]}" if len(differ) == 1 else f"steps {differ[0]}-{differ[-1]}"
        return (f"at {span} only{scale}, equal again from step {differ[-1] + 1}: the lr was changed for "
                f"{'that step' if len(differ) == 1 else 'those steps'} in one copy, the schedule itself agrees")
    for k in (1, 2, 3, -1, -2, -3):
        pairs = [(b[t], a[t + k]) for t in range(step, n) if 0 <= t + k < len(a)]
        if len(pairs) >= 2 and all(_same(x, y) for x, y in pairs):
            ahead = k > 0
            return (f"the distributed copy's schedule runs {abs(k)} step{'s' if abs(k) > 1 else ''} "
                    f"{'ahead of' if ahead else 'behind'} the standalone one: its scheduler stepped "
                    f"{'more' if ahead else 'less'} often ({'an extra' if ahead else 'a skipped'} scheduler.step())")
    tail_b, tail_a = b[step:n], a[step:n]
    if len(tail_b) >= 2 and all(_same(x, tail_b[0]) for x in tail_b) and not all(_same(x, tail_a[0]) for x in tail_a):
        return "the distributed copy's lr stops moving while the standalone one's follows its schedule: its " \
               "scheduler does not step"
    if len(tail_a) >= 2 and all(_same(x, tail_a[0]) for x in tail_a) and not all(_same(x, tail_b[0]) for x in tail_b):
        return "the standalone copy's lr stays put while the distributed one's moves: a scheduler steps only in the " \
               "distributed copy"
    ratios = [y / x for x, y in zip(tail_a, tail_b) if x]
    if len(ratios) >= 2 and all(abs(r - ratios[0]) <= 1e-6 * abs(ratios[0]) for r in ratios):
        return f"the distributed lr is x{ratios[0]:.4g} the standalone one at every step from there: a scaled lr " \
               "(base lr, or a factor applied in one copy)"
    return "the copies' schedules differ in shape: another schedule in one copy"


def lr_notes(standalone: Optional[Sequence[float]], distributed: Optional[Sequence[float]]) -> List[str]:
    """The first step at which the two copies' lrs as they ran differ (``features.lr``: a
    float a step, param group 0, read after each update), as one note with both values and
    the cause read from how they differ (:func:`lr_cause`): ``lr differs from step 3:
    distributed 0.0005, standalone 0.001 (the distributed copy's schedule runs 1 step ahead of
    the standalone one: ...)``; ``[]`` when they agree or one copy's lrs are unknown. A schedule
    fault whose step 0 is right is named at its step."""
    if not standalone or not distributed:
        return []
    for step, (a, b) in enumerate(zip(standalone, distributed)):
        if not _same(a, b):
            return [f"lr differs from step {step}: distributed {float(b):.6g}, standalone {float(a):.6g} "
                    f"({lr_cause(standalone, distributed, step)})"]
    if len(standalone) != len(distributed):
        return [f"lr recorded for {len(distributed)} steps in the distributed copy, {len(standalone)} in the "
                "standalone one"]
    return []
