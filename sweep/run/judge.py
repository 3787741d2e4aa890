"""Judging one run of a job: every rank's losses against the standalone sequence, and the
notes that explain them (settings without effect, shared storage, missing parameters, the
collectives and the optimizer as they ran, replicas that disagree).

Shared by the built-in job (``sweep.run.job``) and ``runner=command`` (``sweep.run.command``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np
from omegaconf import DictConfig

from sweep.analysis.compare import MISSING_PREFIX, RANDOM_DRAWS_NOTE, compare_losses
from sweep.analysis.trace import missing_text
from sweep.config.enums import as_str
from sweep.io import read_floats
from sweep.records import JobRecord, RankResult

def worst_rank(comparisons: Dict[int, Any]) -> int:
    """The rank a job is judged by (its losses, scale and sign, first steps and class in the
    report): the worst one, not rank 0. Among failing ranks, the earliest first failing
    step, then the largest ``max_abs_diff``; when all pass, the earliest first differing
    step, then the largest ``max_abs_diff``; ties go to the lowest rank.
    ``comparisons``: rank -> ``sweep.analysis.compare.Comparison``."""
    def key(item: Any) -> tuple:
        rank, c = item
        step = c.first_fail_step if not c.passed else c.first_diff_step
        size = float(c.max_abs_diff) if c.max_abs_diff == c.max_abs_diff else 0.0  # nan: no steps
        return (c.passed, step is None, step if step is not None else 0, -size, rank)

    return min(comparisons.items(), key=key)[0]


def judge(cfg: DictConfig, record: JobRecord, ranks: List[RankResult], standalone: List[Any]) -> None:
    """Fill the record from the ranks' results: every rank judged against the standalone
    sequence (a job fails if any rank fails, or if its ranks disagree beyond tolerance),
    losses, weights moved, dtypes, timings, and the verdict (``ok`` or ``fail``)."""
    first = ranks[0]
    sharded = cfg.data.split == "sharded"
    tol = dict(rtol=cfg.compare.rtol, atol=cfg.compare.atol, noise_floor=cfg.compare.noise_floor)
    ref = read_floats(standalone)
    if sharded:
        # each rank's loss is over its shard; the global loss is their mean (equal shard sizes)
        per_rank = np.array([read_floats(r.distributed) for r in ranks], dtype=np.float64)
        judged = {0: (per_rank.mean(axis=0).tolist(), compare_losses(ref, per_rank.mean(axis=0), **tol))}
    else:
        judged = {r.rank: (r.distributed, compare_losses(ref, read_floats(r.distributed), **tol)) for r in ranks}
    record.rank_comparisons = None if sharded else [
        {"rank": rank, "passed": c.passed, "n_fail": c.n_fail, "first_fail_step": c.first_fail_step,
         "first_diff_step": c.first_diff_step, "max_abs_diff": c.max_abs_diff}
        for rank, (_, c) in sorted(judged.items())
    ]
    failing = [rank for rank, (_, c) in sorted(judged.items()) if not c.passed]
    record.judged_rank = worst_rank({rank: c for rank, (_, c) in judged.items()})
    distributed, comparison = judged[record.judged_rank]
    record.versions.update(first.versions)
    record.losses = {"standalone": standalone, "distributed": distributed}
    record.ranks_agree = all(
        r.standalone == first.standalone and (sharded or r.distributed == first.distributed) for r in ranks
    )
    apart = [] if sharded else [
        (r.rank, c) for r in ranks[1:]
        if not (c := compare_losses(read_floats(first.distributed), read_floats(r.distributed), **tol)).passed
    ]
    record.weights_moved = first.moved
    record.zero_grad_effective = first.zero_grad_effective
    record.engine_notes = list(dict.fromkeys(note for r in ranks for note in r.engine_notes))
    record.engine = first.engine  # engine.info(): the API that ran, workarounds, emulated collectives
    record.notes = effect_notes(cfg, record)
    record.random_draws = any(any(r.random_draws.values()) for r in ranks) if any(r.random_draws for r in ranks) \
        else None
    if record.random_draws and sharded:
        record.notes.append(RANDOM_DRAWS_NOTE)
    missing = list({(m["name"], m["only_in"]): m for r in ranks for m in (r.initial or {}).get("missing", [])}
                   .values())
    if missing:
        held = [r.rank for r in ranks if (r.initial or {}).get("missing")]
        where = "" if len(held) == len(ranks) or len(ranks) == 1 else \
            f" (on rank{'s' if len(held) > 1 else ''} {', '.join(map(str, held))} only)"
        record.notes.append(MISSING_PREFIX + missing_text(sorted(missing, key=lambda m: (m["name"], m["only_in"])))
                            + where)
    record.collectives, record.optimizer = _inside_notes(record, ranks)
    record.features = first.features
    unequal = [(r.rank, r.initial["first"]) for r in ranks if r.initial and r.initial.get("first")]
    record.replicas = replica_check(ranks)
    record.dtypes = {
        "configured": {**{k: record.config["mp_policy"][k] for k in ("param_dtype", "reduce_dtype", "output_dtype")},
                       "init_dtype": record.config["model"].get("init_dtype", "float32")},
        "observed": first.dtypes_observed,
    }
    for phase in ("setup", "standalone", "distributed"):
        values = [r.timings_s[phase] for r in ranks if phase in r.timings_s]
        if values:
            record.timings_s[phase] = max(values)
    record.comparison = comparison.to_dict()
    reasons = []
    if failing:
        where = f"rank {record.judged_rank}: " if len(judged) > 1 else ""
        others = f" (failing ranks: {', '.join(map(str, failing))} of {len(judged)})" if len(judged) > 1 else ""
        bad = comparison.first_nonfinite_step
        nonfinite = ""
        if bad is not None:  # a NaN or inf where the other copy has a number (or another one)
            values = (read_floats(standalone)[bad], read_floats(distributed)[bad])
            nonfinite = f"; a non-finite loss from step {bad} (standalone {values[0]}, distributed {values[1]})"
        reasons.append(
            f"{where}{comparison.n_fail}/{comparison.n_steps} steps outside rtol={cfg.compare.rtol}, "
            f"atol={cfg.compare.atol}; first at step {comparison.first_fail_step}{others}{nonfinite}"
        )
    if apart:
        rank, c = apart[0]
        reasons.append(f"ranks disagree: rank {rank} against rank 0 from step {c.first_fail_step} "
                       f"(max |diff| {c.max_abs_diff:.3g})")
    if unequal:
        rank, found = unequal[0]
        others = f" (ranks {', '.join(str(r) for r, _ in unequal)})" if len(unequal) > 1 else ""
        reasons.append(f"the copies do not start equal: rank {rank}: {found['description']}{others}")
        if not record.first_tensor:
            record.first_tensor = dict(found, rank=rank, ranks=[r for r, _ in unequal])
    if record.replicas and record.replicas.get("first_step") is not None:
        reasons.append(replica_reason(record.replicas))
    if reasons:  # (when only the ranks disagree, each is within tolerance of standalone: comparison.passed)
        record.status, record.reason = "fail", "; ".join(reasons)
    else:
        record.status, record.reason = "ok", None


def _ranked_notes(per_rank: Dict[int, List[str]], world: int) -> List[str]:
    """Notes of several ranks, each once, naming its ranks unless every rank has it."""
    held: Dict[str, List[int]] = {}
    for rank, notes in sorted(per_rank.items()):
        for note in notes:
            held.setdefault(note, []).append(rank)
    return [note if len(ranks) == world or world == 1 else
            f"{note} (rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})"
            for note, ranks in held.items()]


def _inside_notes(record: JobRecord, ranks: List[RankResult]) -> tuple:
    """The job's ``collectives`` and ``optimizer`` (rank 0's, with every rank's notes;
    ``sweep.train.torch_rank.collectives_record`` / ``optimizer_record``,
    ``sweep.train.mindspore_rank.ledger_record``), their notes added to ``record.notes``.
    Where the ranks recorded no ledger (a MindSpore standalone-only run), ``collectives``
    says it was not observed."""
    first = ranks[0]
    if first.collectives is None and record.config and record.config.get("framework", {}).get("name") != "torch":
        collectives: Optional[Dict[str, Any]] = {"unchecked": "not observed: no rank recorded a ledger"}
    else:
        collectives = dict(first.collectives) if first.collectives is not None else None
    notes: List[str] = []
    if collectives is not None and first.collectives is not None:
        collectives["notes"] = _ranked_notes({r.rank: (r.collectives or {}).get("notes") or [] for r in ranks},
                                             len(ranks))
        notes += collectives["notes"]
    optimizer = dict(first.optimizer) if first.optimizer is not None else None
    if optimizer is not None:
        optimizer["notes"] = _ranked_notes({r.rank: (r.optimizer or {}).get("notes") or [] for r in ranks},
                                           len(ranks))
        notes += optimizer["notes"]
    record.notes.extend(n for n in notes if n not in record.notes)
    return collectives, optimizer


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


def replica_reason(replicas: Dict[str, Any]) -> str:
    """The failure reason of replicas that disagree (:func:`replica_check`): the first
    step, and each pair of ranks holding the same shards that differ then, with their
    coordinates on the job's mesh."""
    coords, dims = replicas.get("coords") or {}, replicas.get("mesh_dims") or []

    def at(rank: int) -> str:
        where = coords.get(str(rank))
        return f"rank {rank}" + (f" ({' x '.join(dims) or 'mesh'} {where})" if where is not None else "")

    pairs = ", ".join(f"{at(a)} and {at(b)}" for a, b in replicas["pairs"])
    return (f"replicas disagree from step {replicas['first_step']}: {pairs} hold the same shards of the weights "
            "but different values (the reduction across replicas is missing or wrong)")


def effect_notes(cfg: DictConfig, record: JobRecord) -> List[str]:
    """Settings of the job that had no effect, so that a sweep over them is not read as
    evidence: a field the engine never reads (``Engine.unused_fields``) that the job's
    overrides set; ``weights.transfer=shared`` when neither copy moved the other (the
    engine copied the parameters); a copy whose weights moved while the other trained
    (shared storage: the copies are not independent); ``zero_grad=true`` set by the
    overrides when the engine's gradients are functional (nothing to clear)."""
    from sweep import engines

    notes: List[str] = []
    if as_str(cfg.runner.name) == "command":  # no engine ran: the user's command did
        return notes
    engine = engines.engine_class(cfg, str(cfg.framework.name))
    overridden = {str(o).partition("=")[0].lstrip("+~") for o in record.overrides}
    for key in engine.unused_fields:
        if key in overridden or key.split(".")[0] in overridden:
            notes.append(f"{key} had no effect: engine={cfg.engine.name} does not use it")
    moved = record.weights_moved or {}
    if cfg.weights.transfer == "shared" and moved and all(v == 0.0 for v in moved.values()):
        notes.append(
            f"weights.transfer=shared had no effect: engine={cfg.engine.name} copied the parameters, so neither "
            "copy moved the other (weights_moved 0.0 both ways)"
        )
    shared = [(key.partition("_during_"), value) for key, value in sorted(moved.items()) if value > 0.0]
    if shared:  # the copies are not independent: one trains on the other's updates
        how = ", ".join(f"the {other} copy's weights moved by {value:.3g} while the {trained} copy trained"
                        for (other, _, trained), value in shared)
        notes.append(f"the copies share storage (weights.transfer={as_str(cfg.weights.transfer)}): {how}, so each "
                     "trains on the other's updates")
    if cfg.zero_grad and record.zero_grad_effective is False and "zero_grad" in overridden:
        notes.append(f"zero_grad=true had no effect: engine={cfg.engine.name}'s gradients are functional "
                     "(nothing accumulates to clear)")
    return notes

