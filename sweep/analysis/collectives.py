"""The distributed copy's collectives and optimizer, held against what the config implies.

The ledger (``sweep.engines.collectives``: every ``torch.distributed`` call a copy made,
op, dtype, element count, group, reduce op, and FSDP2's divide factors) is checked
against the engine's expectation (``TorchEngine.expected_collectives``: the reduce and
gather dtypes of the ``MixedPrecisionPolicy``, the groups of the ``DeviceMesh``'s dims, a
mean over the data-parallel degree, one reduction per unit per optimizer step) by
:func:`ledger_notes`; the optimizer's hyper-parameters as it ran
(``sweep.train.observers.optimizer_log``) against the ``optimizer`` section by
:func:`optimizer_notes`. Every mismatch is one note (``sweep.notes.Note``: its code and values;
its sentence is the catalog's, ``sweep.findings.notes_catalog.collectives`` and ``.optimizer``).
:func:`scale_causes` names a factor that matches a known cause (a sum where a mean was expected:
``world_size``). Pure numpy.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from sweep.records import Note, note

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


def scale_causes(ratio: float, known: Dict[str, float]) -> Optional[Dict[str, Any]]:
    """The known factors ``ratio`` equals (within :data:`SCALE_TOL`), as text: ``known``
    maps a name (``world_size``, ``grad_accum_steps``, ``the replicate degree``) to its
    value (only values > 1 count): ``{"ratio": the factor matched, "factors": its names,
    "causes": what each means}`` (``x4 = world_size: a sum where a mean was expected``;
    ``x0.25 = 1/world_size: divided by world_size twice``). Where several factors are
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
        return _product_causes(ratio, {n: v for n, v in known.items() if v is not None and v > 1})
    return {"ratio": shown, "factors": names, "causes": whys}


def _product_causes(ratio: float, known: Dict[str, float]) -> Optional[Dict[str, Any]]:
    """:func:`scale_causes` where no one factor matches: the products of two known factors
    (``x0.25 = 1/(world_size * grad_accum_steps)``: the loss divided by the micro-batch count and
    the gradients by world_size once more each), every pair that matches; ``None`` if none."""
    names, whys, shown = [], [], None
    items = list(known.items())
    for i, (a, x) in enumerate(items):
        for b, y in items[i + 1:]:
            for factor, text, why in ((x * y, f"{a} * {b}", f"summed over both {a} and {b}, not averaged"),
                                      (1 / (x * y), f"1/({a} * {b})", f"divided by both {a} and {b} twice")):
                if abs(ratio - factor) <= SCALE_TOL * factor:
                    shown = factor if shown is None else shown
                    names.append(text)
                    whys.append(why)
    return {"ratio": shown, "factors": names, "causes": whys} if names else None


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
                 world_size: int) -> List[Note]:
    """Every way ``entries`` (one rank's ledger) departs from ``expected`` (the engine's
    ``expected_collectives``; ``None``: no contract, no notes), one note each, each once,
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
    # a call in the clip span given a gradient itself reduces it (by hand): not the norm, one of the reductions below
    found = clip_notes([e for e in entries if e.get("params_from") != "grad"], expected.get("clip"), groups,
                       world_size)
    entries = [e for e in entries if e.get("span") != "clip" or e.get("params_from") == "grad"]
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
                world_size: int) -> List[Note]:
    """Each ``kind`` call of more than one element (``entries``: the ledger without the
    ``clip`` span) in a dtype not in ``want["dtypes"]`` (``want``: the contract's entry for
    ``kind``), or over a group other than ``want["groups"]`` (names) where given, else other
    than the ``want["dim"]`` group (an all-reduce, or a group of one of ``want["sizes"]``'s
    sizes, FSDP2's ``reshard_after_forward=k`` gathers, excepted)."""
    notes: List[Note] = []
    members = groups.get(want["dim"], [])
    for e in (e for e in entries if e["op"].startswith(kind) and int(e.get("numel") or 0) > 1):
        where = group_name(e["group"], groups, world_size, with_ranks=False)
        if e.get("dtype") not in want["dtypes"]:
            notes.append(note("N101", op=kind, dtype=e["dtype"], group=where, expected=list(want["dtypes"]),
                              why=want["why"]))
        # reshard_after_forward=k also gathers over groups of k ranks (FSDP2), listed in "sizes"
        other = len(e["group"]) in (want.get("sizes") or []) and len(e["group"]) != len(members)
        if want.get("groups") is not None:  # the engine names every group a call may use
            if where not in want["groups"]:
                notes.append(note("N102", op=kind, group=where, expected=list(want["groups"])))
        elif sorted(e["group"]) != sorted(members) and kind != "all_reduce" and not other:
            notes.append(note("N102", op=kind, group=where, expected=[want["dim"]]))
    return notes


def _missing_notes(entries: Sequence[Dict[str, Any]], kind: str, want: Dict[str, Any], members: List[int],
                   steps: Sequence[int]) -> List[Note]:
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
            return [note("N103" if kind == "all_reduce" else "N104", op=kind, dim=want["dim"], step=int(step))]
    return []


def _divide_notes(entries: Sequence[Dict[str, Any]], expected: Dict[str, Any], world_size: int) -> List[Note]:
    """Each ``divide_factors`` entry whose total divisor (:func:`_effective_divide`) is not
    the number of ranks it sums over (a mean), with the factor the gradients run at
    (:func:`scale_causes` against ``world_size``, ``grad_accum_steps`` and a 2-D mesh's
    replicate degree)."""
    known = {"world_size": float(world_size), "grad_accum_steps": float(expected.get("grad_accum_steps") or 1),
             "the replicate degree": float(expected["mesh_shape"][0]) if len(expected["mesh_shape"]) == 2 else None}
    notes: List[Note] = []
    for e in (e for e in entries if e["op"] == "divide_factors"):
        # a mean divides by the ranks it sums over; summing over too few ranks is the
        # missing-collective note (:func:`_missing_notes`), not a scale
        got = _effective_divide(e)
        summed = max(len(e.get("reduce_scatter_group") or []), 1) * max(len(e.get("all_reduce_group") or []), 1)
        if got > 0 and abs(got - summed) > 1e-9 * summed:
            ratio, sum_only = summed / got, abs(got - 1) < 1e-9
            found = (None if sum_only else scale_causes(ratio, known)) or {"ratio": ratio, "factors": [], "causes": []}
            notes.append(note("N105", summed=int(summed), divided=float(got), sum_only=sum_only, **found))
    return notes


def _replica_notes(entries: Sequence[Dict[str, Any]], replicate: Optional[Dict[str, Any]],
                   groups: Dict[str, List[int]], steps: Sequence[int]) -> List[Note]:
    """Each step with more all-reduces of more than one element over the replicate dim's
    group (``replicate``: the contract's ``all_reduce`` entry) than gradient reductions that
    all-reduce (divide-factors entries with an ``all_reduce_group``): an all-reduce FSDP2 does
    not make. Stops at the first step without one (``fully_shard`` over a sub-mesh without the
    replicate dim all-reduces nothing: an engine that reduces that dim by hand is judged by the
    parameters its calls carried, ``sweep.analysis.reductions.coverage_notes``)."""
    notes: List[Note] = []
    for step in steps:  # an all-reduce over the replicate dim for each gradient reduction, no more
        reductions = sum(1 for e in entries if e["step"] == step and e["op"] == "divide_factors"
                         and e.get("all_reduce_group", [None]))
        if not replicate or not reductions:
            break
        members = groups.get(replicate["dim"], [])
        extra = [e for e in entries if e["step"] == step and e["op"] == "all_reduce" and int(e.get("numel") or 0) > 1
                 and sorted(e["group"]) == sorted(members)]
        if len(extra) > reductions:
            ops = sorted({str(e.get("reduce_op")) for e in extra})
            notes.append(note("N106", calls=len(extra), dim=replicate["dim"], step=int(step), reductions=reductions,
                              ops=ops))
    return notes


def _unit_notes(entries: Sequence[Dict[str, Any]], expected: Dict[str, Any], steps: Sequence[int]) -> List[Note]:
    """Each step with more gradient reductions (divide-factors entries) than the contract's
    ``units`` (``fully_shard`` units): gradient sync not off between micro-batches with
    ``grad_accum_steps`` > 1, else a unit that reduces more than once."""
    units = int(expected.get("units") or 0)
    notes: List[Note] = []
    for step in steps:
        count = _reductions_in(entries, step)
        if units and count > units:
            accum = int(expected.get("grad_accum_steps") or 1)
            notes.append(note("N107", count=count, step=int(step), units=units, accum=accum) if accum > 1 else
                         note("N108", count=count, step=int(step), units=units))
    return notes


def _reductions_in(entries: Sequence[Dict[str, Any]], step: int) -> int:
    """The gradient reductions of ``step``: its divide-factors entries (FSDP2 makes one a reduction)."""
    return sum(1 for e in entries if e["step"] == step and e["op"] == "divide_factors")


def synced_micro_batches(entries: Sequence[Dict[str, Any]], expected: Optional[Dict[str, Any]]) -> set:
    """The steps whose micro-batches each reduced their gradients (``N107``'s: more reductions than
    ``fully_shard`` units with ``grad_accum_steps`` > 1, gradient sync not off between them): such a
    step's result is the sum of its micro-batches' means, not one reduction of the accumulated local
    gradients, which is what ``sweep.analysis.reductions`` holds the values against."""
    units = int((expected or {}).get("units") or 0)
    if not units or int((expected or {}).get("grad_accum_steps") or 1) <= 1:
        return set()
    steps = {int(e["step"]) for e in entries if e["op"] == "divide_factors"}
    return {step for step in steps if _reductions_in(entries, step) > units}


def clip_notes(entries: Sequence[Dict[str, Any]], want: Optional[Dict[str, Any]], groups: Dict[str, List[int]],
               world_size: int) -> List[Note]:
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
    notes: List[Note] = []
    allowed = list(want["groups"])
    steps = sorted({int(e["step"]) for e in entries if e["op"] != "divide_factors"})
    for step in steps:
        calls = [e for e in entries if e["step"] == step and e.get("span") == "clip" and e["op"] == "all_reduce"]
        if not calls and int(want.get("size") or 1) > 1:
            notes.append(note("N109", step=int(step), expected=allowed, why=want["why"]))
            break
        wrong = [e for e in calls if group_name(e["group"], groups, world_size, with_ranks=False) not in allowed]
        if wrong:
            e = wrong[0]
            where = group_name(e["group"], groups, world_size, with_ranks=False)
            members = [m for name in allowed for m in groups.get(name, [])] or list(range(world_size))
            times = len(e["group"]) / max(len(set(members)), 1)
            over = set(members) < set(e["group"]) and times == int(times)
            notes.append(note("N110", step=int(step), group=where, reduce_op=str(e.get("reduce_op")),
                              numel=str(e.get("numel")), expected=allowed, why=want["why"], shard=allowed[0],
                              times=float(times) if over else None, norm_factor=math.sqrt(times) if over else None))
            break
    return notes


def ledger_summary(entries: Sequence[Dict[str, Any]], rank: int, world_size: int,
                   expected: Optional[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The ledger's calls folded by ``(step, op, dtype, group, reduce_op)`` with their count
    and element total: ``[{"step", "span", "op", "dtype", "group": name, "reduce_op", "calls",
    "numel"}]`` (``span``: the part of the step, ``grads``, ``clip`` or ``update``; ``"given_grads"``:
    how many of the calls were given a parameter's gradient itself, where any) (divide-factor entries
    left out), for the record and ``sweep.load_trace``."""
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
        if e.get("params_from") == "grad":  # calls given a parameter's gradient itself (an engine's own, by hand)
            row["given_grads"] = row.get("given_grads", 0) + 1
    return list(folded.values())


OPTIMIZER_FIELDS = {"adam": ("lr", "betas", "eps", "weight_decay"), "adamw": ("lr", "betas", "eps", "weight_decay"),
                    "sgd": ("lr", "momentum", "weight_decay")}


def optimizer_notes(ran: Dict[str, Sequence[Dict[str, Any]]], configured: Dict[str, Any]) -> List[Note]:
    """Each hyper-parameter a copy's optimizer held at step 0 (``ran``: ``{copy: [param
    group entries]}``) that differs from ``configured`` (the ``optimizer`` section;
    relative tolerance 1e-6, a float32 round trip), one note each (``N120``: ``optimizer eps ran
    1e-05 in the distributed copy (param group 0), configured 1e-08``)."""
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
                    show = (lambda v: [float(x) for x in v]) if got.size > 1 else (lambda v: float(v[0]))
                    notes.append(note("N120", key=key, ran=show(got), copy=copy, group=group.get("group", 0),
                                      configured=show(want)))
    return notes


def decay_notes(decay: Dict[str, Dict[str, float]]) -> List[Note]:
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
    shown = [{"name": n, "distributed": float(theirs[n]), "standalone": float(ours[n])} for n in differ[:4]]
    return [note("N121", parameters=shown, more=max(len(differ) - 4, 0))]


def held_notes(decay: Dict[str, Dict[str, float]]) -> List[Note]:
    """Where one copy's optimizer holds parameters the other's does not (``decay``: ``{copy:
    {parameter: weight decay}}``, every parameter each copy's optimizer held at step 0,
    ``sweep.train.observers.optimizer_log``): one note (``N131``) per copy that lacks some,
    naming them (the first 4); ``[]`` with one copy's unknown, where they hold the same, or where
    their names do not line up (fewer shared than either lacks: another naming, not a parameter
    left out)."""
    ours, theirs = (decay or {}).get("standalone"), (decay or {}).get("distributed")
    if not ours or not theirs:
        return []
    found, shared = [], set(ours) & set(theirs)
    for copy, lacks in (("distributed", sorted(set(ours) - set(theirs))),
                        ("standalone", sorted(set(theirs) - set(ours)))):
        if lacks and len(lacks) < len(shared):
            found.append(note("N131", copy=copy, parameters=lacks[:4], more=max(len(lacks) - 4, 0)))
    return found


def loss_scale_notes(scales: Dict[str, Any], want: Optional[float]) -> List[Note]:
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
            notes.append(note("N122", ran=None if got is None else float(got), copy=copy,
                              configured=None if want is None else float(want)))
    return notes


LR_REL = 1e-6  # lrs that differ by more than this, relative, differ (a float32 round trip is 6e-8)


def _same(a: float, b: float) -> bool:
    return abs(float(a) - float(b)) <= LR_REL * max(abs(float(a)), abs(float(b)), 1e-30)


def lr_cause(standalone: Sequence[float], distributed: Sequence[float], step: int) -> Tuple[str, Dict[str, Any]]:
    """Why the distributed lrs depart from the standalone ones from ``step``, from what differs, as
    the code of the lr note that says it and its values: a schedule that runs ``k`` steps ahead of
    (``N124``) or behind (``N125``) the other's (a scheduler stepped more or less often), an lr that
    stops moving where the other's moves (``N126``, ``N127``: a scheduler that does not step), a
    constant ratio (``N128``: a scaled lr), a span of steps after which they agree again (``N123``),
    or, where none fits, another schedule (``N129``). The sequences hold the lr each update read."""
    a, b = [float(x) for x in standalone], [float(x) for x in distributed]
    n = min(len(a), len(b))
    differ = [t for t in range(step, n) if not _same(a[t], b[t])]
    if differ and differ[-1] < n - 1 and differ == list(range(differ[0], differ[-1] + 1)):
        ratios = sorted({round(b[t] / a[t], 6) for t in differ if a[t]})
        return "N123", {"first": differ[0], "last": differ[-1], "after": differ[-1] + 1,
                        "ratio": ratios[0] if len(ratios) == 1 else None}
    for k in (1, 2, 3, -1, -2, -3):
        pairs = [(b[t], a[t + k]) for t in range(step, n) if 0 <= t + k < len(a)]
        if len(pairs) >= 2 and all(_same(x, y) for x, y in pairs):
            return ("N124" if k > 0 else "N125"), {"steps": abs(k)}
    tail_b, tail_a = b[step:n], a[step:n]
    if len(tail_b) >= 2 and all(_same(x, tail_b[0]) for x in tail_b) and not all(_same(x, tail_a[0]) for x in tail_a):
        return "N126", {}
    if len(tail_a) >= 2 and all(_same(x, tail_a[0]) for x in tail_a) and not all(_same(x, tail_b[0]) for x in tail_b):
        return "N127", {}
    ratios = [y / x for x, y in zip(tail_a, tail_b) if x]
    if len(ratios) >= 2 and all(abs(r - ratios[0]) <= 1e-6 * abs(ratios[0]) for r in ratios):
        return "N128", {"ratio": ratios[0]}
    return "N129", {}


def lr_notes(standalone: Optional[Sequence[float]], distributed: Optional[Sequence[float]]) -> List[Note]:
    """The first step at which the two copies' lrs as they ran differ (``features.lr``: a
    float a step, param group 0, read after each update), as one note with both values and
    the cause read from how they differ (:func:`lr_cause`: ``lr differs from step 3:
    distributed 0.0005, standalone 0.001 (the distributed copy's schedule runs 1 step ahead of
    the standalone one: ...)``); ``[]`` when they agree or one copy's lrs are unknown. A schedule
    fault whose step 0 is right is named at its step. Lrs recorded for other numbers of steps:
    ``N130``."""
    if not standalone or not distributed:
        return []
    for step, (a, b) in enumerate(zip(standalone, distributed)):
        if not _same(a, b):
            code, cause = lr_cause(standalone, distributed, step)
            return [note(code, step=step, distributed=float(b), standalone=float(a), **cause)]
    if len(standalone) != len(distributed):
        return [note("N130", distributed=len(distributed), standalone=len(standalone))]
    return []
