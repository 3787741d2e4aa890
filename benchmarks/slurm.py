"""Benchmark: jobs per minute through a SLURM controller against Hydra's basic launcher.

Runs the same grid twice as real multiruns, one after the other, and prints each run's wall
time and jobs per minute:

1. basic: Hydra's default launcher, on this machine (the jobs one after another in the
   sweep's process, sharing launches: the fast path);
2. slurm: ``hydra/launcher=slurm`` (submitit): one SLURM job per Hydra job, submitted as one
   job array to the controller of ``SLURM_CONF`` (by default the test cluster of
   ``.ci/slurm-cluster``: two nodes on this host), each job its own launch.

The grid is a slice of the default grid (``conf/ablation/report.yaml``): ``mesh=dp2
reshard_after_forward=true``, mp_policy x deterministic x optimizer = 8 jobs, 20 steps.
It checks that both runs give the same losses, job by job, bit for bit. Usage:
``python benchmarks/slurm.py [--steps 20] [--partition sweep] [--out DIR]`` (with the
cluster up: ``.ci/slurm-cluster up``).

Jobs per minute = jobs / wall time of the whole command (submission, queueing, the jobs,
the report), from ``time.monotonic()``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parent.parent
GRID = ["mesh=dp2", "reshard_after_forward=true"]  # the default grid's other three factors: 8 jobs


def slurm_conf() -> str:
    """``SLURM_CONF`` if set, else the test cluster's (``.ci/slurm-cluster env``)."""
    if os.environ.get("SLURM_CONF"):
        return os.environ["SLURM_CONF"]
    out = subprocess.run(["bash", str(ROOT / ".ci" / "slurm-cluster"), "env"], capture_output=True, text=True,
                         check=True).stdout
    return out.strip().partition("SLURM_CONF=")[2]


def run_arm(name: str, extra: list, steps: int, out: Path, env: dict) -> dict:
    sweep_dir = out / name
    cmd = [sys.executable, "-m", "sweep", "-m", f"steps={steps}", *GRID, *extra, f"hydra.sweep.dir={sweep_dir}"]
    began = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    wall = time.monotonic() - began
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{name} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    results = {int(p.parent.name): json.loads(p.read_text()) for p in sweep_dir.glob("*/result.json")}
    return {"wall": wall, "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--partition", default="sweep", help="hydra.launcher.partition (the test cluster's: sweep)")
    parser.add_argument("--out", type=Path, default=None, help="where the two sweep dirs go (default: a temp dir)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-slurm-"))
    env = dict(os.environ, SLURM_CONF=slurm_conf())
    load = os.getloadavg()
    arms = {
        "basic": run_arm("basic", [], args.steps, out, env),
        "slurm": run_arm("slurm", ["hydra/launcher=slurm", f"hydra.launcher.partition={args.partition}"],
                         args.steps, out, env),
    }
    basic, slurm = arms["basic"]["results"], arms["slurm"]["results"]
    same = sorted(basic) == sorted(slurm) and all(
        basic[n]["losses"] == slurm[n]["losses"] and basic[n]["status"] == slurm[n]["status"] for n in basic)
    rows = [[name, len(arm["results"]), f"{arm['wall']:.1f}", f"{60 * len(arm['results']) / arm['wall']:.1f}"]
            for name, arm in arms.items()]
    print(tabulate(rows, headers=["launcher", "jobs", "wall s", "jobs/min"], tablefmt="github"))
    print(f"steps={args.steps}, grid: the default grid with {' '.join(GRID)}; same statuses and losses, bit for bit: "
          f"{same}; load average before (1/5/15 min): {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on "
          f"{os.cpu_count()} cores; sweep dirs: {out}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
