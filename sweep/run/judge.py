"""Judging one run of a job: every rank's losses against the standalone sequence, and the
notes that explain them (settings without effect, shared storage, missing parameters, the
collectives and the optimizer as they ran, replicas that disagree).

The rules are the analysis wing's (``sweep.analysis.compare``: each rank's comparison;
``sweep.analysis.judging``: the rank a job is judged by, the replicas, the verdict); this
module calls them on the ranks' results and records what they return.
Shared by the built-in job (``sweep.run.job``) and ``runner=command`` (``sweep.run.command``).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
from omegaconf import DictConfig

from sweep.analysis.collectives import lr_notes
from sweep.analysis.dtypes import dtype_name, override_notes, precision_notes
from sweep.analysis.compare import (MISSING_PREFIX, RANDOM_DRAWS_NOTE, compare_losses, printed_note, printed_resolution,
                                    summed_loss_note)
from sweep.report.notes import text_of
from sweep.analysis.judging import (Disagreements, JudgedLosses, arises_after_reduction, key_shards, ranked_notes,
                                    ranks_apart, replica_check, replica_reason, start_tensor, verdict, worst_rank)
from sweep.analysis.evidence import first_diff_over_ranks
from sweep.analysis.rounding import twin_dtype
from sweep.findings.places import missing_text
from sweep import frameworks
from sweep.config.enums import as_str
from sweep.config.schema import world_size
from sweep.io import read_array, read_floats
from sweep.records import JobRecord, Note, RankResult


def judge(cfg: DictConfig, record: JobRecord, ranks: List[RankResult], standalone: List[Any],
          standalone_lrs: Optional[List[float]] = None, standalone_buffers: Optional[Dict[str, Any]] = None,
          twin: Optional[Dict[str, Any]] = None, twin_source: str = "twin",
          standalone_norms: Optional[Dict[str, Any]] = None, standalone_decay: Optional[Dict[str, float]] = None
          ) -> None:
    """Fill the record from the ranks' results: every rank judged against the standalone
    sequence (``sweep.analysis.compare.compare_losses``; the job is judged by its worst rank,
    ``sweep.analysis.judging.worst_rank``), losses, weights moved, dtypes, timings, notes,
    the replicas (``replica_check``), and the verdict (``ok`` or ``fail`` with its reason,
    ``sweep.analysis.judging.verdict``: a job fails if any rank fails, if its ranks disagree
    beyond tolerance, if the copies do not start equal, if replicas disagree, or if the copies
    end apart in a buffer: ``standalone_buffers``, the standalone copy's after the last step,
    ``RankResult.final["standalone"]``, against each rank's :func:`ended_apart`); the rounding
    envelope from the standalone copy's ``twin`` (``sweep.train.twin``; ``twin_source``: where its
    losses came from), ``sweep.analysis.envelope.measure``; then the gradients as they ran
    (:func:`gradient_notes`: ``standalone_norms``, the standalone copy's per-step gradient norms
    where this launch did not train it; ``standalone_decay``, its weight decay per parameter, there
    too: :func:`_decay_from_elsewhere`) and, for every field left empty, why (:func:`never_silent`)."""
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
    # (only rank 0 trains the standalone copy, except in a tracing rerun or with shared weights:
    # sweep.train.standalone_everywhere)
    record.ranks_agree = all(
        (r.standalone is None or r.standalone == first.standalone) and (sharded or r.distributed == first.distributed)
        for r in ranks
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
    summed = summed_loss_note(ref, distributed, world_size(cfg), as_str(cfg.train.loss)) if sharded else None
    if summed is not None:  # a loss that sums over the batch: each rank's is its shard's part
        record.notes.append(summed)
    missing = list({(m["name"], m["only_in"]): m for r in ranks for m in (r.initial or {}).get("missing", [])}
                   .values())
    if missing:
        held = [r.rank for r in ranks if (r.initial or {}).get("missing")]
        where = "" if len(held) == len(ranks) or len(ranks) == 1 else \
            f" (on rank{'s' if len(held) > 1 else ''} {', '.join(map(str, held))} only)"
        record.notes.append(MISSING_PREFIX + missing_text(sorted(missing, key=lambda m: (m["name"], m["only_in"])))
                            + where)
    record.collectives, record.optimizer = _inside_notes(record, ranks)
    _decay_from_elsewhere(record, standalone_decay)
    record.features = first.features
    # the lr each copy ran with, step by step (standalone_lrs: from the cached baseline or the
    # standalone-only process, where this launch did not train that copy)
    lrs = dict((first.features or {}).get("lr") or {})
    if standalone_lrs and not lrs.get("standalone"):
        lrs["standalone"] = standalone_lrs
        record.features = dict(first.features or {}, lr=lrs)
    record.notes.extend(n for n in lr_notes(lrs.get("standalone"), lrs.get("distributed")) if n not in record.notes)
    unequal = [(r.rank, r.initial["first"]) for r in ranks if r.initial and r.initial.get("first")]
    ended = ended_apart(cfg, ranks, standalone_buffers, len(ref), (twin or {}).get("buffers"))
    record.replicas = replica_check(ranks, buffers=not sharded)
    if sharded and record.replicas is not None:
        record.not_observed["replicas.buffers"] = ("buffers not held against their replicas: with data.split=sharded "
                                                   "each rank's running statistics are its shard's")
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
    ran = precision_notes(first.dtypes_observed, policies(cfg), master, first.dtypes_observed_standalone)
    record.notes.extend(n for n in ran if n not in record.notes)
    for phase in ("setup", "standalone", "distributed"):
        values = [r.timings_s[phase] for r in ranks if phase in r.timings_s]
        if values:
            record.timings_s[phase] = max(values)
    record.envelope = envelope_record(cfg, ref, distributed, [standalone, *(r.distributed for r in ranks)], twin,
                                      twin_source)
    record.comparison = comparison.to_dict()
    if printed:  # equal means equal to the printed precision: the comparison says so too
        record.comparison["resolution"] = max(printed.values())
    if unequal and not record.first_tensor:  # the copies do not start equal: that is the first difference
        record.first_tensor = start_tensor(unequal)
    if ended and not record.first_tensor:  # they end apart in a statistic no loss reads: that is the one
        record.first_tensor = start_tensor(ended)
    losses = JudgedLosses({rank: c for rank, (_, c) in judged.items()}, record.judged_rank, standalone, distributed)
    record.status, reasons = verdict(losses, cfg.compare.rtol, cfg.compare.atol,
                                     Disagreements(apart, unequal, record.replicas, ended))
    record.reason = "; ".join(text_of(n) for n in reasons) or None  # the reasons' sentences (N180-N186)
    # what fails besides the losses' tolerance: no envelope of the losses explains those
    both_nonfinite = any(c.first_nonfinite_step is not None for _, (_, c) in judged.items())
    record.envelope["other_failures"] = [what for what, found in (
        ("ranks disagree", apart), ("the copies do not start equal", unequal),
        ("replicas disagree", (record.replicas or {}).get("first_step") is not None),
        ("the copies end apart", ended), ("a non-finite loss", both_nonfinite)) if found]
    gradient_notes(cfg, record, ranks, standalone_norms)
    forward_writes(record, [r.features for r in ranks])
    stray_collectives(record, [r.features for r in ranks])
    never_silent(cfg, record)


def record_config(cfg: DictConfig) -> Dict[str, Any]:
    """The job's config as a plain dict (``sweep.analysis`` reads plain dicts)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg)


def envelope_record(cfg: DictConfig, standalone: List[float], distributed: List[Any],
                    compared: List[List[Any]], twin: Optional[Dict[str, Any]], source: str) -> Dict[str, Any]:
    """``JobRecord.envelope`` (``sweep.analysis.envelope.measure``) of the judged sequences,
    or why it was not measured (``compare.envelope=false``; a command job: no twin can run)."""
    from sweep.analysis.envelope import measure

    if as_str(cfg.runner.name) == "command":
        why = ("runner=command: no twin of the standalone copy can train inside your command (repeat=N measures "
               "how far its launches part instead)")
    elif not cfg.compare.get("envelope", True):
        why = "compare.envelope=false"
    else:
        why = "no twin of the standalone copy trained"
    found = measure(standalone, read_floats(distributed), [read_floats(c) for c in compared if c], twin,
                    float(cfg.compare.get("envelope_margin", 4.0)), source)
    return found if found["measured"] or twin else dict(found, why=why)


def policies(cfg: DictConfig) -> List[Dict[str, Any]]:
    """The job's mixed-precision policies as plain values: the root ``mp_policy`` and each
    ``mp_policy.overrides`` entry merged into it (``sweep.engines.wrapping.policy_for``)."""
    from omegaconf import OmegaConf

    from sweep.engines.wrapping import POLICY_KEYS, policy_for

    root = OmegaConf.to_container(cfg.mp_policy, resolve=True)
    found = [{k: root.get(k) for k in POLICY_KEYS}]
    for override in (cfg.mp_policy.get("overrides") or {}).values():
        merged = OmegaConf.to_container(policy_for(cfg.mp_policy, override), resolve=True)
        found.append({k: merged.get(k) for k in POLICY_KEYS})
    return found


def across_verdict(cfg: DictConfig, record: JobRecord) -> None:
    """A cross-framework job (``baseline.framework``) whose tracing rerun finds, beyond float
    rounding, a buffer that parts after the forward of a step whose weights both copies still hold
    alike (the first tensor, or the first beyond rounding, of kind ``buffer`` before any weight or
    gradient that differs: step 0's, from equal initial weights), fails, naming it: the two
    frameworks update that statistic otherwise (a ported BatchNorm's momentum, variance or eps),
    which no training loss reads. Beyond rounding is beyond its rounding envelope (the standalone
    copy's twin, traced in the same framework: ``sweep.analysis.trace.locate``). Replicated data
    only (with sharded data each rank's statistics are its shard's)."""
    found = record.first_tensor or {}
    real = found.get("beyond_rounding") if "beyond_rounding" in found else found
    if not real or real.get("kind") != "buffer" or as_str(cfg.data.split) == "sharded":
        return
    why = (f"the frameworks part in buffer {real['name']} after the forward of step {real['step']} (rel "
           f"{float(real['rel_diff']):.3g}) while every weight before it agrees: the two frameworks update this "
           "statistic otherwise (a ported norm's momentum, variance or eps), which no training loss reads")
    record.notes.append(why)
    if record.status == "ok":
        record.status, record.reason = "fail", why
    elif record.status == "fail" and why not in (record.reason or ""):
        record.reason = f"{record.reason}; {why}"


def ended_apart(cfg: DictConfig, ranks: List[RankResult], standalone: Optional[Dict[str, Any]],
                steps: int, twin: Optional[Dict[str, Any]] = None) -> List[Tuple[int, Dict[str, Any]]]:
    """``[(rank, sweep.analysis.trace.final_buffers's dict)]`` of the ranks whose
    distributed copy's buffers after the last step (``RankResult.final["distributed"]``)
    differ from the standalone copy's beyond their rounding envelope (``twin``: the standalone
    copy's twin's buffers after the last step, ``sweep.train.twin``, which trained where the
    standalone copy did; without it any difference; a sharding engine's shards against the matching
    slices: ``to_shards``), by one name map across frameworks (``baseline.framework``:
    ``sweep.models.convert.canonical_name``, PyTorch-only buffers left out). ``[]`` with sharded data
    (each rank's running statistics are its shard's, by design) or where either side was not recorded."""
    from sweep.analysis.envelope import EnvelopeSetting
    from sweep.analysis.trace import final_buffers, to_shards
    from sweep.config.sections.baseline import foreign_framework
    from sweep.models.convert import TORCH_ONLY, canonical_name

    if cfg.data.split == "sharded" or not isinstance(standalone, dict) or "note" in standalone:
        return []
    own = str(cfg.framework.name)
    other = foreign_framework(cfg) or own

    def key(name: str, framework: str) -> Optional[str]:  # one framework: its own names
        if other == own:
            return name
        return None if name.rpartition(".")[2] in TORCH_ONLY else canonical_name(name, framework)

    def named(values: Dict[str, Any], framework: str) -> Dict[str, np.ndarray]:
        return {key(k, framework): read_array(v) for k, v in values.items() if key(k, framework) is not None}

    found = []
    for r in ranks:
        theirs = (r.final or {}).get("distributed")
        if not isinstance(theirs, dict) or "note" in theirs:
            continue
        arrays = [{"buffer": named(theirs, own)}]
        ours = to_shards([{"buffer": named(standalone, other)}], arrays, r.rank)
        mine = to_shards([{"buffer": named(twin, other)}], arrays, r.rank)[0]["buffer"] \
            if isinstance(twin, dict) and "note" not in twin else None
        first = final_buffers(ours[0]["buffer"], arrays[0]["buffer"], max(steps - 1, 0),
                              float(cfg.compare.noise_floor), twin=mine,
                              envelope=EnvelopeSetting(float(cfg.compare.get("envelope_margin", 4.0)),
                                                       twin_dtype(record_config(cfg))))
        if first is not None:
            found.append((r.rank, frozen(first, r, lambda name: key(name, own))))
    return found


def frozen(first: Dict[str, Any], rank: RankResult, key: Callable[[str], Optional[str]]) -> Dict[str, Any]:
    """``first`` (:func:`ended_apart`'s buffer on ``rank``) with ``"frozen": True`` where the
    distributed copy's never moved from its value before the first step
    (``RankResult.final["unchanged"]``, ``sweep.train.final_state``) though the standalone copy's,
    equal at the start, ended elsewhere: the forward's update never reached it or was lost; and
    ``"held": {"dim", "shard", "shards"}`` where the engine holds it as a shard on this rank
    (``RankResult.replica["tensors"]`` read by ``sweep.analysis.judging.key_shards``, e.g.
    ``"(32,)@0:1/2"``; the engines shard dim 0: hyper-parallel's hsdp shards every
    parameter, a BatchNorm's moving statistics too, and swaps the gathered copy the forward
    updates for the shard when it reshards). ``key``: a buffer's name on ``rank`` to
    ``first``'s (one map across frameworks)."""
    names = ((rank.final or {}).get("unchanged") or {}).get("distributed") or []
    raw = next((n for n in names if key(n) == first["name"]), None)
    if raw is None:
        return first
    held = [s for s in key_shards(((rank.replica or {}).get("tensors") or {}).get(f"buffer:{raw}") or "")
            if s["shards"] > 1]
    if not held:
        return dict(first, frozen=True)
    return dict(first, frozen=True, held={"dim": 0, "shard": held[-1]["shard"], "shards": held[-1]["shards"]})


def _inside_notes(record: JobRecord, ranks: List[RankResult]) -> tuple:
    """The job's ``collectives`` and ``optimizer`` (rank 0's, with every rank's notes;
    ``sweep.train.torch_rank.collectives_record`` / ``optimizer_record``,
    ``sweep.train.mindspore_rank.ledger_record``), their notes added to ``record.notes``.
    Where the ranks recorded no ledger (a MindSpore standalone-only run), ``collectives``
    says it was not observed."""
    first = ranks[0]
    if first.collectives is None:  # (never silent: an empty field says why)
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
        # a note on the standalone copy or comparing the copies is said by the ranks that trained it (rank 0 of a
        # launch): over those, not as if the other ranks had said otherwise
        holders = [r for r in ranks if (r.optimizer or {}).get("standalone")]
        optimizer["notes"] = [*ranked_notes({r.rank: [n for n in (r.optimizer or {}).get("notes") or []
                                                      if not _standalone_side(n)] for r in ranks}, len(ranks)),
                              *ranked_notes({r.rank: [n for n in (r.optimizer or {}).get("notes") or []
                                                      if _standalone_side(n)] for r in holders}, len(holders))]
        notes += optimizer["notes"]
        if optimizer.get("standalone") is None:  # never silently empty (issue 36)
            optimizer["standalone"] = {"note": f"not observed: {_standalone_elsewhere(record)}"}
    record.notes.extend(n for n in notes if n not in record.notes)
    return collectives, optimizer


def _standalone_side(said: Any) -> bool:
    """Whether an optimizer note is about the standalone copy or compares the two copies (weight
    decay ``N121``, parameters held ``N131``, a setting of the standalone copy's ``N120``): only
    a rank that trained the standalone copy can say it."""
    return isinstance(said, Note) and (said.code in ("N121", "N131") or said.values.get("copy") == "standalone")


def _decay_from_elsewhere(record: JobRecord, standalone: Optional[Dict[str, float]]) -> None:
    """Where the standalone copy trained elsewhere (the sweep's cache, ``order=separate``'s
    process) its weight decay per parameter (``standalone``) still meets the distributed copy's
    (``record.optimizer["decay"]``): the note ``N121`` where they differ
    (``sweep.analysis.collectives.decay_notes``), as where both trained in one rank."""
    from sweep.analysis.collectives import decay_notes

    optimizer = record.optimizer
    decay = (optimizer or {}).get("decay") or {}
    if not standalone or not decay.get("distributed") or decay.get("standalone"):
        return
    optimizer["decay"] = dict(decay, standalone=standalone)
    found = [n for n in decay_notes(optimizer["decay"]) if n not in record.notes]
    optimizer["notes"] = list(optimizer.get("notes") or []) + found
    record.notes.extend(found)


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
    overrides set; an ``engine.impl.<framework>`` of another framework than the job's;
    ``weights.transfer=shared`` when neither copy moved the other (the
    engine copied the parameters); a copy whose weights moved while the other trained
    (shared storage: the copies are not independent); ``zero_grad=true`` set by the
    overrides when the engine's gradients are functional (nothing to clear)."""
    from omegaconf import OmegaConf

    from sweep import engines
    from sweep.config.schema import field_default

    notes: List[str] = []
    if as_str(cfg.runner.name) == "command":  # no engine ran: the user's command did
        return notes
    engine = engines.engine_class(cfg, str(cfg.framework.name))
    overridden = {str(o).partition("=")[0].lstrip("+~") for o in record.overrides}
    for key in engine.unused_fields:
        # set itself, or by a group the overrides chose (mp_policy=bf16) to another value than its default
        group = key.split(".")[0] in overridden and OmegaConf.select(cfg, key) != field_default(key)
        if key in overridden or group:
            notes.append(f"{key} had no effect: engine={cfg.engine.name} does not use it")
    own = str(cfg.framework.name)
    for key in sorted(k for k in overridden if k.startswith("engine.impl.") and k != f"engine.impl.{own}"):
        notes.append(f"{key} had no effect: framework={own} builds its engine from engine.impl.{own}")
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



def gradient_notes(cfg: DictConfig, record: JobRecord, ranks: List[RankResult],
                   standalone_norms: Optional[Dict[str, Any]] = None) -> None:
    """The gradients as they ran, into the record (``record.reductions``) and its notes: each
    copy's gradient norms per step (the standalone copy's from a rank, or ``standalone_norms``
    where it trained elsewhere; the distributed copy's of every rank) held against each other
    where the job fails beyond its rounding envelope (``sweep.analysis.reductions.norm_notes``: the step where they part and
    where in the step, before the losses show it), the distributed copy's first step whose
    gradient buffers still held the last step's where ``zero_grad`` is on (it had no effect), and
    ``record.zero_grad_effective`` as observed (``None`` where the engine keeps no buffer to see)."""
    from sweep.analysis.dtypes import dtype_name
    from sweep.analysis.reductions import NORM_REL, LossStep, norm_notes
    from sweep.config.sections.baseline import foreign_framework
    from sweep.models.convert import canonical_name

    own = [(r.rank, (r.reductions or {}).get("distributed")) for r in ranks if (r.reductions or {}).get("distributed")]
    alone = next(((r.reductions or {}).get("standalone") or {} for r in ranks if (r.reductions or {}).get("standalone")),
                 {})
    norms = alone.get("norms") or standalone_norms
    other = foreign_framework(cfg)
    if norms and other:  # one name map across frameworks
        norms = dict(norms, params=[canonical_name(n, other) for n in norms.get("params") or []])
        own = [(rank, dict(d, norms=dict(d["norms"], params=[canonical_name(n, str(cfg.framework.name))
                                                              for n in d["norms"].get("params") or []])))
               for rank, d in own]
    if own:
        first = dict(own[0][1])
        record.reductions = {"standalone": norms, "distributed": {str(rank): d["norms"] for rank, d in own},
                             "found": {str(rank): d.get("found") for rank, d in own},
                             "held": {str(rank): d.get("held") for rank, d in own if d.get("held")} or None,
                             "sizes": first.get("sizes")}
    elif as_str(cfg.runner.name) != "command":
        record.not_observed["reductions"] = "no rank recorded its gradients (a copy trained without its ranks)"
    held = [(rank, d["held"]) for rank, d in own if d.get("held")]
    if cfg.zero_grad and own:
        if frameworks.load(cfg).grads_persist:
            record.zero_grad_effective = not held  # observed: every step began with its gradients cleared, or not
        elif held:  # an engine's own accumulation buffers (MindSpore's gradients are otherwise functional)
            record.zero_grad_effective = False
    if held and cfg.zero_grad:
        rank, first_held = min(held, key=lambda x: x[1]["step"])
        step, stale = first_held["step"], first_held["norms"]
        worst = max(stale, key=stale.get)
        record.notes.append(f"zero_grad had no effect in the distributed copy: when step {step} began its gradients "
                            f"still held the last step's ({len(stale)} of them, {worst} with norm {stale[worst]:.3g}), "
                            "so each step's gradients are added to the last's"
                            + ("" if len(held) == len(ranks) else f" (rank{'s' if len(held) > 1 else ''} "
                               f"{', '.join(str(r) for r, _ in held)})"))
    from sweep.analysis.envelope import within

    # a job whose losses stay within their rounding envelope fails its tolerance by rounding: its norms part by
    # rounding too, and no place in the step is said of them (issue 49: every rounding decision reads the envelope)
    if record.status != "fail" or not norms or not own or within(record.envelope):
        if own and not norms:
            record.not_observed["reductions.standalone"] = "the standalone copy's gradient norms were not recorded " \
                                                           "(a baseline from a file or a command)"
        return
    dtype = dtype_name(cfg.mp_policy.get("param_dtype"), "") or "float32"
    # where the copies are bit-identical until a fault (replicated data in float32), the first differing loss;
    # else (sharded data, a lower precision: they differ from step 0 by rounding) the first failing one
    exact = as_str(cfg.data.split) != "sharded" and dtype == "float32" and other is None
    loss_step = (record.comparison or {}).get("first_diff_step" if exact else "first_fail_step")
    found = []
    for rank, d in own:
        for note in norm_notes(norms, d["norms"], NORM_REL.get(dtype, NORM_REL["float32"]),
                               LossStep(loss_step, "differ" if exact else "fail"), as_str(cfg.data.split) == "sharded",
                               cfg.train.clip_grad_norm):
            found.append((int(note.values["step"]), rank, note))
    if found:
        step, rank, note = min(found, key=lambda f: f[:2])
        # with nothing compared before the reduction (sharded data), the reduction check of that step (N140) says
        # whether the reduction itself ran another op than the mean
        if any(isinstance(n, Note) and n.code == "N140" and n.values.get("step") == step for n in record.notes):
            note = Note(note.code, dict(note.values, ran_other=True), note.ranks)
        if int(cfg.train.grad_accum_steps) > 1:  # before the reduction: the micro-batches' accumulation too
            note = Note(note.code, dict(note.values, accum=int(cfg.train.grad_accum_steps)), note.ranks)
        every = {r for s, r, _ in found if s == step}
        record.notes.append(note if len(every) == len(own) or len(own) == 1 else note.on_ranks([rank]))


TRACE_PENDING = ("not traced: the copies agree at every step, so no tracing rerun ran",
                 "not traced: compare.trace_after=0",
                 "not traced: the tracing rerun runs for jobs whose copies differ, after the job's own run")
EMPTY_BECAUSE = {
    "reason": "the job passes: no reason to give",
    "rank_comparisons": "data.split=sharded: one comparison, of the mean over the ranks' losses (each rank's loss is "
                        "its shard's)",
    "resolution": "the losses are the tensors' own floats, not read from printed text",
    "pool": "the ranks ran in a launch of their own (no shared launch)",
    "baseline": "the standalone copy trained in this job's own launch",
    "log_tails": "no rank failed: no log to quote",
    "traceback": "the job raised nothing",
    "teardown_note": "the launcher exited cleanly",
    "repeats": "repeat=1: the job ran once",
    "nondeterministic": "repeat=1: nothing to hold the run against",
    "repeat_spread": "repeat=1: nothing to hold the run against",
    "engine_notes": "the engine did nothing besides the library's own behaviour",
    "weights_moved": "one copy trained in this launch (the standalone sequence came from elsewhere): neither copy "
                     "could move the other's weights",
    "engine": "the engine records nothing of its own (no library entry point, workaround or emulated collective "
              "to name)",
    "notes": "nothing to note: every setting had its effect and everything observed ran as configured",
    "slurm": "not a SLURM job: its launcher ran it without SLURM (hydra/launcher=slurm runs each job as one)",
}


def never_silent(cfg: DictConfig, record: JobRecord) -> None:
    """Why each field of the record that is empty is empty, in ``record.not_observed`` (issue
    51: no ``result.json`` field empty without a reason): the record's own fields (a passing job
    has no reason, a job run once no repeats, ...), the traced ones before the tracing rerun
    (``first_tensor``, ``first_module``: replaced by :func:`explain_traced` after it), the
    dtypes observed that stayed unknown, and the collectives' divide factors. Called again after
    the tracing rerun and the repeats (``sweep.run.job``), it only adds what is still missing."""
    for name in list(EMPTY_BECAUSE) + ["first_tensor", "first_module"]:  # filled since: no longer empty
        if name in record.not_observed and getattr(record, name, None) not in (None, [], {}) and \
                record.not_observed[name] in (EMPTY_BECAUSE.get(name),) + TRACE_PENDING:
            del record.not_observed[name]
    for name, why in EMPTY_BECAUSE.items():
        value = getattr(record, name, None)
        if value in (None, [], {}) and name not in record.not_observed:
            if name == "rank_comparisons" and as_str(cfg.data.split) != "sharded":
                continue
            record.not_observed[name] = why
    for name in ("first_tensor", "first_module"):
        if getattr(record, name) is None and name not in record.not_observed:
            record.not_observed[name] = (
                TRACE_PENDING[0] if (record.comparison or {}).get("first_diff_step") is None else
                TRACE_PENDING[1] if not cfg.compare.trace_after else TRACE_PENDING[2])
    observed = (record.dtypes or {}).get("observed") or {}
    for key, value in observed.items():
        if value is None and f"dtypes.observed.{key}" not in record.not_observed:
            record.not_observed[f"dtypes.observed.{key}"] = _dtype_unknown(cfg, record, key)
    collectives = record.collectives or {}
    if collectives and collectives.get("divide_factors") is None and "collectives.divide_factors" not in \
            record.not_observed:
        record.not_observed["collectives.divide_factors"] = (
            "only FSDP2 chooses gradient divide factors in Python (its foreach_reduce); this engine's scale is "
            "judged from the gradients as they ran (reductions)")
    if collectives and not collectives.get("calls") and "collectives.calls" not in record.not_observed:
        record.not_observed["collectives.calls"] = collectives.get("unchecked") or (
            "no collective was called where the ledger watches (one rank, or a copy that reduces nothing)")
    nested = {
        "optimizer.loss_scale": (lambda: all(v is None for v in ((record.optimizer or {}).get("loss_scale") or {})
                                              .values()) and bool((record.optimizer or {}).get("loss_scale")),
                                 "no gradient scaler (train.grad_scaler.enabled=false): the loss is not scaled"),
        "features.lr": (lambda: record.features is not None and not (record.features or {}).get("lr"),
                        "no copy recorded the lr its steps ran with (MindSpore's steps: optimizer.lr, or "
                        "train.lr_scheduler's)"),
        "reductions.held": (lambda: record.reductions is not None and not record.reductions.get("held"),
                            "every step began with the distributed copy's gradients cleared (or it keeps none)"),
    }
    for key, (empty, why) in nested.items():
        if key not in record.not_observed and empty():
            record.not_observed[key] = why
    if record.zero_grad_effective is None and "zero_grad_effective" not in record.not_observed:
        record.not_observed["zero_grad_effective"] = (
            "the engine keeps no gradient buffer across steps to look at (functional gradients: value_and_grad "
            "returns fresh ones every step)")


def _dtype_unknown(cfg: DictConfig, record: JobRecord, key: str) -> str:
    """Why ``dtypes.observed[key]`` stayed unknown."""
    if key == "reduce":
        unwatched = frameworks.load(cfg).unwatched_reduce.get(as_str(cfg.engine.name))
        if unwatched:
            return unwatched
        return "no gradient reduction was called where the ledger watches it (one rank, or none made)"
    if key == "optimizer_state":
        return "the optimizer keeps no state tensor (plain SGD)"
    if key == "master_lower":
        return "no master weights held only lower-precision values after any step (nothing written back)"
    return "not observed in step 0"


def batch_stats_note(cfg: DictConfig, module: Optional[Dict[str, Any]], tensor: Optional[Dict[str, Any]]
                     ) -> Optional[str]:
    """Why a norm that keeps running statistics parts with sharded data: the first differing module
    is a forward whose inputs agree, and the first differing tensor is that module's own buffer
    (``bn.running_mean``) after the forward of the same step. It normalises by its batch's
    statistics, and with ``data.split=sharded`` each rank's batch is its shard, not the global
    batch the standalone copy normalises over: the copies differ by design, no engine fault.
    ``None`` where it does not apply."""
    module, tensor = module or {}, tensor or {}
    name = str(module.get("module") or "")
    if as_str(cfg.data.split) != "sharded" or module.get("phase") != "forward" or not name \
            or tensor.get("kind") != "buffer" or tensor.get("after_last_step") \
            or not str(tensor.get("name") or "").startswith(name + ".") or tensor.get("step") != module.get("step"):
        return None
    return (f"{name} normalises by its batch's statistics (its buffer {tensor['name']} is one): with "
            "data.split=sharded each rank's batch is its shard, not the global batch the standalone copy normalises "
            "over, so the copies differ by design; SyncBatchNorm (torch), or data.split=replicated, gives them one "
            "batch")


def stray_collectives(record: JobRecord, features: List[Optional[Dict[str, Any]]]) -> None:
    """Where the model called ``torch.distributed`` collectives in the standalone copy's or the
    twin's steps on any rank (``features``: the ranks' ``RankResult.features``,
    ``stray_collectives``, ``sweep.train.observers.single_device``): the note ``N193``, the
    calls summed over the ranks by copy and op."""
    calls: Dict[str, Dict[str, int]] = {}
    for found in features:
        for copy, ops in ((found or {}).get("stray_collectives") or {}).items():
            for op, n in ops.items():
                calls.setdefault(copy, {})[op] = calls.get(copy, {}).get(op, 0) + int(n)
    if calls:
        from sweep.records import note

        found_note = note("N193", calls=calls)
        if found_note not in record.notes:
            record.notes.append(found_note)


def standalone_unlike(record: JobRecord, rerun: List[RankResult]) -> List[int]:
    """The ranks of a tracing rerun whose standalone copy gave other losses than the job's standalone
    sequence (``record.losses["standalone"]``), bit for bit over the rerun's steps: the same code,
    weights and data, so a model that computes otherwise on that rank (a forward that reads its
    rank) or kernels that are not deterministic; their trace compares the distributed copy with
    that copy, not the baseline. Adds the note ``N194`` (those ranks and the first such step) unless
    every rank is one (then no rank is left out). Returns those ranks, sorted."""
    baseline = (record.losses or {}).get("standalone")
    if not baseline:
        return []
    first: Dict[int, int] = {}
    for result in rerun:
        ours = result.standalone or []
        step = next((i for i, (a, b) in enumerate(zip(ours, baseline)) if not _same_float(a, b)), None)
        if step is not None:
            first[result.rank] = step
    if not first or len(first) == len([r for r in rerun if r.standalone]):
        return []
    from sweep.records import note

    found = note("N194", ranks=sorted(first), step=min(first.values()))
    if found not in record.notes:
        record.notes.append(found)
    return sorted(first)


def _same_float(a: Any, b: Any) -> bool:
    """Equal bit for bit as read back (NaN equals NaN; ``"nan"``/``"inf"`` strings as floats); a
    value that is no number equals only itself."""
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        return a == b
    return x == y or (x != x and y != y)


def forward_writes(record: JobRecord, features: List[Optional[Dict[str, Any]]]) -> None:
    """Where the standalone copy's forward changed parameters in place (``features``: the ranks'
    ``RankResult.features``, ``forward_writes``, ``sweep.train.observers.forward_writes``) and the
    copies' losses differ: the note ``N192``, and a first differing weight that is one of them
    marked ``forward_writes`` (``sweep.findings.places`` then says the forward, not the optimizer
    step, changed it)."""
    names = next((list(f["forward_writes"]) for f in features if f and f.get("forward_writes")), None)
    if not names or first_diff_over_ranks(record.rank_comparisons or [record.comparison]) is None:
        return
    from sweep.records import note

    found = note("N192", parameters=names)
    if found not in record.notes:
        record.notes.append(found)
    tensor = record.first_tensor or {}
    if tensor.get("kind") == "weight" and tensor.get("name") in names:
        tensor["forward_writes"] = True


def summed_loss_cause(record: JobRecord) -> None:
    """Where the job's notes say its loss sums over the batch (``N191``), the first tensor's
    factor (``x0.5 = 1/world_size``) is that loss's, not a reduction dividing twice: its causes
    say so (``scale_causes["causes"]``, read by ``sweep.findings.places``)."""
    from sweep.analysis.collectives import SCALE_TOL

    summed = next((n for n in record.notes if isinstance(n, Note) and n.code == "N191"), None)
    causes = (record.first_tensor or {}).get("scale_causes")
    if summed is not None and causes and abs(float(causes["ratio"]) - float(summed.values["ratio"])) \
            <= SCALE_TOL * float(summed.values["ratio"]):
        causes["causes"] = ["the loss sums over the batch (N191): each rank's is its shard's part"]


def norms_after_trace(record: JobRecord) -> None:
    """Once the tracing rerun has named the first tensor beyond rounding: a gradient norm note
    (``N144``) of a later step than that weight or gradient goes (the weights already differ
    there, so the gradients follow: a consequence, not where the copies part; the judge, before
    the rerun, could only hold the norms against the first failing loss on sharded data)."""
    place = record.first_tensor or {}
    if isinstance(place.get("beyond_rounding"), dict):
        place = place["beyond_rounding"]
    if place.get("kind") not in ("weight", "grad") or place.get("step") is None or place.get("note"):
        return
    record.notes = [n for n in record.notes if not (isinstance(n, Note) and n.code == "N144"
                                                    and int(n.values.get("step", -1)) > int(place["step"]))]


def replicas_after_trace(record: JobRecord) -> None:
    """Once the tracing rerun has named the first tensor: where it places the fault after the
    gradient reduction (``sweep.analysis.judging.arises_after_reduction``), the reason's
    replicas sentence says so instead of blaming the reduction (the judge, before the rerun,
    could not tell). The sentence is re-rendered by the one function that made it."""
    replicas = record.replicas or {}
    if replicas.get("first_step") is None or not record.reason or \
            not arises_after_reduction(record.first_tensor, record.notes):
        return
    before, after = (text_of(replica_reason(replicas, (), after)) for after in (False, True))
    record.reason = record.reason.replace(before, after)
