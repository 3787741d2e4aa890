"""What a command costs, measured from outside: its wall time, and over its whole process tree
(the command and every process under it, sampled every 0.2 s with psutil) the peak memory,
the CPU time and the bytes written. Shared by ``benchmarks/scale.py`` and ``benchmarks/reuse.py``."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import psutil

ROOT = Path(__file__).resolve().parent.parent


def _pss(pid: int) -> int:
    """A process's proportional set size (bytes), or its RSS where smaps_rollup is unreadable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return 0


def measure(cmd: List[str], log: Path, env: Dict[str, str]) -> Dict[str, Any]:
    """Run ``cmd`` (output to ``log``) and sample its process tree: ``{"wall" (s), "peak" (bytes:
    the largest sum of Pss over the tree), "written" (bytes: the sum over every process seen of
    its own ``write_bytes``: its largest, less what the children it had reaped by then wrote,
    which Linux adds to a parent's), "cpu" (s: the sum over every process seen of its user and
    system time at its last sample; a load-independent measure where wall times are not), "rc"}``."""
    peak, written, cpu, done = [0], {}, {}, threading.Event()
    parent, seen, gone = {}, {}, {}  # pid -> its parent, when last seen, when first missed
    with open(log, "w") as out:
        began = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
        top = psutil.Process(proc.pid)

        def sample() -> None:
            while not done.is_set():
                try:
                    tree = [top] + top.children(recursive=True)
                except psutil.Error:
                    tree = []
                total, now = 0, time.monotonic()
                for pid in set(seen) - {p.pid for p in tree} - set(gone):
                    gone[pid] = now
                for p in tree:
                    total += _pss(p.pid)
                    seen[p.pid] = now
                    try:
                        parent.setdefault(p.pid, p.ppid())
                    except psutil.Error:
                        pass
                    try:
                        written[p.pid] = max(written.get(p.pid, 0), p.io_counters().write_bytes)
                        times = p.cpu_times()
                        cpu[p.pid] = max(cpu.get(p.pid, 0.0), times.user + times.system)
                    except psutil.Error:
                        pass
                peak[0] = max(peak[0], total)
                done.wait(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        rc = proc.wait()
        wall = time.monotonic() - began
        done.set()
        sampler.join()
    # a process's write_bytes include those of the children it reaped: count each process's own
    own = {pid: w - sum(written.get(c, 0) for c, up in parent.items() if up == pid and gone.get(c, float("inf"))
                        <= seen.get(pid, 0.0)) for pid, w in written.items()}
    return {"wall": wall, "peak": peak[0], "written": sum(max(0, w) for w in own.values()), "cpu": sum(cpu.values()),
            "rc": rc}
