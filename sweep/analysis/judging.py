"""Judging one run of a job: the rules that turn its ranks' comparisons into a verdict.

Pure rules over ``sweep.analysis.compare.Comparison`` and the ranks' results
(``sweep.records.RankResult``): the rank a job is judged by (:func:`worst_rank`), ranks that
disagree with each other (:func:`ranks_apart`), the replicas of each shard held against each
other (:func:`replica_check`, :func:`replica_reason`), the first differing tensor of copies
that do not start equal (:func:`start_tensor`), the reasons a job fails and its status
(:func:`verdict`, over :class:`JudgedLosses` and :class:`Disagreements`), and notes several
ranks share (:func:`ranked_notes`).
``sweep.run.judge`` calls them and records what they return.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from sweep.analysis.compare import Comparison, compare_losses
from sweep.io import read_floats
from sweep.records import Note, NoteLike, RankResult, note, ranks_text


def worst_rank(comparisons: Dict[int, Any]) -> int:
    """The rank a job is judged by (its losses, scale and sign, first steps and class in the
    report): the worst one, not rank 0. Among failing ranks, the earliest first failing
    step, then the largest ``max_abs_diff``; when all pass, the earliest first differing
    step, then the largest ``max_abs_diff``; ties go to the lowest rank.
    ``comparisons``: rank -> ``sweep.analysis.compare.Comparison``.

    Raises:
        ValueError: ``comparisons`` is empty.
    """
    def key(item: Any) -> tuple:
        rank, c = item
        step = c.first_fail_step if not c.passed else c.first_diff_step
        size = float(c.max_abs_diff) if c.max_abs_diff == c.max_abs_diff else 0.0  # nan: no steps
        return (c.passed, step is None, step if step is not None else 0, -size, rank)

    return min(comparisons.items(), key=key)[0]


def ranks_apart(distributed: Sequence[Tuple[int, Sequence[Any]]], rtol: float, atol: float,
                noise_floor: float = 0.0) -> List[Tuple[int, Comparison]]:
    """The ranks whose distributed losses fail against the first rank's
    (``sweep.analysis.compare.compare_losses`` with the job's tolerance; replicated data,
    where every rank computes the same losses): ``[(rank, its comparison with the first)]``
    in the order given, empty when they agree. ``distributed``: ``[(rank, losses)]``, the
    first rank first; losses as recorded (``sweep.io.read_floats``)."""
    if not distributed:
        return []
    first = read_floats(distributed[0][1])
    tol = dict(rtol=rtol, atol=atol, noise_floor=noise_floor)
    return [(rank, c) for rank, losses in distributed[1:]
            if not (c := compare_losses(first, read_floats(losses), **tol)).passed]


def ranked_notes(per_rank: Dict[int, List[NoteLike]], world: int) -> List[NoteLike]:
    """Notes of several ranks (``per_rank``: rank -> its notes), each once in first-seen
    order (ranks ascending), held by its ranks (``Note.on_ranks``: its sentence ends ``(rank 1)``,
    ``(ranks 0, 2)``) unless every one of ``world`` ranks has it or ``world`` is 1. A plain
    string (an older rank's) gets the same words."""
    held: Dict[NoteLike, List[int]] = {}
    for rank, notes in sorted(per_rank.items()):
        for said in notes:
            held.setdefault(said, []).append(rank)
    return [said if len(ranks) == world or world == 1 else
            said.on_ranks(ranks) if isinstance(said, Note) else said + ranks_text(ranks)
            for said, ranks in held.items()]


def replica_check(ranks: List[RankResult], buffers: bool = True) -> Optional[Dict[str, Any]]:
    """Hold the replicas of each shard against each other. Where the ranks recorded each
    tensor's part and digests (``replica["tensors"]``: name -> which part; ``digests``: one
    ``{name: hex}`` a step; ``sweep.train.observers.replicas``), ranks holding the same part of
    a parameter or buffer must give equal digests of it, tensor by tensor: an HSDP mesh's
    replicas of a shard, every rank for a parameter an engine leaves unsharded on a sharded
    mesh, every rank for a buffer (``buffers=False`` leaves buffers out: with sharded data each
    rank's running statistics are its shard's). Older records (one whole-rank ``key`` and one
    digest a step) are compared rank against rank.

    Returns ``JobRecord.replicas`` (``groups``: ranks holding the same part of some tensor,
    groups of two or more; ``coords``; ``mesh_dims``; ``first_step``: the first step where a
    group's digests disagree, ``None`` if none; ``pairs``: ``[first rank of a group, a rank
    whose digest differs from it then]`` at that step; ``ranks``: the ranks of those pairs;
    ``tensors``: per pair at that step, ``{"name", "part", "ranks": [a, b]}``, each rank's own
    finding; ``compared``: how many tensors had replicas), or ``None`` when no rank recorded
    digests."""
    held = [r for r in ranks if r.replica and r.replica.get("digests")]
    if not held:
        return None
    out: Dict[str, Any] = {"groups": [], "coords": {str(r.rank): r.replica.get("coords") for r in held},
                           "mesh_dims": held[0].replica.get("mesh_dims"), "first_step": None, "pairs": [],
                           "ranks": [], "tensors": []}
    per_tensor = all(isinstance(r.replica["digests"][0], dict) and r.replica.get("tensors") for r in held)
    by_key: Dict[Tuple[str, str], List[RankResult]] = {}
    for r in held:
        items = r.replica["tensors"].items() if per_tensor else [("", r.replica.get("key"))]
        for name, key in items:
            if key is None or (name.startswith("buffer:") and not buffers):
                continue
            by_key.setdefault((name, str(key)), []).append(r)
    groups = {k: sorted(g, key=lambda r: r.rank) for k, g in by_key.items() if len(g) > 1}
    out["groups"] = sorted({tuple(r.rank for r in g) for g in groups.values()}, key=lambda g: (len(g), g))
    out["groups"] = [list(g) for g in out["groups"]]
    out["compared"] = len(groups) if per_tensor else None
    disagree = []  # (step, tensor, part, the group's first rank, a rank that differs from it then)

    def digests(r: RankResult, name: str) -> List[Any]:
        return [d.get(name) for d in r.replica["digests"]] if per_tensor else list(r.replica["digests"])

    for (name, key), group in sorted(groups.items()):
        ref = digests(group[0], name)
        for r in group[1:]:
            mine = digests(r, name)
            step = next((i for i, (a, b) in enumerate(zip(ref, mine)) if a != b),
                        None if len(ref) == len(mine) else min(len(ref), len(mine)))
            if step is not None:
                disagree.append((step, name, key, group[0].rank, r.rank))
    if disagree:
        first = min(d[0] for d in disagree)
        at = [d for d in disagree if d[0] == first]
        out["first_step"] = first
        out["pairs"] = sorted(list(p) for p in dict.fromkeys((a, b) for _, _, _, a, b in at))
        out["ranks"] = sorted({rank for pair in out["pairs"] for rank in pair})
        if per_tensor:
            out["tensors"] = [{"name": name, "part": part_text(key), "ranks": [a, b]} for _, name, key, a, b in at]
    return out


def key_shards(key: str) -> List[Dict[str, int]]:
    """The shards a tensor key names (``sweep.train.observers.replicas``: ``(4, 32)@1:0/2`` is
    shard 0 of 2 along mesh dim 1; FSDP2 and hyper-parallel shard the tensor's dim 0), one
    ``{"mesh_dim", "shard", "shards"}`` per sharded mesh dim; ``[]`` for a whole tensor or a
    rank-local key (``@rank-local:...``)."""
    _, _, held = str(key).partition("@")
    out = []
    for item in held.split(","):
        dim, _, where = item.partition(":")
        index, _, of = where.partition("/")
        if dim.isdigit() and index.isdigit() and of.isdigit():
            out.append({"mesh_dim": int(dim), "shard": int(index), "shards": int(of)})
    return out


def part_text(key: str) -> str:
    """A tensor key's part as words (:func:`key_shards`): ``(4, 32)@1:0/2`` -> ``dim-0 shard 0
    of 2``, a key without a shard -> ``whole``."""
    return ", ".join(f"dim-0 shard {s['shard']} of {s['shards']}" for s in key_shards(key)) or "whole"


def arises_after_reduction(place: Optional[Dict[str, Any]], notes: Sequence[Any] = ()) -> bool:
    """Whether a job's first differing tensor (``JobRecord.first_tensor``) places the fault after
    the gradient reduction: a weight at a traced step whose gradients agree as reduced (the
    sentence ``sweep.findings.places`` ends "it arises after the reduction"); where the first
    difference is float rounding, the first beyond its envelope (``beyond_rounding``) decides.
    Or where the job's ``notes`` hold the gradient norm departing only as the optimizer read
    them (``N144``, stage ``read``: equal after the reduction, a rank's own clipping or scaling)."""
    if any(_norm_read(n) for n in notes or ()):
        return True
    place = place or {}
    if isinstance(place.get("beyond_rounding"), dict):  # rounding first (sharded data): the real difference
        place = place["beyond_rounding"]
    return place.get("kind") == "weight" and place.get("step") is not None and not place.get("grad_only_in") \
        and place.get("grads_recorded", True) and not place.get("note")


def _norm_read(said: Any) -> bool:
    """Whether a note (a ``Note`` or its dict) is ``N144`` at stage ``read``."""
    if isinstance(said, Note):
        return said.code == "N144" and said.values.get("stage") == "read"
    return isinstance(said, dict) and said.get("code") == "N144" and (said.get("values") or {}).get("stage") == "read"


def replica_reason(replicas: Dict[str, Any], start_unequal: Sequence[int] = (), after: bool = False) -> Note:
    """The failure reason of replicas that disagree (:func:`replica_check`), as a note: the
    first step, and each pair of ranks holding the same part of a tensor that differ then
    (``N185``: the first four tensors, each rank's own finding; an older record's pairs of
    whole ranks: ``N184``), with their coordinates on the job's mesh, and the likely cause
    (``cause``): ``init`` when they disagree from step 0 and a rank among them starts with
    initial weights unlike the standalone copy's (``start_unequal``: those ranks), ``after``
    where the job's first tensor places it after the reduction (``after``:
    :func:`arises_after_reduction`), else ``reduction`` (``buffer`` for buffers alone)."""
    init = replicas["first_step"] == 0 and set(start_unequal) & set(replicas.get("ranks") or [])
    cause = "init" if init else "after" if after else "reduction"
    where = {"step": replicas["first_step"], "coords": dict(replicas.get("coords") or {}),
             "dims": list(replicas.get("mesh_dims") or [])}
    tensors = replicas.get("tensors") or []
    if not tensors:
        return note("N184", pairs=[list(p) for p in replicas["pairs"]], cause=cause, **where)
    if all(t["name"].startswith("buffer:") for t in tensors):
        cause = "buffer"
    shown = [{"name": t["name"], "part": t["part"], "ranks": list(t["ranks"])} for t in tensors[:4]]
    return note("N185", tensors=shown, more=len(tensors) - 4 if len(tensors) > 4 else None, cause=cause, **where)


def start_tensor(unequal: Sequence[Tuple[int, Dict[str, Any]]]) -> Optional[Dict[str, Any]]:
    """The job's first differing tensor when its copies do not start equal (``unequal``:
    ``[(rank, RankResult.initial["first"])]`` of the ranks whose initial weights or buffers
    differ, in rank order): the first rank's, with its ``rank`` and ``ranks`` (every such
    rank); ``None`` when they start equal."""
    if not unequal:
        return None
    rank, found = unequal[0]
    return dict(found, rank=rank, ranks=[r for r, _ in unequal])


@dataclass(frozen=True)
class JudgedLosses:
    """The losses a run is judged by against the standalone copy (:func:`verdict`).

    Attributes:
        comparisons: rank -> its comparison with standalone
            (``sweep.analysis.compare.Comparison``; one entry, rank 0, for sharded data: the
            mean over the ranks).
        judged_rank: :func:`worst_rank` of ``comparisons``.
        standalone: the standalone losses, one a step, as recorded (``sweep.io.read_floats``
            reads them: floats, NaN and inf kept).
        distributed: the judged rank's losses, likewise.
    """

    comparisons: Dict[int, Comparison]
    judged_rank: int
    standalone: Sequence[Any]
    distributed: Sequence[Any]


@dataclass(frozen=True)
class Disagreements:
    """What else fails a run, whatever its losses against standalone (:func:`verdict`); each
    empty (or ``None``) where nothing was found.

    Attributes:
        apart: :func:`ranks_apart`, ``[(rank, its comparison with the first rank)]``.
        unequal: ``[(rank, RankResult.initial["first"])]`` of the ranks whose copies do not
            start equal, in rank order.
        replicas: ``JobRecord.replicas`` (:func:`replica_check`), or ``None``.
        ended: ``[(rank, RankResult.final["first"])]`` of the ranks whose copies end apart in
            a buffer the training losses never read.
    """

    apart: Sequence[Tuple[int, Comparison]] = ()
    unequal: Sequence[Tuple[int, Dict[str, Any]]] = ()
    replicas: Optional[Dict[str, Any]] = None
    ended: Sequence[Tuple[int, Dict[str, Any]]] = ()


def verdict(losses: JudgedLosses, rtol: float, atol: float,
            others: Disagreements = Disagreements()) -> Tuple[str, List[Note]]:
    """A run's status and reasons, as notes (N180-N186; ``JobRecord.reason`` is their sentences
    joined by ``"; "``, ``sweep.run.judge``): ``("fail", [reason, ...])`` if any rank fails against
    the standalone sequence (the judged rank's steps outside tolerance, and the failing
    ranks; a non-finite loss named with both values: :func:`tolerance_reason`), if both
    copies' losses turn non-finite alike (NaN or inf at the same steps: ``numpy.isclose``
    calls them equal, yet a diverged run passes nothing: :func:`nonfinite_reason`), if its
    ranks disagree beyond tolerance (:func:`ranks_apart`; each may still pass against
    standalone), if the copies do not start equal, if replicas disagree
    (:func:`replica_check`), or if the copies end apart in a buffer the training losses
    never read (a BatchNorm statistic frozen in one copy, with replicated data:
    :func:`disagreement_reasons`); else ``("ok", [])``.

    Args:
        losses: the comparisons and the losses the run is judged by (:class:`JudgedLosses`).
        rtol, atol: the job's tolerance, as configured (they appear in the reason).
        others: what else was found apart (:class:`Disagreements`; none by default).

    Raises:
        KeyError: ``losses.judged_rank`` has no comparison in ``losses.comparisons``.
    """
    first = tolerance_reason(losses, rtol, atol) or nonfinite_reason(losses)
    reasons = ([first] if first else []) + disagreement_reasons(others)
    # (when only the ranks disagree, each is within tolerance of standalone: the comparison passed)
    return ("fail", reasons) if reasons else ("ok", [])


def tolerance_reason(losses: JudgedLosses, rtol: float, atol: float) -> Optional[Note]:
    """Where some rank fails against standalone (``N180``): the judged rank's steps outside ``rtol`` and
    ``atol`` and its first failing step, the failing ranks where there are several ranks, and
    the judged rank's first non-finite loss with both copies' values (a NaN or inf where the
    other copy has a number, or another one); ``None`` when every rank passes.

    Raises:
        KeyError: ``losses.judged_rank`` has no comparison.
    """
    comparisons, judged = losses.comparisons, losses.judged_rank
    comparison = comparisons[judged]  # (a judged rank without a comparison: KeyError)
    failing = [rank for rank, c in sorted(comparisons.items()) if not c.passed]
    if not failing:
        return None
    several = len(comparisons) > 1
    bad = comparison.first_nonfinite_step
    values = (None, None)
    if bad is not None:  # a NaN or inf where the other copy has a number (or another one)
        values = (read_floats(losses.standalone)[bad], read_floats(losses.distributed)[bad])
    return note("N180", rank=judged if several else None, n_fail=comparison.n_fail, n_steps=comparison.n_steps,
                rtol=rtol, atol=atol, first=comparison.first_fail_step, failing=failing if several else None,
                ranks=len(comparisons), bad=bad, standalone=values[0], distributed=values[1])


def nonfinite_reason(losses: JudgedLosses) -> Optional[Note]:
    """Where some rank's losses turn non-finite alike in both copies (``N181``; equal NaN or inf: equal,
    yet no training): the first such step, with both copies' values when it is the judged
    rank's, else naming the rank; ``None`` where no rank's do. Read after
    :func:`tolerance_reason` finds no failing rank."""
    comparisons, judged = losses.comparisons, losses.judged_rank
    nonfinite_ranks = [rank for rank, c in sorted(comparisons.items()) if c.first_nonfinite_step is not None]
    if not nonfinite_ranks:
        return None
    rank = judged if judged in nonfinite_ranks else nonfinite_ranks[0]
    bad = comparisons[rank].first_nonfinite_step
    values = (read_floats(losses.standalone)[bad], read_floats(losses.distributed)[bad]) if rank == judged else None
    return note("N181", step=bad, standalone=values[0] if values else None,
                distributed=values[1] if values else None, rank=None if values else rank)


def disagreement_reasons(found: Disagreements) -> List[Note]:
    """One reason (a note) for each kind of disagreement in ``found``, in this order: ranks that
    disagree (the first, against rank 0, its first failing step and largest difference),
    copies that do not start equal (the first rank's finding, every such rank named),
    replicas that disagree (:func:`replica_reason`), copies that end apart."""
    reasons = []
    if found.apart:
        rank, c = found.apart[0]
        reasons.append(note("N182", rank=rank, step=c.first_fail_step, max_abs_diff=c.max_abs_diff))
    if found.unequal:
        rank, first = found.unequal[0]
        reasons.append(note("N183", rank=rank, place=first,
                            ranks=[r for r, _ in found.unequal] if len(found.unequal) > 1 else None))
    if found.replicas and found.replicas.get("first_step") is not None:
        reasons.append(replica_reason(found.replicas, [r for r, _ in found.unequal]))
    if found.ended:
        rank, first = found.ended[0]
        reasons.append(note("N186", rank=rank, place=first,
                            ranks=[r for r, _ in found.ended] if len(found.ended) > 1 else None))
    return reasons


def each_ranks_shards(first: Optional[Dict[str, Any]],
                      found: Sequence[Tuple[Dict[str, Any], int]]) -> Optional[Dict[str, Any]]:
    """The job's first differing tensor (``first``: ``sweep.analysis.evidence.first_tensor_over_ranks``)
    with each rank's own shard finding where they differ: every rank gathers the full tensor
    over its own shard group, so on an HSDP mesh rank 0 finds ``shard 1 of 2 ... held by rank
    1`` and rank 2 the same shard held by rank 3, or nothing. ``found``: ``[(rank's first tensor,
    rank)]``. Adds ``shards_by_rank`` (``{rank: holders or []}`` of the ranks naming the same
    tensor and step) where they do not all name the same holders (its sentence then says
    ``each rank's own finding: rank 0: held by rank 1, rank 2: held by rank 3``:
    ``sweep.findings.places``). ``first`` unchanged without shards or where they agree."""
    if not first or not first.get("shards") or "step" not in first:
        return first
    mine: Dict[int, List[int]] = {}
    for tensor, rank in found:
        real = tensor.get("beyond_rounding") if "beyond_rounding" in tensor else tensor
        if real and real.get("name") == first.get("name") and real.get("step") == first.get("step") \
                and real.get("kind") == first.get("kind"):
            mine[rank] = list((real.get("shards") or {}).get("ranks") or [])
    if len({tuple(v) for v in mine.values()}) <= 1:
        return first
    return dict(first, shards_by_rank={str(r): h for r, h in sorted(mine.items())})
