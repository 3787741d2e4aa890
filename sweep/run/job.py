"""One Hydra job: validate, launch the ranks, collect their losses, compare, record.

Writes into the job's output dir (``hydra.runtime.output_dir``; layout in
``sweep.layout``): ``job.yaml`` (the resolved config the ranks read), the ranks'
results under ``ranks/``, the logs under ``logs/``, and last, atomically,
``result.json``: a ``sweep.records.JobRecord``.

A job never raises for a failure of its own (Hydra's basic sweeper would abort the
whole multirun): every failure becomes ``status="error"`` or ``"timeout"`` with a reason.
"""

from __future__ import annotations

import math
import platform
import re
import shutil
import signal
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional, Type

import numpy as np
from omegaconf import DictConfig, OmegaConf

import sweep
from sweep.analysis.compare import MISSING_PREFIX, RANDOM_DRAWS_NOTE, compare_losses
from sweep.analysis.modules import first_over_ranks
from sweep.analysis.trace import KINDS, missing_text
from sweep.config.enums import as_str
from sweep.config.schema import (
    NUMERIC,
    fields_with,
    normalize,
    select,
    to_container,
    world_size,
)
from sweep.errors import ConfigError, RecordError
from sweep.frameworks import Framework
from sweep.io import read_floats, read_json, write_json
from sweep.launch import supervise
from sweep.launch.topology import topology_from_env
from sweep.layout import LAUNCHER_LOG, JobDir
from sweep.records import JobRecord, RankResult
from sweep.run import baseline, checks, pool

TAIL_LINES = 15


def timeout_s(cfg: DictConfig) -> float:
    """``execution.timeout_s`` or ``base_timeout_s + per_step_s * steps * world_size`` seconds."""
    if cfg.execution.timeout_s is not None:
        return float(cfg.execution.timeout_s)
    return float(cfg.execution.base_timeout_s + cfg.execution.per_step_s * cfg.steps * world_size(cfg))


def log_tails(job_dir: Path, lines: int = TAIL_LINES, launcher_log: Optional[Path] = None) -> Dict[str, str]:
    """Last ``lines`` lines of every log of the job, by file name; ``launcher_log`` is the
    shared launch's log when the job ran in one (``sweep.run.pool``), and the worker logs
    beside it (a rank that died before it took the job) come as ``pool <name>``."""
    tails = {}
    named = [(p.name, p) for p in sorted(JobDir(job_dir).logs.glob("*.log"))]
    if launcher_log:
        named.append((launcher_log.name, launcher_log))
        named += [(f"pool {p.name}", p) for p in sorted(launcher_log.parent.glob("worker_*.log"))]
    for name, path in named:
        text = path.read_text(errors="replace").splitlines()
        tails[name] = "\n".join(text[-lines:])
    return tails


def _read_ranks(job_dir: Path, world: int) -> List[Optional[RankResult]]:
    ranks: List[Optional[RankResult]] = []
    for r in range(world):
        path = JobDir(job_dir).rank_result(r)
        try:
            ranks.append(RankResult.read(path) if path.exists() else None)
        except RecordError:
            ranks.append(None)
    return ranks


def run(
    cfg: DictConfig, job_dir: Path | str, overrides: Optional[List[str]] = None, sweep_dir: Path | str | None = None,
    share_launches: bool = True,
) -> JobRecord:
    """Run one job and write ``JOB_DIR/result.json``; returns the same record.

    ``sweep_dir`` (a multirun's dir) enables, per ``execution.reuse_baselines``, taking
    the standalone sequence from the sweep's cache (``sweep.run.baseline``), and, with
    ``share_launches`` (jobs run one after another in this process) and
    ``execution.reuse_processes``, running the ranks in a shared launch (``sweep.run.pool``).
    """
    job_dir = Path(job_dir)
    normalize(cfg)
    if cfg.get("resume"):
        previous = completed_result(job_dir, cfg)
        if previous is not None:
            previous.resumed = True
            return previous
    t0 = time.perf_counter()
    record = JobRecord(
        overrides=list(overrides or []),
        versions={"sweep": sweep.__version__, "python": platform.python_version()},
        started=datetime.now(timezone.utc).isoformat(),
    )
    try:
        _run(cfg, job_dir, record, Path(sweep_dir).resolve() if sweep_dir else None, share_launches)
    except KeyboardInterrupt:
        record.status, record.reason = "error", "interrupted (Ctrl-C)"
        _finish(job_dir, record, t0)
        raise
    except ConfigError as exc:
        record.status, record.reason = "error", f"invalid config: {exc}"
    except Exception as exc:  # a job's failure must not abort the sweep
        record.status, record.reason = "error", f"{type(exc).__name__}: {exc}"
        record.traceback = traceback.format_exc()
    _finish(job_dir, record, t0)
    return record


def _comparable(config: Dict[str, Any]) -> Dict[str, Any]:
    """The fields a job's result depends on (roles ``baseline``, ``distributed``,
    ``verdict``; ``sweep.config.schema``)."""
    paths = sorted({p for role in NUMERIC for p in fields_with(role)})
    try:
        return select(config, paths)
    except (KeyError, TypeError):  # a config of another shape
        return {}


def completed_result(job_dir: Path, cfg: DictConfig) -> Optional[JobRecord]:
    """The job's earlier record if it is complete (status ``ok`` or ``fail``) and was made
    with the same config in every field its result depends on; else ``None`` (absent,
    unreadable, errored, timed out, or a different config in that dir)."""
    try:
        previous = JobRecord.read(JobDir(job_dir).result)
    except (OSError, RecordError):
        return None
    if not previous.judged or not previous.config:
        return None
    mine = _comparable(to_container(cfg))
    return previous if mine and _comparable(previous.config) == mine else None


def _finish(job_dir: Path, record: JobRecord, t0: float) -> None:
    record.timings_s["wall"] = time.perf_counter() - t0
    record.finished = datetime.now(timezone.utc).isoformat()
    record.write(JobDir(job_dir).result)


def _run(cfg: DictConfig, job_dir: Path, record: JobRecord, sweep_dir: Optional[Path], share_launches: bool) -> None:
    record.config = to_container(cfg)
    framework = checks.check(cfg)
    world = world_size(cfg)
    record.world_size = world
    paths = JobDir(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(record.config), paths.config)

    env = pool.rank_env(cfg)
    limit = timeout_s(cfg)
    shutil.rmtree(paths.ranks, ignore_errors=True)  # nothing stale from an earlier attempt
    fields = baseline.key_fields(record.config, world) if sweep_dir and cfg.execution.reuse_baselines else None
    cached = baseline.lookup(sweep_dir, fields) if fields else None
    log, outcome = _launch(cfg, framework, job_dir, record, world, env, limit, cached, sweep_dir, share_launches)

    ranks = _read_ranks(job_dir, world)
    missing = [str(r) for r, res in enumerate(ranks) if res is None]
    if (cfg.order == "separate" or cached) and not paths.standalone_result.exists():
        missing.append("standalone process")
    if missing:
        record.log_tails = log_tails(job_dir, launcher_log=log)
        if outcome.timed_out:
            record.status, record.reason = "timeout", f"no result after {limit:.0f} s from {', '.join(missing)}"
        elif outcome.failed_early:
            record.status = "error"
            record.reason = (f"no result from rank(s) {', '.join(missing)}: a rank died at {outcome.wall_s:.0f} s and "
                             f"the launch was stopped: {outcome.failed_early}; "
                             + failure_cause(outcome.returncode, record.log_tails))
        else:
            record.status = "error"
            record.reason = f"no result from rank(s) {', '.join(missing)}: " + failure_cause(
                outcome.returncode, record.log_tails
            )
        return

    present = [r for r in ranks if r is not None]
    if paths.standalone_result.exists():  # order=separate's process, or the cached baseline
        entry = read_json(paths.standalone_result)
        standalone, observed_standalone = entry["standalone"], entry.get("dtypes_observed_standalone") or {}
    else:
        standalone, observed_standalone = present[0].standalone, present[0].dtypes_observed_standalone
    if fields and not cached:
        baseline.store(sweep_dir, fields, standalone, job_dir, dtypes_observed=observed_standalone)
    _judge(cfg, record, present, standalone)
    record.dtypes["observed_standalone"] = observed_standalone  # what the standalone copy ran (baseline.precision)
    # (the rerun's dir holds no cached baseline: its ranks train both copies, to trace them)
    _trace(cfg, framework, job_dir, record, world, env, limit, sweep_dir, share_launches)
    run_repeats(cfg, framework, job_dir, record, world, env, limit, _sequences(cfg, present, standalone))
    if outcome.returncode not in (0, None):
        record.teardown_note = (
            f"launcher exited with code {outcome.returncode} after every rank had written its result "
            "(e.g. gloo SIGABRT at interpreter shutdown); judged by the results"
        )


def _launch(
    cfg: DictConfig, framework: Type[Framework], job_dir: Path, record: JobRecord, world: int, env: Dict[str, str],
    limit: float, cached: Optional[Dict[str, Any]], sweep_dir: Optional[Path], share_launches: bool,
) -> tuple[Optional[Path], supervise.LaunchOutcome]:
    """Put the standalone baseline in place (from the cache, or from its own process with
    ``order=separate``), then run the ranks: in the sweep's shared launch, or in a launch
    of their own (across nodes under a multi-node SLURM allocation). Returns the shared
    launch's log (``None`` for a launch of its own) and the outcome."""
    paths = JobDir(job_dir)
    if cached:
        # The ranks see ranks/standalone.json and train the distributed copy only.
        write_json(paths.standalone_result, {"standalone": cached["standalone"], "from": cached["job_dir"],
                                             "dtypes_observed_standalone": cached.get("dtypes_observed") or {}})
        record.baseline = {"source": "cache", "job_dir": cached["job_dir"]}
    elif cfg.order == "separate":
        # The standalone baseline in a process of its own, before the distributed launch.
        standalone_spec = supervise.LaunchSpec(
            argv=[sys.executable, "-m", "sweep.train", str(job_dir), "--phase", "standalone"],
            env=env, log_path=paths.logs / "standalone.log", timeout_s=limit,
        )
        record.timings_s["standalone_launch"] = supervise.run(standalone_spec).wall_s
    argv, kill_tag, log, outcome = _run_ranks(cfg, framework, job_dir, record, world, env, limit, sweep_dir,
                                              share_launches)
    record.launch = {
        "kill_tag": kill_tag,
        "argv": argv,
        "returncode": outcome.returncode,
        "timed_out": outcome.timed_out,
        "killed": outcome.killed,
        "timeout_s": limit,
    }
    record.timings_s["launch"] = outcome.wall_s
    return log, outcome


def _run_ranks(
    cfg: DictConfig, framework: Type[Framework], run_dir: Path, record: JobRecord, world: int, env: Dict[str, str],
    limit: float, sweep_dir: Optional[Path], share_launches: bool,
) -> tuple[List[str], str, Optional[Path], supervise.LaunchOutcome]:
    """Run the ranks on ``run_dir`` (a job dir holding ``job.yaml``): in the sweep's shared
    launch, or in a launch of their own (across nodes under a multi-node SLURM allocation:
    srun, one launcher per node, ``sweep.run.cluster``). Returns ``(argv, kill_tag, shared
    launch's log or None, outcome)``."""
    topology = topology_from_env(None, world)
    if sweep_dir and share_launches and cfg.execution.reuse_processes and not topology.multi_node:
        rank_pool = pool.get_pool(sweep_dir, record.config, framework, world, env)
        outcome = rank_pool.run_job(run_dir, limit)
        record.pool = {"dir": str(rank_pool.dir), "jobs": rank_pool.jobs}
        return rank_pool.argv, rank_pool.kill_tag, rank_pool.log_path, outcome
    spec = framework.job_launch(cfg.framework.launcher, world, run_dir, env=env, timeout_s=limit, topology=topology)
    return spec.argv, spec.kill_tag, None, supervise.run(spec)


TRACE_DIR = "trace"  # in a job dir: the tracing rerun's own job dir


def _trace(
    cfg: DictConfig, framework: Type[Framework], job_dir: Path, record: JobRecord, world: int, env: Dict[str, str],
    limit: float, sweep_dir: Optional[Path], share_launches: bool,
) -> None:
    """Name the first tensor that differs: rerun the job (``JOB_DIR/trace/``) up to
    ``compare.trace_after`` steps past its first differing step with every gradient and
    weight recorded (``sweep.analysis.trace``), and the weights on to ``compare.onset_steps`` past
    it (the onset from the update differences); its losses are the job's own up to there
    (the same seeds, the same code). Sets ``record.first_tensor`` (the earliest over the
    ranks, with its ``rank``), or a ``note`` saying why nothing was traced."""
    first_diff = min((c["first_diff_step"] for c in record.rank_comparisons or [record.comparison]
                      if c.get("first_diff_step") is not None), default=None)
    if first_diff is None or not cfg.compare.trace_after:
        return
    if not framework.traces_tensors or cfg.order == "separate":
        why = "order=separate trains the copies apart" if cfg.order == "separate" else \
            f"tensor tracing is not wired for framework={framework.name} yet"
        record.first_tensor = {"note": f"not traced: {why}"}
        return
    until = min(int(cfg.steps) - 1, first_diff + int(cfg.compare.trace_after))
    onset_until = min(int(cfg.steps) - 1, first_diff + int(cfg.compare.onset_steps))
    config = dict(record.config, steps=max(until, onset_until) + 1,
                  compare=dict(record.config["compare"], trace_until=until, onset_until=onset_until))
    trace_dir = job_dir / TRACE_DIR
    shutil.rmtree(trace_dir, ignore_errors=True)
    trace_dir.mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(config), JobDir(trace_dir).config)
    began = time.perf_counter()
    _, _, _, outcome = _run_ranks(cfg, framework, trace_dir, JobRecord(config=config), world, env, limit,
                                  sweep_dir, share_launches)
    record.timings_s["trace"] = time.perf_counter() - began
    rerun = [r for r in _read_ranks(trace_dir, world) if r is not None]
    modules = [((r.modules or {}).get("first"), r.rank) for r in rerun if r.modules is not None]
    if modules:
        record.first_module = first_over_ranks(modules) or {"description": next(
            r.modules["description"] for r in rerun if r.modules is not None)}
    later = _ranked_notes({r.rank: (r.collectives or {}).get("notes") or [] for r in rerun}, len(rerun))
    record.notes.extend(n for n in later if n not in record.notes)  # the traced steps' collectives
    found = [(r.first_tensor, r.rank) for r in rerun if r.first_tensor]
    hits = [dict(t, rank=rank) for t, rank in found if "step" in t]
    if hits:
        record.first_tensor = min(hits, key=_first_tensor_order)
        where = _first_tensor_order(record.first_tensor)[:3]  # (real or not, its step, its kind)
        record.first_tensor["ranks"] = [t["rank"] for t in hits if _first_tensor_order(t)[:3] == where]
        module, tensor = record.first_module or {}, record.first_tensor
        if module.get("step") is not None and module["step"] > tensor["step"]:  # came in through an update
            module["description"] += (f"; the weights already differ after step {tensor['step']}'s update "
                                      "(first differing tensor): the module computes on them")
    elif found:
        record.first_tensor = dict(found[0][0], rank=found[0][1])
        if "description" in record.first_tensor:  # the losses differed, the rerun's tensors do not
            record.first_tensor["description"] += (
                f" in the tracing rerun, though this run's losses differ from step {first_diff}: that launch did "
                "not repeat the difference (nondeterministic? repeat=3 tells)")
    else:
        record.first_tensor = {"note": "not traced: the tracing rerun gave no result "
                                       f"({'timed out' if outcome.timed_out else f'exit {outcome.returncode}'})"}


def _first_tensor_order(found: Dict[str, Any]) -> tuple:
    """Which rank's first differing tensor is the job's: a real one (beyond float rounding,
    or its ``beyond_rounding``) before one that is rounding only, so a fault on some ranks
    is not hidden behind another rank's summation-order rounding (sharded data on an HSDP
    mesh); then the earliest real step, kind and rank, then the earliest step, kind, rank."""
    beyond = found.get("beyond_rounding")
    real = found if "beyond_rounding" not in found else beyond
    own = (found["step"], KINDS.index(found["kind"]), found["rank"])
    if real is None:
        return (1, 0, 0) + own
    return (0, real["step"], KINDS.index(real["kind"])) + own


REPEAT_DIR = "repeats"  # in a job dir: repeat i's own job dir is repeats/<i>/


def _sequences(cfg: DictConfig, ranks: List[RankResult], standalone: List[Any]) -> Dict[str, np.ndarray]:
    """The loss sequences one run of a job produced, for comparing runs: ``standalone``
    and each rank's distributed one (``rank<r>``; with ``data.split=sharded`` each over
    its own shard, compared with the same rank of the other runs)."""
    out = {"standalone": np.asarray(read_floats(standalone), dtype=np.float64)}
    for r in ranks:
        out[f"rank{r.rank}"] = np.asarray(read_floats(r.distributed), dtype=np.float64)
    return out


def _max_spread(runs: List[Dict[str, np.ndarray]], keys: List[str]) -> float:
    """Largest |difference| at any step between any two runs' sequences under ``keys``
    (NaN at the same step in both counts as equal; NaN against a number as ``inf``)."""
    worst = 0.0
    for key in keys:
        seqs = [run[key] for run in runs if key in run]
        for seq in seqs[1:]:
            a, b = seqs[0], seq
            if a.shape != b.shape:
                return math.inf
            both_nan = np.isnan(a) & np.isnan(b)
            same_inf = np.isinf(a) & (a == b)
            diff = np.abs(a - b)
            diff[both_nan | same_inf] = 0.0
            diff[np.isnan(diff)] = math.inf
            if diff.size:
                worst = max(worst, float(diff.max()))
    return worst


def repeat_spread(runs: List[Dict[str, np.ndarray]], entries: List[Dict[str, Any]]) -> Dict[str, Any]:
    """How far the repeats of one config disagree: ``distributed_max_abs`` and
    ``standalone_max_abs`` (largest |difference| at one step between two repeats' loss
    sequences, any rank; loss units), and each repeat's ``statuses``,
    ``first_diff_steps`` and ``first_fail_steps`` (in repeat order), with
    ``first_fail_range`` (``[min, max]`` over the repeats that failed, or ``None``)."""
    keys = sorted({k for run in runs for k in run if k != "standalone"})
    fails = [e.get("first_fail_step") for e in entries if e.get("first_fail_step") is not None]
    return {
        "repeats": len(entries),
        "distributed_max_abs": _max_spread(runs, keys),
        "standalone_max_abs": _max_spread(runs, ["standalone"]),
        "statuses": [e["status"] for e in entries],
        "first_diff_steps": [e.get("first_diff_step") for e in entries],
        "first_fail_steps": [e.get("first_fail_step") for e in entries],
        "first_fail_range": [min(fails), max(fails)] if fails else None,
    }


def _repeat_entry(i: int, record: JobRecord) -> Dict[str, Any]:
    """One run's summary (``JobRecord.repeats``)."""
    c = record.comparison or {}
    diffs = [x.get("first_diff_step") for x in record.rank_comparisons or [c] if x.get("first_diff_step") is not None]
    final = None
    if record.losses:
        ref, got = read_floats(record.losses["standalone"]), read_floats(record.losses["distributed"])
        final = float(abs(got[-1] - ref[-1]))
    return {"repeat": i, "status": record.status, "first_diff_step": min(diffs, default=None),
            "first_fail_step": c.get("first_fail_step"), "max_abs_diff": c.get("max_abs_diff"),
            "final_abs_diff": final, "reason": record.reason}


def run_repeats(
    cfg: DictConfig, framework: Type[Framework], job_dir: Path, record: JobRecord, world: int, env: Dict[str, str],
    limit: float, first: Dict[str, np.ndarray],
) -> None:
    """With ``repeat=N > 1``, run the judged job N - 1 more times and record whether the
    runs agree (``record.repeats``, ``nondeterministic``, ``repeat_spread``, and a
    ``nondeterministic: ...`` note when they do not).

    Each repeat is a launch of its own (``JOB_DIR/repeats/<i>/``) with the same config
    and seeds, through the job's own launch path: never the sweep's shared launch (a
    rerun in a reused process would share its state) and never the cached baseline (each
    repeat trains both copies, so a nondeterministic standalone shows too). Repeat 0 is
    the job's run (possibly in the shared launch); its sequences stay the record's.
    Repeats agree when every loss of every rank and the standalone one are equal (to
    ``compare.noise_floor``) and the status is the same. The job's status stays repeat
    0's: the note says how the others differ."""
    n = int(cfg.get("repeat", 1) or 1)
    if n <= 1 or not record.judged:
        return
    entries, runs = [_repeat_entry(0, record)], [first]
    began = time.perf_counter()
    for i in range(1, n):
        rep_dir = job_dir / REPEAT_DIR / str(i)
        shutil.rmtree(rep_dir, ignore_errors=True)
        rep_dir.mkdir(parents=True)
        OmegaConf.save(OmegaConf.create(record.config), JobDir(rep_dir).config)
        scratch = JobRecord(overrides=record.overrides, config=record.config, versions={})
        _, outcome = _launch(cfg, framework, rep_dir, scratch, world, env, limit, None, None, False)
        ranks = _read_ranks(rep_dir, world)
        paths = JobDir(rep_dir)
        if any(r is None for r in ranks) or (cfg.order == "separate" and not paths.standalone_result.exists()):
            why = "timed out" if outcome.timed_out else f"launcher exit {outcome.returncode}"
            entries.append({"repeat": i, "status": "timeout" if outcome.timed_out else "error",
                            "first_diff_step": None, "first_fail_step": None, "max_abs_diff": None,
                            "final_abs_diff": None, "reason": f"no result from every rank ({why})"})
            continue
        present = [r for r in ranks if r is not None]
        standalone = (read_json(paths.standalone_result)["standalone"] if paths.standalone_result.exists()
                      else present[0].standalone)
        _judge(cfg, scratch, present, standalone)
        entries.append(_repeat_entry(i, scratch))
        runs.append(_sequences(cfg, present, standalone))
    record.timings_s["repeats"] = time.perf_counter() - began
    record.repeats = entries
    spread = record.repeat_spread = repeat_spread(runs, entries)
    floor = float(cfg.compare.noise_floor)
    record.nondeterministic = (
        len(runs) < len(entries) or len(set(spread["statuses"])) > 1
        or spread["distributed_max_abs"] > floor or spread["standalone_max_abs"] > floor
    )
    if record.nondeterministic:
        record.notes.append(nondeterminism_note(spread, bool(record.first_tensor and "step" in record.first_tensor)))


def nondeterminism_note(spread: Dict[str, Any], traced: bool) -> str:
    """The note of a job whose repeats disagree (``repeat_spread``; ``traced``: its first
    differing tensor comes from the tracing rerun, another launch). One note: no ``"; "``
    inside, the report splits a job's notes on it."""
    fails = spread["first_fail_range"]
    return (
        f"nondeterministic: {spread['repeats']} repeats disagree (distributed losses differ by up to "
        f"{spread['distributed_max_abs']:.3g}, standalone by up to {spread['standalone_max_abs']:.3g}, "
        f"status {'/'.join(spread['statuses'])}"
        + (f", first failing step {fails[0]}-{fails[1]}" if fails else "")
        + (", the first differing tensor is from the tracing rerun, another launch" if traced else "") + ")"
    )


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


def _judge(cfg: DictConfig, record: JobRecord, ranks: List[RankResult], standalone: List[Any]) -> None:
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
        reasons.append(
            f"{where}{comparison.n_fail}/{comparison.n_steps} steps outside rtol={cfg.compare.rtol}, "
            f"atol={cfg.compare.atol}; first at step {comparison.first_fail_step}{others}"
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

    notes = []
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


def failure_cause(returncode: Optional[int], tails: Dict[str, str]) -> str:
    """What the logs say about a crash, in one line: the launcher's exit code or signal,
    torchrun's per-rank ``exitcode``/signal lines, and the last exception line of each
    worker log."""
    if returncode is None:
        parts = ["launcher killed"]
    elif returncode < 0:
        parts = [f"launcher killed by {signal.Signals(-returncode).name}"]
    else:
        parts = [f"launcher exited with code {returncode}"]
    for name, text in tails.items():
        lines = text.splitlines()
        if name == LAUNCHER_LOG:
            hits = [line.strip() for line in lines if re.search(r"exitcode|Signal \d+|rank\s*:", line)]
            parts.extend(hits[:6])
        else:
            errors = [i for i, line in enumerate(lines) if re.search(r"Error|Exception|Traceback|error:", line)]
            if errors:
                parts.append(f"{name}: {_exception_text(lines, errors[-1])[:300]}")
    return "; ".join(parts)


def _exception_text(lines: List[str], index: int) -> str:
    """The exception line ``lines[index]``, and, when its message is empty (MindSpore puts
    it on the lines after ``TypeError:``, between rules of dashes), the message lines that
    follow, up to the next blank line or its C++ call stack."""
    head = lines[index].strip()
    if not head.endswith(":"):
        return head
    body = []
    for line in lines[index + 1:]:
        if line.strip() and set(line.strip()) <= {"-"}:
            continue  # a rule of dashes
        text = line.strip().lstrip("- ").strip()
        if (not text and body) or "Call Stack" in text:
            break
        if text:
            body.append(text)
    return " ".join([head, *body])


def summary_line(record: JobRecord, label: str = "") -> str:
    """One human line per job: status, overrides, and the key number."""
    c = record.comparison or {}
    head = f"[{record.status:>7}] {label}{'(resumed) ' if record.resumed else ''}"
    head += " ".join(record.overrides) or "(defaults)"
    if record.judged and c:
        extra = f"max|diff|={c['max_abs_diff']:.3g} mean diff={c['mean_signed_diff']:+.3g}"
        if c.get("first_fail_step") is not None:
            extra += f" first fail step={c['first_fail_step']} ({c['n_fail']}/{c['n_steps']})"
        if record.repeats:
            spread = record.repeat_spread or {}
            extra += (f" NONDETERMINISTIC: {len(record.repeats)} repeats differ by up to "
                      f"{spread.get('distributed_max_abs', math.nan):.3g}" if record.nondeterministic
                      else f" {len(record.repeats)} repeats agree")
        return f"{head}  {extra}{ran_note(record)}  ({record.timings_s.get('wall', math.nan):.1f}s)"
    return f"{head}  {record.reason}"


def ran_note(record: JobRecord) -> str:
    """What the job line adds when the engine ran otherwise than configured: the entry
    point that ran where it is not the configured one (``Engine.info()``'s ``api.name``
    against its ``api_configured``: hyper-parallel's ``hsdp`` where ``fully_shard`` was
    asked for) and the collectives it emulated (``collectives_emulated``); empty if neither."""
    engine = record.engine or {}
    ran, wanted = (engine.get("api") or {}).get("name"), engine.get("api_configured")
    parts = [f"ran {ran}, not {wanted}"] if ran and wanted and ran != wanted else []
    if engine.get("collectives_emulated"):
        parts.append("emulated " + ", ".join(map(str, engine["collectives_emulated"])))
    return f"  [{'; '.join(parts)}]" if parts else ""
