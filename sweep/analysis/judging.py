"""Judging one run of a job: the rules that turn its ranks' comparisons into a verdict.

Pure rules over ``sweep.analysis.compare.Comparison`` and the ranks' results
(``sweep.records.RankResult``): the rank a job is judged by (:func:`worst_rank`), ranks that
disagree with each other (:func:`ranks_apart`), the replicas of each shard held against each
other (:func:`replica_check`, :func:`replica_reason`), the first differing tensor of copies
that do not start equal (:func:`start_tensor`), the reasons a job fails and its status
(:func:`verdict`), and notes several ranks share (:func:`ranked_notes`).
``sweep.run.judge`` calls them and records what they return.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from sweep.analysis.compare import Comparison, compare_losses
from sweep.io import read_floats
from sweep.records import RankResult


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


def ranked_notes(per_rank: Dict[int, List[str]], world: int) -> List[str]:
    """Notes of several ranks (``per_rank``: rank -> its notes), each once in first-seen
    order (ranks ascending), naming its ranks (``(rank 1)``, ``(ranks 0, 2)``) unless every
    one of ``world`` ranks has it or ``world`` is 1."""
    held: Dict[str, List[int]] = {}
    for rank, notes in sorted(per_rank.items()):
        for note in notes:
            held.setdefault(note, []).append(rank)
    return [note if len(ranks) == world or world == 1 else
            f"{note} (rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})"
            for note, ranks in held.items()]


def replica_check(ranks: List[RankResult]) -> Optional[Dict[str, Any]]:
    """Hold the replicas of each shard against each other: ranks whose ``replica["key"]``
    is equal hold the same slices of the weights (an HSDP mesh's replicate dim, DDP's
    ranks), so their per-step digests must be equal. Returns ``JobRecord.replicas``
    (``groups``: ranks by key, groups of two or more; ``coords``; ``mesh_dims``;
    ``first_step``: the first step where a group's digests disagree, ``None`` if none;
    ``pairs``: ``[first rank of a group, a rank whose digest differs from it then]`` at
    that step; ``ranks``: the ranks of those pairs), or ``None`` when no rank recorded digests."""
    held = [r for r in ranks if r.replica and r.replica.get("key") and r.replica.get("digests")]
    if not held:
        return None
    by_key: Dict[str, List[RankResult]] = {}
    for r in held:
        by_key.setdefault(r.replica["key"], []).append(r)
    groups = [sorted(group, key=lambda r: r.rank) for group in by_key.values() if len(group) > 1]
    out: Dict[str, Any] = {"groups": sorted([r.rank for r in g] for g in groups),
                           "coords": {str(r.rank): r.replica.get("coords") for r in held},
                           "mesh_dims": held[0].replica.get("mesh_dims"), "first_step": None, "pairs": [],
                           "ranks": []}
    disagree = []  # (step, the group's first rank, a rank that differs from it then)
    for group in groups:
        ref = group[0].replica["digests"]
        for r in group[1:]:
            mine = r.replica["digests"]
            step = next((i for i, (a, b) in enumerate(zip(ref, mine)) if a != b),
                        None if len(ref) == len(mine) else min(len(ref), len(mine)))
            if step is not None:
                disagree.append((step, group[0].rank, r.rank))
    if disagree:
        out["first_step"] = min(d[0] for d in disagree)
        out["pairs"] = [[a, b] for step, a, b in disagree if step == out["first_step"]]
        out["ranks"] = sorted({rank for pair in out["pairs"] for rank in pair})
    return out


INIT_REPLICAS = ("the copies already start apart on some of these ranks (initial weights that differ by "
                 "rank: an initialisation, not the reduction)")
REDUCTION_REPLICAS = "the reduction across replicas is missing or wrong"


def replica_reason(replicas: Dict[str, Any], start_unequal: Sequence[int] = ()) -> str:
    """The failure reason of replicas that disagree (:func:`replica_check`): the first
    step, and each pair of ranks holding the same shards that differ then, with their
    coordinates on the job's mesh, and the likely cause: :data:`INIT_REPLICAS` when they
    disagree from step 0 and a rank among them starts with initial weights unlike the
    standalone copy's (``start_unequal``: those ranks), else :data:`REDUCTION_REPLICAS`."""
    coords, dims = replicas.get("coords") or {}, replicas.get("mesh_dims") or []

    def at(rank: int) -> str:
        where = coords.get(str(rank))
        return f"rank {rank}" + (f" ({' x '.join(dims) or 'mesh'} {where})" if where is not None else "")

    pairs = ", ".join(f"{at(a)} and {at(b)}" for a, b in replicas["pairs"])
    init = replicas["first_step"] == 0 and set(start_unequal) & set(replicas.get("ranks") or [])
    return (f"replicas disagree from step {replicas['first_step']}: {pairs} hold the same shards of the weights "
            f"but different values ({INIT_REPLICAS if init else REDUCTION_REPLICAS})")


def start_tensor(unequal: Sequence[Tuple[int, Dict[str, Any]]]) -> Optional[Dict[str, Any]]:
    """The job's first differing tensor when its copies do not start equal (``unequal``:
    ``[(rank, RankResult.initial["first"])]`` of the ranks whose initial weights or buffers
    differ, in rank order): the first rank's, with its ``rank`` and ``ranks`` (every such
    rank); ``None`` when they start equal."""
    if not unequal:
        return None
    rank, found = unequal[0]
    return dict(found, rank=rank, ranks=[r for r, _ in unequal])


def verdict(comparisons: Dict[int, Comparison], judged_rank: int, standalone: Sequence[Any],
            distributed: Sequence[Any], rtol: float, atol: float,
            apart: Sequence[Tuple[int, Comparison]] = (), unequal: Sequence[Tuple[int, Dict[str, Any]]] = (),
            replicas: Optional[Dict[str, Any]] = None,
            ended: Sequence[Tuple[int, Dict[str, Any]]] = ()) -> Tuple[str, Optional[str]]:
    """A run's status and reason: ``("fail", "reason; reason")`` if any rank fails against
    the standalone sequence (the judged rank's steps outside tolerance, and the failing
    ranks; a non-finite loss named with both values), if both copies' losses turn
    non-finite alike (NaN or inf at the same steps: ``numpy.isclose`` calls them equal, yet
    a diverged run passes nothing: "non-finite loss from step k in both copies"), if its ranks disagree beyond
    tolerance (:func:`ranks_apart`; each may still pass against standalone), if the copies
    do not start equal, if replicas disagree (:func:`replica_check`), or if the copies end
    apart in a buffer the training losses never read (``ended``: a BatchNorm statistic
    frozen in one copy, with replicated data); else ``("ok", None)``.

    Args:
        comparisons: rank -> its comparison with standalone (one entry, rank 0, for sharded
            data: the mean over the ranks).
        judged_rank: :func:`worst_rank` of ``comparisons``.
        standalone, distributed: the standalone losses and the judged rank's, as recorded.
        rtol, atol: the job's tolerance, as configured (they appear in the reason).
        apart: :func:`ranks_apart`; unequal: ``[(rank, initial["first"])]``; replicas:
            ``JobRecord.replicas``; ended: ``[(rank, RankResult.final["first"])]``.
    """
    comparison = comparisons[judged_rank]
    failing = [rank for rank, c in sorted(comparisons.items()) if not c.passed]
    reasons = []
    if failing:
        several = len(comparisons) > 1
        where = f"rank {judged_rank}: " if several else ""
        others = f" (failing ranks: {', '.join(map(str, failing))} of {len(comparisons)})" if several else ""
        bad = comparison.first_nonfinite_step
        nonfinite = ""
        if bad is not None:  # a NaN or inf where the other copy has a number (or another one)
            values = (read_floats(standalone)[bad], read_floats(distributed)[bad])
            nonfinite = f"; a non-finite loss from step {bad} (standalone {values[0]}, distributed {values[1]})"
        reasons.append(
            f"{where}{comparison.n_fail}/{comparison.n_steps} steps outside rtol={rtol}, "
            f"atol={atol}; first at step {comparison.first_fail_step}{others}{nonfinite}"
        )
    nonfinite_ranks = [rank for rank, c in sorted(comparisons.items()) if c.first_nonfinite_step is not None]
    if not failing and nonfinite_ranks:  # equal NaN or inf in both copies: equal, yet no training
        rank = judged_rank if judged_rank in nonfinite_ranks else nonfinite_ranks[0]
        bad = comparisons[rank].first_nonfinite_step
        values = (read_floats(standalone)[bad], read_floats(distributed)[bad]) if rank == judged_rank else None
        shown = f" (standalone {values[0]}, distributed {values[1]})" if values else f" (rank {rank})"
        reasons.append(f"non-finite loss from step {bad} in both copies{shown}: equal, but nothing to compare")
    if apart:
        rank, c = apart[0]
        reasons.append(f"ranks disagree: rank {rank} against rank 0 from step {c.first_fail_step} "
                       f"(max |diff| {c.max_abs_diff:.3g})")
    if unequal:
        rank, found = unequal[0]
        others = f" (ranks {', '.join(str(r) for r, _ in unequal)})" if len(unequal) > 1 else ""
        reasons.append(f"the copies do not start equal: rank {rank}: {found['description']}{others}")
    if replicas and replicas.get("first_step") is not None:
        reasons.append(replica_reason(replicas, [r for r, _ in unequal]))
    if ended:
        rank, found = ended[0]
        others = f" (ranks {', '.join(str(r) for r, _ in ended)})" if len(ended) > 1 else ""
        reasons.append(f"the copies end apart: rank {rank}: {found['description']}{others}")
    # (when only the ranks disagree, each is within tolerance of standalone: comparison.passed)
    return ("fail", "; ".join(reasons)) if reasons else ("ok", None)
