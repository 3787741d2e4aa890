"""Judging one run of a job: every rank's losses against the standalone sequence, and the
notes that explain them (settings without effect, shared storage, missing parameters, the
collectives and the optimizer as they ran, replicas that disagree).

The rules are the analysis wing's (``sweep.analysis.compare``: each rank's comparison;
``sweep.analysis.judging``: the rank a job is judged by, the replicas, the verdict); this
module calls them on the ranks' results and records what they return.
Shared by the built-in job (``sweep.run.job``) and ``runner=command`` (``sweep.run.command``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from omegaconf import DictConfig

from sweep.analysis.collectives import lr_notes
from sweep.analysis.dtypes import dtype_name, override_notes
from sweep.analysis.compare import MISSING_PREFIX, RANDOM_DRAWS_NOTE, compare_losses, printed_note, printed_resolution
from sweep.analysis.judging import ranked_notes, ranks_apart, replica_check, start_tensor, verdict, worst_rank
from sweep.analysis.trace import missing_text
from sweep.config.enums import as_str
from sweep.io import read_floats
from sweep.records import JobRecord, RankResult


def judge(cfg: DictConfig, record: JobRecord, ranks: List[RankResult], standalone: List[Any],
          standalone_lrs: Optional[List[float]] = None, standalone_buffers: Optional[Dict[str, Any]] = None) -> None:
    """Fill the record from the ranks' results: every rank judged against the standalone
    sequence (``sweep.analysis.compare.compare_losses``; the job is judged by its worst rank,
    ``sweep.analysis.judging.worst_rank``), losses, weights moved, dtypes, timings, notes,
    the replicas (``replica_check``), and the verdict (``ok`` or ``fail`` with its reason,
    ``sweep.analysis.judging.verdict``: a job fails if any rank fails, if its ranks disagree
    beyond tolerance, if the copies do not start equal, if replicas disagree, or if the copies
    end apart in a buffer: ``standalone_buffers``, the standalone copy's after the last step,
    ``RankResult.final["standalone"]``, against each rank's :func:`ended_apart`)."""
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
    record.judged_rank = worst_rank({rank: c for rank, (_, c) in judged.items()})
    distributed, comparison = judged[record.judged_rank]
    record.versions.update(first.versions)
    record.losses = {"standalone": standalone, "distributed": distributed}
    record.ranks_reported = sorted(r.rank for r in ranks)
    record.ranks_agree = all(
        r.standalone == first.standalone and (sharded or r.distributed == first.distributed) for r in ranks
    ) if len(ranks) > 1 or int(first.world_size or 1) == 1 else None  # one rank of several: not known
    apart = [] if sharded else ranks_apart([(r.rank, r.distributed) for r in ranks], **tol)
    record.weights_moved = first.moved
    record.zero_grad_effective = first.zero_grad_effective
    record.engine_notes = list(dict.fromkeys(note for r in ranks for note in r.engine_notes))
    record.engine = first.engine  # engine.info(): the API that ran, workarounds, emulated collectives
    record.notes = effect_notes(cfg, record)
    # only a command's losses are read from text; a built-in rank's are the tensors' floats
    from_text = as_str(cfg.runner.name) == "command"
    printed = {copy: q for copy, q in (("standalone", printed_resolution(standalone)),
                                       ("distributed", printed_resolution(distributed)))
               if q is not None and from_text}
    record.resolution = printed or None
    if printed:
        scale = max((abs(v) for v in ref if np.isfinite(v)), default=0.0)
        record.notes.append(printed_note(printed, float(cfg.compare.rtol), float(cfg.compare.atol), scale))
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
    # the lr each copy ran with, step by step (standalone_lrs: from the cached baseline or the
    # standalone-only process, where this launch did not train that copy)
    lrs = dict((first.features or {}).get("lr") or {})
    if standalone_lrs and not lrs.get("standalone"):
        lrs["standalone"] = standalone_lrs
        record.features = dict(first.features or {}, lr=lrs)
    record.notes.extend(n for n in lr_notes(lrs.get("standalone"), lrs.get("distributed")) if n not in record.notes)
    unequal = [(r.rank, r.initial["first"]) for r in ranks if r.initial and r.initial.get("first")]
    ended = ended_apart(cfg, ranks, standalone_buffers, len(ref))
    record.replicas = replica_check(ranks)
    if record.random_draws is None:
        record.not_observed["random_draws"] = "no rank recorded its random generators"
    if record.replicas is None:
        record.not_observed["replicas"] = ("no rank recorded digests of its shards (one rank, or a copy trained "
                                           "without its distributed replicas)")
    record.dtypes = {
        "configured": {**{k: record.config["mp_policy"][k] for k in ("param_dtype", "reduce_dtype", "output_dtype")},
                       "init_dtype": record.config["model"].get("init_dtype", "float32")},
        "observed": first.dtypes_observed,
    }
    master = dtype_name(record.dtypes["configured"]["init_dtype"], "") or "float32"
    record.notes.extend(n for n in override_notes(first.dtypes_observed, master) if n not in record.notes)
    for phase in ("setup", "standalone", "distributed"):
        values = [r.timings_s[phase] for r in ranks if phase in r.timings_s]
        if values:
            record.timings_s[phase] = max(values)
    record.comparison = comparison.to_dict()
    if printed:  # equal means equal to the printed precision: the comparison says so too
        record.comparison["resolution"] = max(printed.values())
    if unequal and not record.first_tensor:  # the copies do not start equal: that is the first difference
        record.first_tensor = start_tensor(unequal)
    if ended and not record.first_tensor:  # they end apart in a statistic no loss reads: that is the one
        record.first_tensor = start_tensor(ended)
    record.status, record.reason = verdict({rank: c for rank, (_, c) in judged.items()}, record.judged_rank,
                                           standalone, distributed, cfg.compare.rtol, cfg.compare.atol,
                                           apart=apart, unequal=unequal, replicas=record.replicas, ended=ended)


def ended_apart(cfg: DictConfig, ranks: List[RankResult], standalone: Optional[Dict[str, Any]],
                steps: int) -> List[Tuple[int, Dict[str, Any]]]:
    """``[(rank, sweep.analysis.trace.final_buffers's dict)]`` of the ranks whose
    distributed copy's buffers after the last step (``RankResult.final["distributed"]``)
    differ from the standalone copy's beyond rounding (a sharding engine's shards against
    the matching slices: ``to_shards``). ``[]`` with sharded data (each rank's running
    statistics are its shard's, by design) or where either side was not recorded."""
    from sweep.analysis.trace import final_buffers, to_shards

    if cfg.data.split == "sharded" or not isinstance(standalone, dict) or "note" in standalone:
        return []
    found = []
    for r in ranks:
        theirs = (r.final or {}).get("distributed")
        if not isinstance(theirs, dict) or "note" in theirs:
            continue
        arrays = [{"buffer": {k: np.asarray(v) for k, v in theirs.items()}}]
        ours = to_shards([{"buffer": {k: np.asarray(v) for k, v in standalone.items()}}], arrays, r.rank)
        first = final_buffers(ours[0]["buffer"], arrays[0]["buffer"], max(steps - 1, 0),
                              float(cfg.compare.noise_floor))
        if first is not None:
            found.append((r.rank, first))
    return found


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
        collectives["notes"] = ranked_notes({r.rank: (r.collectives or {}).get("notes") or [] for r in ranks},
                                            len(ranks))
        notes += collectives["notes"]
    optimizer = dict(first.optimizer) if first.optimizer is not None else None
    if optimizer is not None:
        optimizer["notes"] = ranked_notes({r.rank: (r.optimizer or {}).get("notes") or [] for r in ranks},
                                          len(ranks))
        notes += optimizer["notes"]
        if optimizer.get("standalone") is None:  # never silently empty (issue 36)
            optimizer["standalone"] = {"note": f"not observed: {_standalone_elsewhere(record)}"}
    record.notes.extend(n for n in notes if n not in record.notes)
    return collectives, optimizer


def _standalone_elsewhere(record: JobRecord) -> str:
    """Why a job's ranks did not see the standalone copy's optimizer: where it trained."""
    baseline = record.baseline or {}
    if baseline.get("source") == "cache":
        return f"the standalone losses were reused from job dir {baseline.get('job_dir')} (execution.reuse_baselines)"
    if baseline.get("source") == "framework":
        return (f"the standalone copy trained in {baseline.get('framework')} (baseline.framework), in a process "
                "of its own")
    if baseline:
        return f"the standalone losses came from {baseline.get('source') or 'elsewhere'}"
    if (record.config or {}).get("order") == "separate":
        return "order=separate trains the standalone copy in a process of its own"
    return "the ranks did not train the standalone copy"


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
    shared = [(key.partition("_during_"), float(value)) for key, value in sorted(moved.items()) if float(value) > 0.0]
    if shared:  # the copies are not independent: one trains on the other's updates
        how = ", ".join(f"the {other} copy's weights moved by {value:.3g} while the {trained} copy trained"
                        for (other, _, trained), value in shared)
        notes.append(f"the copies share storage (weights.transfer={as_str(cfg.weights.transfer)}): {how}, so each "
                     "trains on the other's updates")
    if cfg.zero_grad and record.zero_grad_effective is False and "zero_grad" in overridden:
        notes.append(f"zero_grad=true had no effect: engine={cfg.engine.name}'s gradients are functional "
                     "(nothing accumulates to clear)")
    return notes

