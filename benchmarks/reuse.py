"""Benchmark: per-job launching versus the fast path (process and baseline reuse).

Runs the same fixed grid twice as real multiruns, one after the other:
12 jobs = mesh dp2, dp4, hsdp2x2 (2 and 4 ranks) x optimizer adam, sgd x
mp_policy fp32, bf16, 200 steps each, PyTorch FSDP2 on CPU (gloo).

1. per-job: ``execution.reuse_processes=false execution.reuse_baselines=false``
   (one torchrun per job, the standalone baseline trained in every job);
2. fast path: the defaults (one shared launch per world size, forked from a fork
   server that imported torch once; baselines reused).

It checks that both give the same losses, bit for bit, job by job, and prints
each run's wall time, its start-up share (wall time not spent inside the ranks'
training loops: process start, imports, rendezvous, model set-up, teardown, Hydra),
the ratio (of wall times, and of the CPU time of each run's whole process tree,
``benchmarks/_tree.py``: the figure to compare where other work shares the machine), and
where each run's time went. Usage:
``python benchmarks/reuse.py [--steps 200] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from tabulate import tabulate

from _tree import measure
from sweep.layout import JobDir, SweepDir
from sweep.records import JobRecord

ROOT = Path(__file__).resolve().parent.parent
GRID = ["mesh=dp2,dp4,hsdp2x2", "optimizer=adam,sgd", "mp_policy=fp32,bf16"]
ARMS = {
    "per-job": ["execution.reuse_processes=false", "execution.reuse_baselines=false"],
    "fast path": [],
}


def run_arm(name: str, overrides: list[str], steps: int, out: Path) -> dict:
    sweep_dir = out / name.replace(" ", "_")
    cmd = [sys.executable, "-m", "sweep", "-m", "ablation=none", f"steps={steps}", *GRID, *overrides,
           f"hydra.sweep.dir={sweep_dir}"]
    began_epoch = time.time()
    log = out / f"{name.replace(' ', '_')}.log"
    measured = measure(cmd, log, dict(os.environ))
    ended_epoch = time.time()
    if measured["rc"] != 0:
        raise SystemExit(f"{name} failed:\n{log.read_text()[-6000:]}")
    results = {int(p.name): JobRecord.read(JobDir(p).result).to_dict() for p in SweepDir(sweep_dir).job_dirs()}
    return {"wall": measured["wall"], "cpu": measured["cpu"], "results": results,
            "parts": breakdown(results, began_epoch, ended_epoch)}


def breakdown(results: dict, began: float, ended: float) -> dict:
    """Where a multirun's wall time (s) went, from the jobs' ``result.json`` timestamps
    and timings (``sweep.run.job.run``): the parts add up to the wall time."""
    records = list(results.values())
    starts = [datetime.fromisoformat(r["started"]).timestamp() for r in records]
    ends = [datetime.fromisoformat(r["finished"]).timestamp() for r in records]
    job_wall = sum(r["timings_s"]["wall"] for r in records)
    training = sum(r["timings_s"].get(k, 0.0) for r in records for k in ("standalone", "distributed"))
    setup = sum(r["timings_s"].get("setup", 0.0) for r in records)
    return {
        "training loops": training,
        "rank set-up before training (lazy imports, models, mesh, data)": setup,
        "launch: process start, imports, rendezvous, teardown": job_wall - training - setup,
        "Hydra between jobs (compose, job dirs, judging)": (max(ends) - min(starts)) - job_wall,
        "Hydra before the first job (start, validation)": min(starts) - began,
        "after the last job (stopping launches, report)": ended - max(ends),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None, help="where the two sweep dirs go (default: a temp dir)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="sweep-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    runs = {name: run_arm(name, overrides, args.steps, out) for name, overrides in ARMS.items()}

    slow, fast = runs["per-job"], runs["fast path"]
    jobs = sorted(slow["results"])
    assert jobs == sorted(fast["results"]) and len(jobs) == 12, "both arms must finish the 12 jobs"
    same = all(slow["results"][j]["losses"] == fast["results"][j]["losses"] for j in jobs)
    statuses = {j: slow["results"][j]["status"] for j in jobs}
    print(f"grid: {' '.join(GRID)}, {args.steps} steps, {len(jobs)} jobs; sweep dirs under {out}")
    for name, run in runs.items():
        training = run["parts"]["training loops"]
        share = 1.0 - training / run["wall"]
        print(f"{name:>10}: {run['wall']:7.1f} s wall, {training:6.1f} s in training loops, "
              f"start-up and overhead {100 * share:4.1f}%; {run['cpu']:7.1f} CPU s over the process tree")
    print(f"     ratio: {slow['wall'] / fast['wall']:.2f}x faster with process and baseline reuse "
          f"({slow['cpu'] / fast['cpu']:.2f}x less CPU time)")
    rows = [[part, f"{slow['parts'][part]:.1f}", f"{fast['parts'][part]:.1f}"] for part in slow["parts"]]
    rows.append(["wall", f"{slow['wall']:.1f}", f"{fast['wall']:.1f}"])
    print("\nwhere the time went (s):")
    print(tabulate(rows, headers=["", "per-job", "fast path"], colalign=("left", "right", "right")))
    print(f"identical losses in every job: {same}; statuses: {sorted(set(statuses.values()))}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
