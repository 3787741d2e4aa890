"""One Hydra job: validate, launch the ranks, collect their losses, compare, record.

Writes into the job's output dir (``hydra.runtime.output_dir``):

- ``job.yaml``: the resolved config the ranks read;
- ``ranks/rank_<r>.json``: each rank's losses (written by ``sweep.train``);
- ``logs/``: ``launcher.log`` and ``worker_<r>.log``;
- ``result.json``: the job's record (see :func:`run`), written atomically, last.

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
from typing import Any, Dict, List, Optional

import numpy as np
from omegaconf import DictConfig, OmegaConf

import sweep
from sweep import baseline, launch, pool
from sweep.cluster import topology_from_env
from sweep.compare import compare_losses
from sweep.io import read_floats, read_json, write_json
from sweep.schema import ConfigError, to_container, validate, world_size
from sweep.train import JOB_CONFIG, RANKS_DIR, STANDALONE_RESULT, rank_result_path

RESULT = "result.json"
TAIL_LINES = 15


def timeout_s(cfg: DictConfig) -> float:
    """``launcher.timeout_s`` or ``base_timeout_s + per_step_s * steps * world_size`` seconds."""
    if cfg.launcher.timeout_s is not None:
        return float(cfg.launcher.timeout_s)
    return float(cfg.launcher.base_timeout_s + cfg.launcher.per_step_s * cfg.steps * world_size(cfg))


def log_tails(job_dir: Path, lines: int = TAIL_LINES, launcher_log: Optional[Path] = None) -> Dict[str, str]:
    """Last ``lines`` lines of every log of the job, by file name; ``launcher_log`` is the
    shared launch's log when the job ran in one (``sweep.pool``)."""
    tails = {}
    paths = sorted((job_dir / "logs").glob("*.log")) + ([launcher_log] if launcher_log else [])
    for path in paths:
        text = path.read_text(errors="replace").splitlines()
        tails[path.name] = "\n".join(text[-lines:])
    return tails


def _read_ranks(job_dir: Path, world: int) -> List[Optional[dict]]:
    ranks = []
    for r in range(world):
        path = rank_result_path(job_dir, r)
        ranks.append(read_json(path) if path.exists() else None)
    return ranks


def run(
    cfg: DictConfig, job_dir: Path | str, overrides: Optional[List[str]] = None, sweep_dir: Path | str | None = None,
    share_launches: bool = True,
) -> Dict[str, Any]:
    """Run one job and write ``JOB_DIR/result.json``; returns the same record.

    ``sweep_dir`` (a multirun's dir) enables, per ``launcher.reuse_baselines``, taking
    the standalone sequence from the sweep's cache (``sweep.baseline``), and, with
    ``share_launches`` (jobs run one after another in this process) and
    ``launcher.reuse_processes``, running the ranks in a shared launch (``sweep.pool``).

    Record keys: ``status`` (one of ``ok``, ``fail``: comparison failed, ``error``,
    ``timeout``), ``reason`` (``None`` when ok), ``overrides``, ``config``,
    ``world_size``, ``comparison`` (:class:`sweep.compare.Comparison` as a dict, or
    ``None``), ``ranks_agree`` (every rank recorded the same losses; with
    ``data.split=sharded`` the standalone ones), ``losses`` (``{"standalone": [...],
    "distributed": [...]}``: rank 0's, or with ``data.split=sharded`` the mean of the
    ranks' distributed losses), ``dtypes`` (``configured`` mp_policy dtypes and
    ``observed`` ones: ``param_forward``, ``output``, ``grad``), ``weights_moved``
    (max |change| of one copy's parameters while the other trained: non-zero only
    when they share storage), ``zero_grad_effective``, ``timings_s``
    (``wall``, ``launch``, per-phase maxima over ranks), ``versions``,
    ``launcher`` (return code, timed out, processes killed), ``log_tails`` (on error),
    ``pool`` (the shared launch that ran it, if any), ``baseline`` (where a reused
    standalone sequence came from),
    ``started``/``finished`` (UTC ISO-8601).
    """
    job_dir = Path(job_dir)
    if cfg.get("resume"):
        previous = completed_result(job_dir, cfg)
        if previous is not None:
            return dict(previous, resumed=True)
    started = datetime.now(timezone.utc).isoformat()
    t0 = time.perf_counter()
    record: Dict[str, Any] = {
        "status": "error",
        "reason": None,
        "overrides": list(overrides or []),
        "config": None,
        "world_size": None,
        "comparison": None,
        "ranks_agree": None,
        "losses": None,
        "timings_s": {},
        "versions": {"sweep": sweep.__version__, "python": platform.python_version()},
        "launcher": None,
        "started": started,
    }
    try:
        _run(cfg, job_dir, record, Path(sweep_dir).resolve() if sweep_dir else None, share_launches)
    except KeyboardInterrupt:
        record.update(status="error", reason="interrupted (Ctrl-C)")
        _finish(job_dir, record, t0)
        raise
    except ConfigError as exc:
        record.update(status="error", reason=f"invalid config: {exc}")
    except Exception as exc:  # a job's failure must not abort the sweep
        record.update(status="error", reason=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    _finish(job_dir, record, t0)
    return record


def _comparable(config: Dict[str, Any]) -> Dict[str, Any]:
    """A job config without the keys that do not change its results."""
    return {k: v for k, v in config.items() if k not in ("resume", "launcher")}


def completed_result(job_dir: Path, cfg: DictConfig) -> Optional[Dict[str, Any]]:
    """The job's earlier ``result.json`` if it is complete (status ``ok`` or ``fail``)
    and was made with the same config (``resume`` and ``launcher`` aside); else ``None``
    (absent, unreadable, errored, timed out, or a different config in that dir)."""
    path = job_dir / RESULT
    try:
        previous = read_json(path)
    except (OSError, ValueError):
        return None
    if previous.get("status") not in ("ok", "fail") or not previous.get("config"):
        return None
    return previous if _comparable(previous["config"]) == _comparable(to_container(cfg)) else None


def _finish(job_dir: Path, record: Dict[str, Any], t0: float) -> None:
    record["timings_s"]["wall"] = time.perf_counter() - t0
    record["finished"] = datetime.now(timezone.utc).isoformat()
    write_json(job_dir / RESULT, record)


def _run(
    cfg: DictConfig, job_dir: Path, record: Dict[str, Any], sweep_dir: Optional[Path], share_launches: bool
) -> None:
    record["config"] = to_container(cfg)
    validate(cfg)
    world = world_size(cfg)
    record["world_size"] = world
    job_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(record["config"]), job_dir / JOB_CONFIG)

    env = pool.rank_env(cfg)
    limit = timeout_s(cfg)
    shutil.rmtree(job_dir / RANKS_DIR, ignore_errors=True)  # nothing stale from an earlier attempt
    standalone_path = job_dir / RANKS_DIR / STANDALONE_RESULT
    fields = baseline.key_fields(record["config"], world) if sweep_dir and cfg.launcher.reuse_baselines else None
    cached = baseline.lookup(sweep_dir, fields) if fields else None
    spec, outcome = _launch(cfg, job_dir, record, world, env, limit, cached, sweep_dir, share_launches)

    ranks = _read_ranks(job_dir, world)
    missing = [str(r) for r, res in enumerate(ranks) if res is None]
    if (cfg.order == "separate" or cached) and not standalone_path.exists():
        missing.append("standalone process")
    if missing:
        record["log_tails"] = log_tails(job_dir, launcher_log=spec.log_path if "pool" in record else None)
        if outcome.timed_out:
            record.update(status="timeout", reason=f"no result after {limit:.0f} s from {', '.join(missing)}")
        else:
            record.update(
                status="error",
                reason=f"no result from rank(s) {', '.join(missing)}: "
                + failure_cause(outcome.returncode, record["log_tails"]),
            )
        return

    standalone = read_json(standalone_path)["standalone"] if standalone_path.exists() else ranks[0]["standalone"]
    if fields and not cached:
        baseline.store(sweep_dir, fields, standalone, job_dir)
    _judge(cfg, record, ranks, standalone)
    if outcome.returncode not in (0, None):
        record["teardown_note"] = (
            f"launcher exited with code {outcome.returncode} after every rank had written its result "
            "(e.g. gloo SIGABRT at interpreter shutdown); judged by the results"
        )


def _launch(
    cfg: DictConfig, job_dir: Path, record: Dict[str, Any], world: int, env: Dict[str, str], limit: float,
    cached: Optional[Dict[str, Any]], sweep_dir: Optional[Path], share_launches: bool,
) -> tuple[launch.LaunchSpec, launch.LaunchOutcome]:
    """Put the standalone baseline in place (from the cache, or from its own process with
    ``order=separate``), then run the ranks: in the sweep's shared launch, or in a launch
    of their own (across nodes under a multi-node SLURM allocation)."""
    standalone_path = job_dir / RANKS_DIR / STANDALONE_RESULT
    if cached:
        # The ranks see ranks/standalone.json and train the distributed copy only.
        write_json(standalone_path, {"standalone": cached["standalone"], "from": cached["job_dir"]})
        record["baseline"] = {"source": "cache", "job_dir": cached["job_dir"]}
    elif cfg.order == "separate":
        # The standalone baseline in a process of its own, before the distributed launch.
        standalone_spec = launch.LaunchSpec(
            argv=[sys.executable, "-m", "sweep.train", str(job_dir), "--phase", "standalone"],
            env=env, log_path=job_dir / "logs" / "standalone.log", timeout_s=limit,
        )
        standalone_outcome = launch.run(standalone_spec)
        record["timings_s"]["standalone_launch"] = standalone_outcome.wall_s
    # A SLURM allocation of several nodes: srun, one launcher per node (sweep.cluster).
    topology = topology_from_env(None, world)
    if sweep_dir and share_launches and cfg.launcher.reuse_processes and not topology.multi_node:
        rank_pool = pool.get_pool(
            pool.pool_key(cfg, world, env), sweep_dir, record["config"], cfg.framework.pool_launcher, world, env
        )
        spec = rank_pool.spec
        outcome = rank_pool.run_job(job_dir, limit)
        record["pool"] = {"dir": str(rank_pool.dir), "jobs": rank_pool.jobs}
    else:
        spec = launch.build_spec(cfg.framework.launcher, world, job_dir, env=env, timeout_s=limit, topology=topology)
        outcome = launch.run(spec)
    record["launcher"] = {
        "job_id": spec.job_id,
        "argv": spec.argv,
        "returncode": outcome.returncode,
        "timed_out": outcome.timed_out,
        "killed": outcome.killed,
        "timeout_s": limit,
    }
    record["timings_s"]["launch"] = outcome.wall_s
    return spec, outcome


def _judge(cfg: DictConfig, record: Dict[str, Any], ranks: List[dict], standalone: List[Any]) -> None:
    """Fill the record from the ranks' results: losses, agreement, weights moved, dtypes,
    timings, the comparison and the verdict (``ok`` or ``fail``)."""
    first = ranks[0]
    if cfg.data.split == "sharded":
        # each rank's loss is over its shard; the global loss is their mean (equal shard sizes)
        per_rank = np.array([read_floats(r["distributed"]) for r in ranks], dtype=np.float64)
        distributed = per_rank.mean(axis=0).tolist()
    else:
        distributed = first["distributed"]
    record["versions"].update(first.get("versions", {}))
    record["losses"] = {"standalone": standalone, "distributed": distributed}
    record["ranks_agree"] = all(
        r["standalone"] == first["standalone"]
        and (cfg.data.split == "sharded" or r["distributed"] == first["distributed"])
        for r in ranks
    )
    record["weights_moved"] = first.get("moved", {})
    record["zero_grad_effective"] = first.get("zero_grad_effective")
    record["engine"] = first.get("engine") or {}  # engine.info(): API that ran, workarounds, emulated collectives
    record["dtypes"] = {
        "configured": {k: record["config"]["mp_policy"][k] for k in ("param_dtype", "reduce_dtype", "output_dtype")},
        "observed": first.get("dtypes_observed", {}),
    }
    for phase in ("setup", "standalone", "distributed"):
        values = [r["timings_s"][phase] for r in ranks if phase in r["timings_s"]]
        if values:
            record["timings_s"][phase] = max(values)
    comparison = compare_losses(
        read_floats(standalone), read_floats(distributed), rtol=cfg.compare.rtol, atol=cfg.compare.atol
    )
    record["comparison"] = comparison.to_dict()
    if comparison.passed:
        record.update(status="ok", reason=None)
    else:
        record.update(
            status="fail",
            reason=f"{comparison.n_fail}/{comparison.n_steps} steps outside rtol={cfg.compare.rtol}, "
            f"atol={cfg.compare.atol}; first at step {comparison.first_fail_step}",
        )


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
        if name == launch.LAUNCHER_LOG:
            hits = [line.strip() for line in lines if re.search(r"exitcode|Signal \d+|rank\s*:", line)]
            parts.extend(hits[:6])
        else:
            errors = [line.strip() for line in lines if re.search(r"Error|Exception|Traceback|error:", line)]
            if errors:
                parts.append(f"{name}: {errors[-1][:300]}")
    return "; ".join(parts)


def summary_line(record: Dict[str, Any], label: str = "") -> str:
    """One human line per job: status, overrides, and the key number."""
    c = record.get("comparison") or {}
    head = f"[{record['status']:>7}] {label}{'(resumed) ' if record.get('resumed') else ''}"
    head += " ".join(record.get("overrides") or []) or "(defaults)"
    if record["status"] in ("ok", "fail") and c:
        extra = f"max|diff|={c['max_abs_diff']:.3g} mean diff={c['mean_signed_diff']:+.3g}"
        if c.get("first_fail_step") is not None:
            extra += f" first fail step={c['first_fail_step']} ({c['n_fail']}/{c['n_steps']})"
        return f"{head}  {extra}  ({record['timings_s'].get('wall', math.nan):.1f}s)"
    return f"{head}  {record.get('reason')}"
