"""Benchmark: where the test suite's time goes, and what one process start costs.

The README's test command runs on every core (pytest-xdist, a module per worker), and
on 2 cores its integration tests keep both busy: its time is the CPU its real launches
need. This prints the figures to plan against:

1. With ``--junit FILE`` (``python -m pytest --junitxml FILE``): the time of each test
   module and of the slowest tests, summed over the workers (each test's time as its
   worker saw it, so under the other worker's load), and that sum over the wall time.
2. The CPU seconds (the machine's, see :func:`cpu_seconds`) of the process starts every
   launch pays, each measured once, one after another: ``import torch``, ``import
   mindspore`` (where installed), and a real single run ``python -m sweep steps=3`` (the
   main process, the fork server that imports torch once, its forked launch and 2 ranks).

Usage: ``python benchmarks/suite.py [--junit FILE] [--top 15]``.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import List, Tuple

from tabulate import tabulate

ROOT = Path(__file__).resolve().parent.parent


def junit_times(path: Path) -> Tuple[collections.Counter, List[Tuple[float, str]], float]:
    """``(seconds per test module, [(seconds, test id)], pytest's reported wall seconds)``
    from a JUnit XML file as pytest writes it (``testcase`` ``classname``/``name``/``time``;
    the ``testsuite`` ``time`` is the session's wall time)."""
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    modules: collections.Counter = collections.Counter()
    tests = []
    for case in root.iter("testcase"):
        seconds = float(case.get("time") or 0.0)
        modules[case.get("classname", "")] += seconds
        tests.append((seconds, f"{case.get('classname')}::{case.get('name')}"))
    return modules, sorted(tests, reverse=True), float(suite.get("time") or 0.0)


def cpu_seconds(argv: List[str], cwd: Path, settle_s: float = 3.0) -> Tuple[float, float]:
    """``(wall seconds, CPU seconds)`` of ``argv`` run to its end. The CPU is the whole
    machine's (``psutil.cpu_times()``: user + nice + system), from the start until
    ``settle_s`` after the end, so that processes the command does not wait for count too
    (a run's fork server ends by itself once the run's process is gone); so run this on an
    otherwise idle machine.

    Raises:
        subprocess.CalledProcessError: the command exited non-zero.
    """
    import psutil

    def busy() -> float:
        t = psutil.cpu_times()
        return t.user + t.nice + t.system

    before = busy()
    began = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, capture_output=True, env=dict(os.environ))
    wall = time.perf_counter() - began
    time.sleep(settle_s)
    return wall, busy() - before


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--junit", type=Path, default=None, help="a JUnit XML file of a suite run")
    parser.add_argument("--top", type=int, default=15, help="modules and tests to list (default 15)")
    args = parser.parse_args(argv)

    if args.junit is not None:
        modules, tests, wall = junit_times(args.junit)
        total = sum(modules.values())
        print(f"{len(tests)} tests; their times sum to {total:.0f} s", end="")
        print(f" over {wall:.0f} s of pytest's wall time ({total / wall:.2f} at once on average)" if wall else "")
        print()
        print(tabulate([(m, f"{s:.0f}", f"{100 * s / total:.0f}%") for m, s in modules.most_common(args.top)],
                       headers=["module", "seconds", "share"]))
        print()
        print(tabulate([(t, f"{s:.0f}") for s, t in tests[:args.top]], headers=["test", "seconds"]))
        print()

    python = sys.executable
    starts = [("import torch", [python, "-c", "import torch"])]
    if importlib.util.find_spec("mindspore") is not None:
        starts.append(("import mindspore", [python, "-c", "import mindspore"]))
    with tempfile.TemporaryDirectory() as tmp:
        starts.append(("python -m sweep steps=3 (single run, 2 ranks)",
                       [python, "-m", "sweep", "steps=3", f"hydra.run.dir={tmp}/run"]))
        rows = []
        for name, command in starts:
            wall, cpu = cpu_seconds(command, ROOT)
            rows.append((name, f"{wall:.1f}", f"{cpu:.1f}"))
    print(tabulate(rows, headers=["process start", "wall s", "CPU s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
