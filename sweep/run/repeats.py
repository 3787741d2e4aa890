"""``repeat=N``: run a judged job again and say whether the runs agree.

:func:`run_repeats` takes how to run it once more (``Again``: the built-in ranks,
``sweep.run.job``; the user's command, ``sweep.run.command``) and judges each run as the
first (``sweep.run.judge``).
"""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
from omegaconf import DictConfig, OmegaConf

from sweep.io import read_floats
from sweep.layout import JobDir
from sweep.records import JobRecord, RankResult
from sweep.run.judge import judge as _judge

REPEAT_DIR = "repeats"  # in a job dir: repeat i's own job dir is repeats/<i>/


def run_sequences(cfg: DictConfig, ranks: List[RankResult], standalone: List[Any]) -> Dict[str, np.ndarray]:
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


Again = Callable[[Path, JobRecord], Tuple[Optional[List[RankResult]], Optional[List[Any]], Optional[str], str]]


def run_repeats(cfg: DictConfig, job_dir: Path, record: JobRecord, first: Dict[str, np.ndarray], again: Again) -> None:
    """With ``repeat=N > 1``, run the judged job N - 1 more times and record whether the
    runs agree (``record.repeats``, ``nondeterministic``, ``repeat_spread``, and a
    ``nondeterministic: ...`` note when they do not).

    Each repeat is a launch of its own (``JOB_DIR/repeats/<i>/``) with the same config
    and seeds: ``again(rep_dir, scratch)`` runs it and returns ``(ranks, standalone, None,
    "")``, or ``(None, None, status, reason)`` when it gave no result (built-in jobs:
    :func:`_builtin_again`, through the job's own launch path, never the sweep's shared
    launch (a rerun in a reused process would share its state) and never the cached
    baseline (each repeat trains both copies, so a nondeterministic standalone shows
    too); ``runner=command``: the command again, ``sweep.run.command``). Repeat 0 is the
    job's run; its sequences stay the record's.
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
        present, standalone, status, reason = again(rep_dir, scratch)
        if present is None or standalone is None:
            entries.append({"repeat": i, "status": status or "error", "first_diff_step": None,
                            "first_fail_step": None, "max_abs_diff": None, "final_abs_diff": None, "reason": reason})
            continue
        _judge(cfg, scratch, present, standalone)
        entries.append(_repeat_entry(i, scratch))
        runs.append(run_sequences(cfg, present, standalone))
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
    if not (record.envelope or {}).get("measured") and (cfg.get("runner") or {}).get("name") == "command":
        # no twin runs inside a user's command: the repeats' spread is the envelope asked for
        from sweep.analysis.envelope import measure_repeats

        losses = record.losses or {}
        record.envelope = dict(measure_repeats(
            read_floats(losses["standalone"]), read_floats(losses["distributed"]),
            [losses["standalone"], *(v for k, v in first.items() if k.startswith("rank"))], runs,
            float(cfg.compare.get("envelope_margin", 4.0)), max((record.resolution or {}).values(), default=None)),
            other_failures=(record.envelope or {}).get("other_failures", []))


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

