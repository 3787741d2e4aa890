"""Benchmark: what naming the first differing tensor costs (``compare.trace_after``).

Runs the same failing job (a test-only engine that doubles the gradients before the SGD
step) with tracing off (``compare.trace_after=0``) and on (the defaults: gradients and
weights 3 steps past the first difference, weights on to ``compare.onset_steps``, 24, for
the onset from the update differences), a few times each, one after the other, and prints the wall time of each
job, the time of its tracing rerun (``timings_s.trace`` in ``result.json``) and the first
tensor it named. Usage: ``python benchmarks/trace.py [--steps 200] [--repeats 2]``.
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
JOB = ["optimizer=sgd", "engine.impl.torch=tests.helpers.faulty_engine.GradScaleFSDP2"]


def run(out: Path, steps: int, trace_after: int) -> JobRecord:
    subprocess.run([sys.executable, "-m", "sweep", f"steps={steps}", *JOB, f"compare.trace_after={trace_after}",
                    f"hydra.run.dir={out}"], cwd=ROOT, capture_output=True, text=True, check=False)
    return JobRecord.read(JobDir(out).result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="sweep-trace-"))
    walls = {0: [], 3: []}
    traces, named, onset = [], None, None
    for i in range(args.repeats):
        for after in (0, 3):
            record = run(out / f"{after}_{i}", args.steps, after)
            walls[after].append(record.timings_s["wall"])
            if after:
                traces.append(record.timings_s.get("trace", float("nan")))
                named = (record.first_tensor or {}).get("description")
                onset = ((record.first_tensor or {}).get("updates") or {}).get("pattern")
    off, on = statistics.median(walls[0]), statistics.median(walls[3])
    print(f"job: steps={args.steps} {' '.join(JOB)}; {args.repeats} runs each, medians")
    print(f"  tracing off: {off:6.1f} s per job")
    print(f"  tracing on:  {on:6.1f} s per job, of which the tracing rerun {statistics.median(traces):.1f} s "
          f"(+{100 * (on - off) / off:.0f}%)")
    print(f"  first differing tensor: {named}")
    print(f"  onset from the update differences: {onset}")


if __name__ == "__main__":
    main()
