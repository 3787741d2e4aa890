"""Benchmark: per-job launching versus the fast path (process and baseline reuse).

Runs the same fixed grid twice as real multiruns, one after the other:
12 jobs = mesh dp2, dp4, hsdp2x2 (2 and 4 ranks) x optimizer adam, sgd x
mp_policy fp32, bf16, 200 steps each, PyTorch FSDP2 on CPU (gloo).

1. per-job: ``launcher.reuse_processes=false launcher.reuse_baselines=false``
   (one torchrun per job, the standalone baseline trained in every job);
2. fast path: the defaults (one torchrun per world size, baselines reused).

It checks that both give the same losses, bit for bit, job by job, and prints
each run's wall time, its start-up share (wall time not spent inside the ranks'
training loops: process start, imports, rendezvous, model set-up, teardown), and
the ratio. Usage: ``python benchmarks/reuse.py [--steps 200] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GRID = ["mesh=dp2,dp4,hsdp2x2", "optimizer=adam,sgd", "mp_policy=fp32,bf16"]
ARMS = {
    "per-job": ["launcher.reuse_processes=false", "launcher.reuse_baselines=false"],
    "fast path": [],
}


def run_arm(name: str, overrides: list[str], steps: int, out: Path) -> dict:
    sweep_dir = out / name.replace(" ", "_")
    cmd = [sys.executable, "-m", "sweep", "-m", "ablation=none", f"steps={steps}", *GRID, *overrides,
           f"hydra.sweep.dir={sweep_dir}"]
    began = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - began
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    results = {int(p.parent.name): json.loads(p.read_text()) for p in sweep_dir.glob("*/result.json")}
    training = sum(
        sum(r["timings_s"].get(k, 0.0) for k in ("standalone", "distributed")) for r in results.values()
    )
    return {"wall": wall, "training": training, "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None, help="where the two sweep dirs go (default: a temp dir)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="sweep-bench-"))
    runs = {name: run_arm(name, overrides, args.steps, out) for name, overrides in ARMS.items()}

    slow, fast = runs["per-job"], runs["fast path"]
    jobs = sorted(slow["results"])
    assert jobs == sorted(fast["results"]) and len(jobs) == 12, "both arms must finish the 12 jobs"
    same = all(slow["results"][j]["losses"] == fast["results"][j]["losses"] for j in jobs)
    statuses = {j: slow["results"][j]["status"] for j in jobs}
    print(f"grid: {' '.join(GRID)}, {args.steps} steps, {len(jobs)} jobs; sweep dirs under {out}")
    for name, run in runs.items():
        share = 1.0 - run["training"] / run["wall"]
        print(f"{name:>10}: {run['wall']:7.1f} s wall, {run['training']:6.1f} s in training loops, "
              f"start-up and overhead {100 * share:4.1f}%")
    print(f"     ratio: {slow['wall'] / fast['wall']:.2f}x faster with process and baseline reuse")
    print(f"identical losses in every job: {same}; statuses: {sorted(set(statuses.values()))}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
