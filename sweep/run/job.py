"""One Hydra job: validate, launch the ranks, collect their losses, compare, record.

Writes into the job's output dir (``hydra.runtime.output_dir``; layout in
``sweep.layout``): ``job.yaml`` (the resolved config the ranks read), the ranks'
results under ``ranks/``, the logs under ``logs/``, and last, atomically,
``result.json``: a ``sweep.records.JobRecord``.

A job never raises for a failure of its own (Hydra's basic sweeper would abort the
whole multirun): every failure becomes ``status="error"`` or ``"timeout"`` with a reason.
"""

from __future__ import annotations

import platform
import shutil
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Type

from omegaconf import DictConfig, OmegaConf

import sweep
from sweep.analysis.envelope import twin_unlike
from sweep.analysis.evidence import first_diff_over_ranks, first_module_over_ranks, first_tensor_over_ranks, place
from sweep.analysis.judging import each_ranks_shards, ranked_notes
from sweep.analysis.reductions import reduced_by_hand
from sweep.analysis.rounding import twin_dtype
from sweep.config import presets
from sweep.config.enums import as_str
from sweep.config.sections.baseline import foreign_framework
from sweep.config.schema import (
    NUMERIC,
    fields_with,
    normalize,
    select,
    to_container,
    world_size,
)
from sweep.errors import ConfigError, RecordError, SchedulerTimeLimit
from sweep.findings.places import described, module_text, tensor_text
from sweep.frameworks import Framework
from sweep.io import read_json, write_json
from sweep.launch import runtime, slurm, supervise
from sweep.launch.topology import topology_from_env
from sweep.launch import interrupts
from sweep.launch.interrupts import reason as interrupted_reason
from sweep.layout import JobDir
from sweep.records import JobRecord, Note, RankResult
from sweep.run import baseline, checks, pool
from sweep.run.failures import failure_cause, hung_ranks, log_tails, timeout_s
from sweep.report.notes import text_of
from sweep.run.judge import (across_verdict, batch_stats_note, forward_writes, judge, never_silent,
                             norms_after_trace, replicas_after_trace, standalone_unlike, summed_loss_cause)
from sweep.run.repeats import Again, run_repeats, run_sequences


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
    pools_dir: Path | str | None = None,
) -> JobRecord:
    """Run one job and write ``JOB_DIR/result.json``; returns the same record.

    ``sweep_dir`` (a multirun's dir) enables, per ``execution.reuse_baselines``, taking
    the standalone sequence from the sweep's cache (``sweep.run.baseline``). With
    ``pools_dir`` and ``execution.reuse_processes``, the ranks run in a shared launch
    (``sweep.run.pool``) under ``pools_dir/.pools/``: a multirun's dir when its jobs run one
    after another in this process, a single run's own dir (the job and its tracing rerun
    share one launch). Without it, each launch is its own.
    """
    job_dir = Path(job_dir)
    normalize(cfg)
    if cfg.get("resume"):
        previous = completed_result(job_dir, cfg)
        if previous is not None:
            previous.resumed = True
            return previous
    cleared = clear_earlier(job_dir, cfg)
    if cleared:
        print(f"note: {job_dir} held an earlier run's files; removed before this run: {', '.join(cleared)}",
              file=sys.stderr)
    t0 = time.perf_counter()
    record = JobRecord(
        overrides=list(overrides or []),
        versions={"sweep": sweep.__version__, "python": platform.python_version()},
        started=datetime.now(timezone.utc).isoformat(),
        slurm=slurm.job_environment(),
    )
    try:
        # an engine class from runtime.pythonpath (a checkout at some commit) imports here too, while
        # this job is checked and judged, and is dropped after it (the next job's commit imports afresh)
        # (an error raised once a signal came, a KeyboardInterrupt wrapped by a library, is the interrupt)
        with interrupts.surfaced():
            where = cfg.get("runtime") or {}
            with runtime.on_path(where.get("pythonpath"), where.get("python")):
                _run(cfg, job_dir, record, Path(sweep_dir).resolve() if sweep_dir else None,
                     Path(pools_dir).resolve() if pools_dir else None)
    except KeyboardInterrupt:
        record.status, record.reason = "error", interrupted_reason()
        _finish(job_dir, record, t0)
        raise
    except SchedulerTimeLimit as exc:  # the ranks were stopped on the way out (sweep.launch.supervise.run)
        record.status, record.reason = "timeout", str(exc)
        record.log_tails = log_tails(job_dir) if JobDir(job_dir).logs.is_dir() else None
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
    record.first_tensor = described(record.first_tensor, tensor_text(record.first_tensor))  # the places' sentences
    record.first_module = described(record.first_module, module_text(record.first_module))  # beside their data
    record.write(JobDir(job_dir).result, render=text_of)  # notes as their sentences, their codes beside


def _run(cfg: DictConfig, job_dir: Path, record: JobRecord, sweep_dir: Optional[Path], pools: Optional[Path]) -> None:
    record.config = to_container(cfg)
    if as_str(cfg.runner.name) == "command":  # the user's own command (sweep.run.command)
        from sweep.run import command

        command.run(cfg, job_dir, record, sweep_dir)
        return
    framework = checks.check(cfg)
    world = world_size(cfg)
    record.world_size = world
    paths = JobDir(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(record.config), paths.config)

    env = pool.rank_env(cfg)
    limit = timeout_s(cfg)
    shutil.rmtree(paths.ranks, ignore_errors=True)  # nothing stale from an earlier attempt
    if cfg.baseline.file:  # a golden file's standalone sequence (sweep.report.golden)
        if as_str(cfg.weights.transfer) == "shared":
            raise ConfigError("baseline.file with weights.transfer=shared: the standalone copy does not train, "
                              "there is no storage to share; use independent or checkpoint (with "
                              "'baseline.ignore_keys=[weights.transfer]' where the file was made with shared)")
        fields, cached = None, baseline.from_file(record.config, str(cfg.baseline.file))
        twin_fields, (twin_cached, twin_note) = None, baseline.golden_twin(cached.get("twin"), record.config)
    else:
        fields = baseline.key_fields(record.config, world) if sweep_dir and cfg.execution.reuse_baselines else None
        cached = baseline.lookup(sweep_dir, fields) if fields else None
        twin_fields = baseline.twin_fields(fields, record.config) if fields and cfg.compare.envelope else None
        twin_note = None
        twin_cached = (baseline.lookup(sweep_dir, twin_fields) or {}).get("twin") if twin_fields else None
    if twin_cached and cfg.compare.envelope:  # the ranks train no twin (sweep.train.twin)
        write_json(paths.twin_result, twin_cached)
    log, outcome, alone = _launch(cfg, framework, job_dir, record, world, env, limit, cached, pools)

    ranks = _read_ranks(job_dir, world)
    missing = [str(r) for r, res in enumerate(ranks) if res is None]
    other = foreign_framework(cfg)  # baseline.framework: the standalone copy in another framework
    if (cfg.order == "separate" or cached or other) and not paths.standalone_result.exists():
        missing.append("standalone process")
    if missing:
        record.log_tails = log_tails(job_dir, launcher_log=log)
        if outcome.timed_out:
            hung = hung_ranks(job_dir)  # from the stacks the ranks wrote at the limit
            record.status, record.reason = "timeout", f"no result after {limit:.0f} s from {', '.join(missing)}" + (
                f": {hung}" if hung else "")
        elif outcome.failed_early:
            record.status = "error"
            hung = hung_ranks(job_dir, outside_only=True)  # a rank that never joined the collective its peer died in
            record.reason = (f"no result from rank(s) {', '.join(missing)}: a rank died at {outcome.wall_s:.0f} s and "
                             f"the launch was stopped: {outcome.failed_early}; "
                             + failure_cause(outcome.returncode, record.log_tails) + (f"; {hung}" if hung else ""))
        elif missing == ["standalone process"] and alone is not None:  # the ranks did their part
            record.status = "timeout" if alone.timed_out else "error"
            apart = f"baseline.framework={other}" if other else "order=separate"
            record.reason = f"no result from the standalone process ({apart}): " + failure_cause(
                alone.returncode, record.log_tails, who="the standalone process")
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
        lrs = entry.get("lrs") or ((entry.get("features") or {}).get("lr") or {}).get("standalone")
        buffers = (entry.get("final") or {}).get("standalone")
        norms = entry.get("grad_norms") or (((entry.get("reductions") or {}).get("standalone") or {}).get("norms"))
        decay = entry.get("decay") or (((entry.get("optimizer") or {}).get("decay") or {}).get("standalone"))
    else:
        standalone, observed_standalone = present[0].standalone, present[0].dtypes_observed_standalone
        lrs = ((present[0].features or {}).get("lr") or {}).get("standalone")
        buffers = (present[0].final or {}).get("standalone")
        norms = ((present[0].reductions or {}).get("standalone") or {}).get("norms")
        decay = (((present[0].optimizer or {}).get("decay") or {}).get("standalone"))
    if fields and not cached:
        baseline.store(sweep_dir, fields, standalone, job_dir, dtypes_observed=observed_standalone, lrs=lrs,
                       buffers=buffers, grad_norms=norms, decay=decay)
    twin_made = twin_cached or _twin_trained(paths, present)
    unlike = None if twin_cached else twin_unlike({r.rank: (r.initial or {}).get("probe") for r in present},
                                                  next((r.rank for r in present if r.twin), None))
    twin_made = None if unlike else twin_made  # its losses measure the twin's rank, not rounding: not kept either
    if twin_fields and twin_made and not twin_cached:
        baseline.store_twin(sweep_dir, twin_fields, twin_made, job_dir)
    judge(cfg, record, present, standalone, lrs, standalone_buffers=buffers, standalone_norms=norms,
          standalone_decay=decay,
          twin=twin_made if cfg.compare.envelope else None,
          twin_source=("cache" if not cached or cached.get("source", "cache") == "cache" else cached["source"])
          if twin_cached else "twin")
    if twin_note:  # (after judge, which sets the notes)
        record.notes.append(twin_note)
    if unlike and record.envelope is not None and not record.envelope.get("measured"):
        record.envelope["why"] = unlike
    if other and not cached:  # (after judge, which sets the notes)
        _across_record(record, other, read_json(paths.standalone_result))
    record.dtypes["observed_standalone"] = observed_standalone  # what the standalone copy ran (baseline.precision)
    # (the rerun's dir holds no cached baseline: its ranks train both copies, to trace them)
    _trace(cfg, framework, job_dir, record, world, env, limit, pools)
    norms_after_trace(record)
    replicas_after_trace(record)
    if other:  # a statistic the frameworks update otherwise shows in the rerun's step-0 buffers
        across_verdict(cfg, record)
    run_repeats(cfg, job_dir, record, run_sequences(cfg, present, standalone),
                _builtin_again(cfg, framework, world, env, limit))
    never_silent(cfg, record)  # what the rerun and the repeats left empty, and why
    if outcome.returncode not in (0, None):
        record.teardown_note = (
            f"launcher exited with code {outcome.returncode} after every rank had written its result "
            "(e.g. gloo SIGABRT at interpreter shutdown); judged by the results"
        )


def _twin_trained(paths: JobDir, ranks: List[RankResult]) -> Optional[Dict[str, Any]]:
    """The twin this launch trained (``RankResult.twin``, ``sweep.train.twin``): its last rank's, or
    the standalone-only process's (``ranks/standalone.json``: ``order=separate``,
    ``baseline.framework``); ``None`` where none trained one."""
    for r in ranks:
        if r.twin:
            return r.twin
    if paths.standalone_result.exists():
        return read_json(paths.standalone_result).get("twin") or None
    return None


def _launch(
    cfg: DictConfig, framework: Type[Framework], job_dir: Path, record: JobRecord, world: int, env: Dict[str, str],
    limit: float, cached: Optional[Dict[str, Any]], pools: Optional[Path],
) -> tuple[Optional[Path], supervise.LaunchOutcome, Optional[supervise.LaunchOutcome]]:
    """Put the standalone baseline in place (from the cache, or with ``order=separate``
    from a process apart from the ranks: the sweep's standalone pool when launches are
    shared, training while the ranks do, else a process of its own first), and run the
    ranks: in a shared launch under ``pools`` (see :func:`_run_ranks`), or in a launch of
    their own. With ``baseline.framework`` naming another framework (and no cached
    baseline) the standalone copy trains in that framework after the ranks, from the
    initial weights they wrote (:func:`_standalone_across`). Returns the shared launch's
    log (``None`` for a launch of its own), the ranks' outcome, and the standalone
    process's (``None`` without one)."""
    paths = JobDir(job_dir)
    if cached:
        # The ranks see ranks/standalone.json and train the distributed copy only.
        write_json(paths.standalone_result, {"standalone": cached["standalone"], "from": cached["job_dir"],
                                             "dtypes_observed_standalone": cached.get("dtypes_observed") or {},
                                             "lrs": cached.get("lrs"), "final": {"standalone": cached.get("buffers")},
                                             "grad_norms": cached.get("grad_norms"), "decay": cached.get("decay")})
        record.baseline = {"source": cached.get("source", "cache"), "job_dir": cached["job_dir"],
                           **{k: cached[k] for k in ("file", "versions") if k in cached}}
    standalone_pool, posted, alone = None, 0.0, None
    separate = cfg.order == "separate" and not foreign_framework(cfg)  # (another framework's: after the ranks)
    if not cached and separate and _shares_launches(cfg, pools, world):
        # The standalone baseline in the sweep's standalone pool (a process apart from the
        # ranks, started once), training while the ranks train theirs.
        standalone_pool = pool.get_pool(pools, record.config, framework, 1, env, phase="standalone")
        posted = standalone_pool.submit(job_dir)
    elif not cached and separate:
        # The standalone baseline in a process of its own, before the distributed launch.
        standalone_spec = supervise.LaunchSpec(
            argv=[runtime.interpreter(env), "-m", "sweep.train", str(job_dir), "--phase", "standalone"],
            env=env, log_path=paths.logs / "standalone.log", timeout_s=limit,
        )
        alone = supervise.run(standalone_spec)
        record.timings_s["standalone_launch"] = alone.wall_s
    argv, kill_tag, log, outcome = _run_ranks(cfg, framework, job_dir, record, world, env, limit, pools)
    other = foreign_framework(cfg)
    if not cached and other:
        # baseline.framework: the other framework's standalone copy, from the weights the ranks wrote
        record.baseline = {"source": "framework", "framework": other}
        alone = _standalone_across(cfg, other, job_dir, limit)
        if alone is not None:
            record.timings_s["standalone_launch"] = alone.wall_s
    if standalone_pool is not None:
        alone = standalone_pool.wait(job_dir, posted, limit)
        record.timings_s["standalone_launch"] = alone.wall_s
        record.pool = dict(record.pool or {}, standalone={"dir": str(standalone_pool.dir),
                                                          "jobs": standalone_pool.jobs})
    record.launch = {
        "kill_tag": kill_tag,
        "argv": argv,
        "returncode": outcome.returncode,
        "timed_out": outcome.timed_out,
        "killed": outcome.killed,
        "timeout_s": limit,
    }
    record.timings_s["launch"] = outcome.wall_s
    return log, outcome, alone


def _standalone_across(cfg: DictConfig, other: str, job_dir: Path, limit: float) -> Optional[supervise.LaunchOutcome]:
    """``baseline.framework``: the standalone copy in framework ``other``, in a process of its
    own after the ranks (it starts from the initial weights rank 0 wrote,
    ``ranks/initial_weights.npz``): ``python -m sweep.train JOB_DIR --phase standalone``
    (which takes ``other``'s preset: ``sweep.train.standalone_config``) with ``other``'s
    rank environment (``pool.rank_env``: e.g. MindSpore's ``GLOG_v``), its output in
    ``logs/standalone.log``. ``None`` when the ranks wrote no weights (they failed: their
    error is the job's)."""
    paths = JobDir(job_dir)
    if not paths.initial_weights.exists():
        return None
    env = pool.rank_env(presets.with_framework(cfg, other))  # (with the job's runtime, as every launch)
    spec = supervise.LaunchSpec(
        argv=[runtime.interpreter(env), "-m", "sweep.train", str(job_dir), "--phase", "standalone"],
        env=env, log_path=paths.logs / "standalone.log", timeout_s=limit,
    )
    return supervise.run(spec)


def _across_record(record: JobRecord, other: str, entry: Dict[str, Any]) -> None:
    """Where the standalone copy trained in framework ``other`` (``baseline.framework``):
    ``record.baseline`` (``{"source": "framework", "framework", "versions", "initial_weights":
    {"framework", "file", "renamed"}}`` from its ``ranks/standalone.json``, ``entry``) and a note
    naming the framework, its version and the names the initial weights were converted by."""
    across = (entry.get("features") or {}).get("initial_weights") or {}
    versions = entry.get("versions") or {}
    record.baseline = {"source": "framework", "framework": other, "versions": versions, "initial_weights": across}
    renamed = across.get("renamed") or {}
    names = (", ".join(f"{theirs} -> {ours}" for ours, theirs in renamed.items()) if renamed
             else "every name the same")
    version = versions.get(other)
    record.notes.append(f"the standalone copy trained in {other}{' ' + version if version else ''} "
                        f"(baseline.framework={other}), in a process of its own after the ranks, from the distributed "
                        f"copy's initial weights converted by name and layout ({names}) and the same data")


def _shares_launches(cfg: DictConfig, pools: Optional[Path], world: int) -> bool:
    """Whether this job runs in the sweep's shared launches (``sweep.run.pool``): a pools
    dir, ``execution.reuse_processes``, and one node."""
    return bool(pools) and bool(cfg.execution.reuse_processes) and not topology_from_env(None, world).multi_node


def _run_ranks(
    cfg: DictConfig, framework: Type[Framework], run_dir: Path, record: JobRecord, world: int, env: Dict[str, str],
    limit: float, pools: Optional[Path],
) -> tuple[List[str], str, Optional[Path], supervise.LaunchOutcome]:
    """Run the ranks on ``run_dir`` (a job dir holding ``job.yaml``): in a shared launch
    under ``pools/.pools/`` (a multirun's dir, or a single run's own) when ``pools`` is set
    and ``execution.reuse_processes`` holds, or in a launch of their own (also across nodes
    under a multi-node SLURM allocation: srun, one launcher per node, ``sweep.run.cluster``).
    Returns ``(argv, kill_tag, shared launch's log or None, outcome)``."""
    if _shares_launches(cfg, pools, world):
        rank_pool = pool.get_pool(pools, record.config, framework, world, env)
        outcome = rank_pool.run_job(run_dir, limit)
        record.pool = {"dir": str(rank_pool.dir), "jobs": rank_pool.jobs}
        return rank_pool.argv, rank_pool.kill_tag, rank_pool.log_path, outcome
    topology = topology_from_env(None, world)
    spec = framework.job_launch(cfg.framework.launcher, world, run_dir, env=env, timeout_s=limit, topology=topology)
    return spec.argv, spec.kill_tag, None, supervise.run(spec)


TRACE_DIR = "trace"  # in a job dir: the tracing rerun's own job dir


def trace_anchor(first_diff: int, envelope: Optional[Dict[str, Any]]) -> int:
    """The step the tracing rerun's window is counted from: the losses' first step beyond their
    rounding envelope where they leave it later than they first differ (sharded data, a lower
    precision: the first difference is rounding, and a fault that starts at step 50 first shows
    in the losses at step 50 or later), so the traced steps hold the place where the copies part
    beyond rounding; else the first differing step."""
    beyond = ((envelope or {}).get("loss") or {}).get("first_beyond_step") if (envelope or {}).get("measured") \
        else None
    return int(beyond) if beyond is not None and int(beyond) > int(first_diff) else int(first_diff)


def _beyond_untraced(first: Optional[Dict[str, Any]], until: int) -> Optional[int]:
    """The step a second tracing pass is anchored at: where the first pass's first tensor beyond
    its rounding envelope lies past the steps whose gradients and modules it recorded (a weight
    recorded only for the onset, ``compare.onset_steps``: sharded data parts the copies by
    rounding at step 0, a fault from step 5 leaves the envelope at step 5); else ``None``."""
    beyond = (first or {}).get("beyond_rounding") or {}
    step = beyond.get("step")
    return int(step) if step is not None and not beyond.get("grads_recorded") and int(step) > until else None


def _trace_pass(cfg: DictConfig, framework: Type[Framework], job_dir: Path, record: JobRecord,
                launch: Tuple[int, Dict[str, str], float, Optional[Path]], anchor: int, onset_until: int) -> tuple:
    """One tracing rerun into ``JOB_DIR/trace/`` (what was there goes): gradients, weights and
    modules recorded from step 0 to ``compare.trace_after`` past ``anchor``, weights on to
    ``onset_until`` (gradients as the optimizer read them where the run's ledger shows the engine
    reducing them by hand after the backward, ``compare.grads_read``). ``launch``: ``(world,
    env, limit, pools)``. Returns ``(the ranks' results, [(first tensor, rank)], [(modules,
    rank)], the launch's outcome, the last gradient-traced step)``."""
    world, env, limit, pools = launch
    other = foreign_framework(cfg)
    until = min(int(cfg.steps) - 1, anchor + int(cfg.compare.trace_after))
    # an engine that reduced gradients by hand after the backward: its gradients traced as the optimizer read them
    read = reduced_by_hand((record.collectives or {}).get("calls"))
    config = dict(record.config, steps=max(until, onset_until) + 1,
                  compare=dict(record.config["compare"], trace_until=until, onset_until=max(onset_until, until),
                               grads_read=read))
    trace_dir = job_dir / TRACE_DIR
    shutil.rmtree(trace_dir, ignore_errors=True)
    trace_dir.mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(config), JobDir(trace_dir).config)
    _, _, _, outcome = _run_ranks(cfg, framework, trace_dir, JobRecord(config=config), world, env, limit, pools)
    if other:  # the standalone copy traces in the other framework's process, from the weights the ranks wrote
        _standalone_across(cfg, other, trace_dir, limit)
    rerun = [r for r in _read_ranks(trace_dir, world) if r is not None]
    found_tensors = [(r.first_tensor, r.rank) for r in rerun if r.first_tensor]
    found_modules = [(r.modules, r.rank) for r in rerun if r.modules is not None]
    if other:  # each copy's trace in its own file: compared here under one name map (sweep.run.across)
        from sweep.run import across

        envelope = ((float(cfg.compare.envelope_margin), twin_dtype(record.config))
                    if cfg.compare.envelope else None)
        found_tensors, found_modules = across.compare(trace_dir, world, float(cfg.compare.noise_floor),
                                                      as_str(cfg.data.split) == "sharded", envelope)
    return rerun, found_tensors, found_modules, outcome, until


def _with_baseline(record: JobRecord, rerun: List[RankResult], found_tensors: list, found_modules: list,
                   *rest: Any) -> tuple:
    """A :func:`_trace_pass`'s result without the traces of the ranks whose standalone copy gave
    other losses than the job's (``sweep.run.judge.standalone_unlike``, note ``N194``): theirs
    compare the distributed copy with that copy, not the baseline."""
    left_out = standalone_unlike(record, rerun)
    return (rerun, [(t, r) for t, r in found_tensors if r not in left_out],
            [(m, r) for m, r in found_modules if r not in left_out], *rest)


def _trace(
    cfg: DictConfig, framework: Type[Framework], job_dir: Path, record: JobRecord, world: int, env: Dict[str, str],
    limit: float, pools: Optional[Path],
) -> None:
    """Name the first tensor that differs: rerun the job (``JOB_DIR/trace/``) up to
    ``compare.trace_after`` steps past its first differing step (:func:`trace_anchor`: past the
    losses' first step beyond their envelope, where that comes later) with every gradient and
    weight recorded (``sweep.analysis.trace``), and the weights on to ``compare.onset_steps`` past
    it (the onset from the update differences); its losses are the job's own up to there
    (the same seeds, the same code). Records what ``sweep.analysis.evidence`` makes of the
    rerun's ranks: ``record.first_tensor`` (``first_tensor_over_ranks``: the first over the
    ranks, with its ``rank`` and ``ranks``), or a ``note`` saying why nothing was traced;
    ``record.first_module`` (``first_module_over_ranks``, merged with the tensor by ``place``);
    the traced steps' collectives' notes (a code the first pass gave already left out: the same steps).
    Where that rerun's first tensor beyond its rounding envelope lies past its gradient-traced
    steps (:func:`_beyond_untraced`), a second rerun anchored there replaces it
    (``first_tensor["second_pass_from"]``: its anchor)."""
    first_diff = first_diff_over_ranks(record.rank_comparisons or [record.comparison])
    if first_diff is None or not cfg.compare.trace_after:
        if record.status == "fail" and record.first_module is None:  # a failing job never left blank
            why = "compare.trace_after=0" if not cfg.compare.trace_after else \
                "the losses never differ (the job fails on what the reason names)"
            record.first_module = {"note": f"not traced: {why}"}
        return
    other = foreign_framework(cfg)
    if not framework.traces_tensors or (cfg.order == "separate" and not other):
        why = ("order=separate trains the copies apart, in two processes (order=standalone_first traces the same "
               "config)") if cfg.order == "separate" else \
            f"tensor tracing is not wired for framework={framework.name} yet"
        record.first_tensor = {"note": f"not traced: {why}"}
        record.first_module = {"note": f"not traced: {why}"}
        return
    anchor = trace_anchor(first_diff, record.envelope)
    onset_until = min(int(cfg.steps) - 1, anchor + int(cfg.compare.onset_steps))
    began = time.perf_counter()
    rerun, found_tensors, found_modules, outcome, until = _with_baseline(record, *_trace_pass(
        cfg, framework, job_dir, record, (world, env, limit, pools), anchor, onset_until))
    again = _beyond_untraced(first_tensor_over_ranks(found_tensors, first_diff), until)
    if again is not None:  # a second, bounded pass: the gradients and modules where the copies part beyond rounding
        rerun, found_tensors, found_modules, outcome, _ = _with_baseline(record, *_trace_pass(
            cfg, framework, job_dir, record, (world, env, limit, pools), again, onset_until))
    record.timings_s["trace"] = time.perf_counter() - began
    record.first_module = first_module_over_ranks(found_modules)
    later = ranked_notes({r.rank: (r.collectives or {}).get("notes") or [] for r in rerun}, len(rerun))
    said = {n.code for n in record.notes if isinstance(n, Note)}  # the first pass ran the same steps: its say stands
    record.notes.extend(n for n in later if n not in record.notes and not (isinstance(n, Note) and n.code in said))
    record.first_tensor = each_ranks_shards(first_tensor_over_ranks(found_tensors, first_diff), found_tensors)
    if record.first_tensor is None:
        record.first_tensor = {"note": "not traced: the tracing rerun gave no result "
                                       f"({'timed out' if outcome.timed_out else f'exit {outcome.returncode}'})"}
    elif again is not None:
        record.first_tensor["second_pass_from"] = again  # the anchor of the pass whose trace this is
    record.first_module = place(record.first_module, record.first_tensor)  # a module computing on weights that differ
    summed_loss_cause(record)
    forward_writes(record, [r.features for r in rerun])  # (where the first pass reused a cached baseline)
    note = batch_stats_note(cfg, record.first_module, record.first_tensor)
    if note and note not in record.notes:
        record.notes.append(note)


def _builtin_again(cfg: DictConfig, framework: Type[Framework], world: int, env: Dict[str, str],
                   limit: float) -> Again:
    """A built-in job's repeat (:func:`run_repeats`): its ranks in a launch of their own."""
    def again(rep_dir: Path, scratch: JobRecord) -> Tuple[Optional[List[RankResult]], Optional[List[Any]],
                                                          Optional[str], str]:
        _, outcome, _ = _launch(cfg, framework, rep_dir, scratch, world, env, limit, None, None)
        ranks = _read_ranks(rep_dir, world)
        paths = JobDir(rep_dir)
        apart = cfg.order == "separate" or foreign_framework(cfg)
        if any(r is None for r in ranks) or (apart and not paths.standalone_result.exists()):
            why = "timed out" if outcome.timed_out else f"launcher exit {outcome.returncode}"
            return None, None, "timeout" if outcome.timed_out else "error", f"no result from every rank ({why})"
        present = [r for r in ranks if r is not None]
        standalone = (read_json(paths.standalone_result)["standalone"] if paths.standalone_result.exists()
                      else present[0].standalone)
        return present, standalone, None, ""

    return again


def refused_over_earlier(cfg: DictConfig, job_dir: Path | str) -> Optional[str]:
    """Where ``job_dir`` holds a multirun's sweep (``multirun.yaml``, job dirs ``0/``, ...): the reason
    a single run may not write there, one line. Where it holds an earlier run's ``result.json`` and
    this config is refused by the checks that need nothing but the config
    (``sweep.config.schema.check_fields``: ``steps=0``,
    a negative tolerance, a mesh against ``world_size``): the reason, one line, so that a single
    run given a typo keeps the earlier run's files (:func:`run` would clear them first); else
    ``None`` (then :func:`run` writes the refusal as the job's record, as in a fresh dir)."""
    from sweep.config.schema import check_fields
    from sweep.layout import SweepDir

    grid = SweepDir(job_dir)
    if grid.multirun_yaml.exists() or grid.job_dirs():  # the two runs' files would mix (report reads both)
        return (f"hydra.run.dir={Path(job_dir)} holds a multirun's sweep ({len(grid.job_dirs())} job dirs"
                f"{', multirun.yaml' if grid.multirun_yaml.exists() else ''}): a single run there would mix its "
                "files with the sweep's; use another hydra.run.dir")
    if not JobDir(job_dir).result.exists():
        return None
    try:
        normalize(cfg)
        check_fields(cfg)
    except ConfigError as exc:
        return f"invalid config: {exc}"
    return None


def clear_earlier(job_dir: Path, cfg: DictConfig) -> List[str]:
    """Remove what an earlier run left in ``job_dir`` before this one writes its own, so one
    dir holds one run's files (a single run into a used ``hydra.run.dir``, a sweep run
    again into its dir without ``resume``): its ``result.json``, ``plot.png``, ``report.html``, ``job.json``,
    ``ranks/``, ``logs/``, ``trace/``, a command job's loss files and what its relative
    ``runner.parse.files`` match. Hydra's ``.hydra/`` and the run's shared launches
    (``.pools/``) stay. Returns the names removed (relative to ``job_dir``)."""
    from sweep.run import command

    job = JobDir(job_dir)
    names = [job.result, job.plot, job_dir / "report.html", job_dir / "job.json", job.ranks, job.logs, job_dir / TRACE_DIR,
             job_dir / command.LOSS_FILE, job_dir / command.BASELINE_LOSS_FILE]
    runner = cfg.get("runner") or {}
    patterns = [str(p) for p in ((runner.get("parse") or {}).get("files") or []) if not Path(str(p)).is_absolute()]
    names += [p for pattern in patterns for p in sorted(job_dir.glob(pattern))]
    removed = []
    for path in names:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        removed.append(str(path.relative_to(job_dir)))
    return removed


