"""Benchmark: the full grid versus its isolation (``hydra/sweeper=isolate``).

For each case it runs, one after the other, as real multiruns on this machine:

1. the full grid (Hydra's basic sweeper), whose report names the deciding factors:
   the top culprit's factor and the factors it interacts with (``summary.json``:
   ``culprits[0]`` and its ``interactions``);
2. the isolation of the same grid (scouted endpoints, ddmin, context probes), whose
   ``isolate.json`` names its deciding factors (``deciding``).

Cases: ``seed_hypotheses`` (MindSpore data parallel, the report's 72 hypotheses), and
three PyTorch FSDP2 grids of 72 jobs with a fault planted through a test-only engine
(``tests/helpers/faulty_engine.py``, ``tests/helpers/planted_faults.py``): one deciding
factor; two that fail only together; three that fail only together; and one deciding
factor with a third of the grid crashing (errors to route around).

It prints, per case, the jobs and wall time of each arm, both answers and whether
they agree, and exits 1 if any case disagrees or takes more than a quarter of the
grid's jobs. Usage: ``python benchmarks/isolate.py [--steps 10] [--cases a,b] [--out DIR]``.

``--readme [--runs 3]`` times the README's isolation command instead (the report's
question between its own setup and a passing one, 10 steps): one warm-up, then ``runs``
runs; it prints each wall time, the median against the goal of 25 s on 2 cores, and the
answer, and exits 1 if the answer is not ``weights.transfer=shared + order=standalone_first``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parent.parent
GRID_A = ["optimizer=adam,sgd,adamw", "mesh=dp2,dp4,hsdp2x2", "reshard_after_forward=true,false",
          "deterministic=true,false", "order=standalone_first,distributed_first"]
GRID_B = ["optimizer=adam,sgd,adamw", "mp_policy=fp32,bf16", "deterministic=true,false",
          "mesh=dp2,dp4,hsdp2x2", "reshard_after_forward=true,false"]
ENGINE = "engine.impl.torch=tests.helpers."
CASES = {
    # name: (overrides of both arms, the factors that should decide it)
    "seed_hypotheses": (["experiment=seed_hypotheses"], {"weights.transfer", "order"}),
    "one_factor": (["ablation=none", ENGINE + "faulty_engine.GradScaleFSDP2", *GRID_A], {"optimizer"}),
    "two_factors": (["ablation=none", ENGINE + "planted_faults.NoReshardGradScaleFSDP2", *GRID_A],
                    {"optimizer", "reshard_after_forward"}),
    "three_factors": (["ablation=none", ENGINE + "planted_faults.Bf16NondetGradScaleFSDP2", *GRID_B],
                      {"optimizer", "mp_policy", "deterministic"}),
    "crashes": (["ablation=none", ENGINE + "planted_faults.Crash4RanksGradScaleFSDP2", *GRID_A], {"optimizer"}),
}


README_ISOLATION = [
    "hydra/sweeper=isolate", "experiment=seed_hypotheses", "steps=10",
    'hydra.sweeper.failing=["weights.transfer=shared","order=standalone_first","zero_grad=false",'
    '"data.split=replicated","optimizer=adam"]',
    'hydra.sweeper.passing=["weights.transfer=independent","order=separate","zero_grad=true",'
    '"data.split=sharded","optimizer=sgd"]',
]
README_ANSWER = "weights.transfer=shared + order=standalone_first"
GOAL_S = 25.0


def time_readme(out: Path, runs: int) -> int:
    """The README's isolation command: one warm-up, then ``runs`` timed runs (wall, s)."""
    walls = []
    for n in range(runs + 1):
        wall = run(README_ISOLATION, out / f"readme_{n}")
        state = json.loads((out / f"readme_{n}" / "isolate.json").read_text())
        print(f"run {n}{' (warm-up, not counted)' if n == 0 else ''}: {wall:.1f} s, {state['n_jobs']} jobs, "
              f"answer: {state.get('answer')}", flush=True)
        if state.get("answer") != README_ANSWER:
            print(f"unexpected answer (expected {README_ANSWER})")
            return 1
        if n:
            walls.append(wall)
    median = statistics.median(walls)
    print(f"\nREADME isolation: median {median:.1f} s over {runs} runs (min {min(walls):.1f}, max {max(walls):.1f}); "
          f"goal {GOAL_S:.0f} s: {'met' if median <= GOAL_S else 'NOT met'}")
    return 0


def run(args: list[str], sweep_dir: Path) -> float:
    cmd = [sys.executable, "-m", "sweep", "-m", *args, f"hydra.sweep.dir={sweep_dir}"]
    began = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - began
    (sweep_dir.parent / f"{sweep_dir.name}.log").write_text(proc.stdout + "\n" + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall


def grid_answer(summary: dict) -> tuple[set, str]:
    """The grid report's deciding factors and answer: the top culprit, and the factors
    its interactions name ("only when ...")."""
    if not summary["culprits"]:
        return set(), "no culprit"
    top = summary["culprits"][0]
    found = [i for i in summary["interactions"] if (i["factor"], i["level"]) == (top["factor"], top["level"])]
    text = f"{top['factor']}={top['level']}"
    text += "".join(f", only with {i['with_factor']}={'/'.join(map(str, i['with_levels']))}" for i in found)
    return {top["factor"], *(i["with_factor"] for i in found)}, text


def isolation_answer(state: dict) -> tuple[set, str]:
    text = state.get("answer") or "none"
    for key, c in (state.get("conditions") or {}).items():
        text += f", only with {key}={'/'.join(map(str, c['fails']))}"
    return set(state.get("deciding") or []), text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    parser.add_argument("--out", type=Path, default=None, help="where the sweep dirs go (default: a temp dir)")
    parser.add_argument("--readme", action="store_true", help="time the README's isolation command instead")
    parser.add_argument("--runs", type=int, default=3, help="with --readme: timed runs after one warm-up")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="sweep-isolate-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.readme:
        return time_readme(out, args.runs)
    rows, ok = [], True
    for name in args.cases.split(","):
        overrides, expected = CASES[name]
        common = [*overrides, f"steps={args.steps}"]
        grid_wall = run(common, out / f"{name}_grid")
        summary = json.loads((out / f"{name}_grid" / "summary.json").read_text())
        iso_wall = run(["hydra/sweeper=isolate", *common], out / f"{name}_isolate")
        state = json.loads((out / f"{name}_isolate" / "isolate.json").read_text())
        grid_jobs = len(summary["jobs"])
        g_factors, g_text = grid_answer(summary)
        i_factors, i_text = isolation_answer(state)
        agree = g_factors == i_factors
        quarter = state["n_jobs"] * 4 <= grid_jobs
        ok &= agree and quarter
        rows.append([name, grid_jobs, f"{grid_wall:.0f}", g_text, state["n_jobs"], f"{iso_wall:.0f}", i_text,
                     f"{state['n_jobs'] / grid_jobs:.0%}", "yes" if agree else "NO",
                     "yes" if g_factors == expected else "NO"])
        print(f"{name}: grid {grid_jobs} jobs {grid_wall:.0f} s -> {g_text}; isolation {state['n_jobs']} jobs "
              f"{iso_wall:.0f} s -> {i_text}; agree: {agree}", flush=True)
    print(f"\n{args.steps} steps per job; sweep dirs under {out}\n")
    print(tabulate(rows, headers=["case", "grid jobs", "grid s", "grid: deciding", "isolation jobs", "isolation s",
                                  "isolation: deciding", "jobs ratio", "agree", "planted"], disable_numparse=True))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
