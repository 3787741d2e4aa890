"""Benchmark: what the module trace costs (``compare.module_trace``, issue 25).

Runs the same drifting job (a test-only engine whose later layer's forward output is off
by 1 %, ``tests.helpers.inside_faults.LaterLayerForwardFSDP2``, on the transformer) with
the module trace off and on, a few times each, one after the other, and prints the job's
own run time (its launch, without the tracing rerun: ``timings_s.wall - timings_s.trace``
in ``result.json``), the tracing rerun's time with and without the module trace, the
module trace's cost as a share of the job's own run time (the goal: at most 20 %), and
the first module it named. Usage: ``python benchmarks/module_trace.py [--steps 200]
[--repeats 2] [--model transformer]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from sweep.layout import JobDir
from sweep.records import JobRecord

ROOT = Path(__file__).resolve().parent.parent
ENGINE = "engine.impl.torch=tests.helpers.inside_faults.LaterLayerForwardFSDP2"


def run(out: Path, steps: int, model: str, module_trace: bool) -> JobRecord:
    subprocess.run([sys.executable, "-m", "sweep", f"steps={steps}", f"model={model}", ENGINE,
                    f"compare.module_trace={str(module_trace).lower()}", f"hydra.run.dir={out}"],
                   cwd=ROOT, capture_output=True, text=True, check=False)
    return JobRecord.read(JobDir(out).result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", default="transformer")
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="sweep-module-trace-"))
    own, trace = {False: [], True: []}, {False: [], True: []}
    named = None
    for i in range(args.repeats):
        for on in (False, True):
            record = run(out / f"{int(on)}_{i}", args.steps, args.model, on)
            traced = record.timings_s.get("trace", float("nan"))
            own[on].append(record.timings_s["wall"] - traced)
            trace[on].append(traced)
            if on:
                named = (record.first_module or {}).get("description")
    job = statistics.median(own[False] + own[True])
    off, on = statistics.median(trace[False]), statistics.median(trace[True])
    print(f"job: steps={args.steps} model={args.model} {ENGINE}; {args.repeats} runs each, medians")
    print(f"  the job's own run (launch, both copies): {job:6.2f} s")
    print(f"  tracing rerun, tensors only:              {off:6.2f} s")
    print(f"  tracing rerun, with the module trace:     {on:6.2f} s")
    print(f"  module trace cost: {on - off:+.2f} s = {100 * (on - off) / job:+.1f}% of the job's own run "
          "(goal: at most 20%)")
    print(f"  first differing module: {named}")


if __name__ == "__main__":
    main()
