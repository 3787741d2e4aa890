"""Benchmark: what a job costs as the model grows, and what naming a fault costs on top.

At each size of the transformer preset (``model.hidden_size`` x ``model.args.num_layers``,
``num_heads = hidden / 64``; mesh dp2, fp32, Adam, the preset's batch of 4 sequences of 16),
one after the other:

1. the **floor**: ``benchmarks/scale_floor.py`` under ``torchrun``, the least a script does to
   train the same model standalone and under FSDP2 for the same steps;
2. a **passing** job: ``python -m sweep model=transformer ...`` (FSDP2 in fp32 is bit-identical
   to standalone here: no tracing rerun);
3. a **failing** job: the same with ``engine.impl.torch=tests.helpers.inside_faults
   .LaterLayerForwardFSDP2`` (the distributed copy's ``layers.1.up`` returns its output x1.01
   from step 0), so its tracing rerun runs and names the module and the tensor.

For each (``benchmarks/_tree.py``): the wall time, the CPU time of the whole process tree
(where other work shares the machine, the figure to compare), its peak memory (the sum over
the command and every process under it of the proportional set size, ``Pss`` of
``/proc/PID/smaps_rollup``: a page shared by n processes counts 1/n in each; sampled every
0.2 s with psutil) and the bytes it wrote to storage (each process's own ``write_bytes``). For the failing job also its tracing rerun's time, the bytes its trace files
keep (``JOB_DIR/trace/``, the spool gone) and the bytes its staged trace spooled, the
module and tensor it named. Ratios: passing / floor and failing / passing.

Both the jobs and the floor train under torch's deterministic algorithms (``deterministic=true``,
the jobs' default; ``--deterministic false`` turns them off in both): with them on, torch fills
every new tensor's memory (``torch.utils.deterministic.fill_uninitialized_memory``), FSDP2's
reduce-scatter and all-gather buffers each step among them (0.095 s per 100M float32 elements
here), a cost of the setting, not of the tool.

Usage: ``python benchmarks/scale.py [--sizes 512x4,512x8,1024x4,1024x8] [--steps 60]
[--device cpu|cuda] [--capture staged|full] [--out DIR] [--only floor,passing,failing]
[--deterministic true|false]``.
On a GPU host: ``--device cuda`` (NCCL; the floor too).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

from tabulate import tabulate

from _tree import measure

ROOT = Path(__file__).resolve().parent.parent
FAULT = "engine.impl.torch=tests.helpers.inside_faults.LaterLayerForwardFSDP2"
GIB = 1024 ** 3


def parameters(hidden: int, layers: int, vocab: int = 64) -> int:
    """The transformer preset's parameter count (``sweep.models.torch_models.TinyDecoder``):
    per block two RMSNorms (h), qkv (3h^2 + 3h), proj (h^2 + h), up (4h^2 + 4h), down
    (4h^2 + h); the embedding and the head (vocab x h each) and the final norm."""
    block = 2 * hidden + 3 * hidden * hidden + 3 * hidden + hidden * hidden + hidden + 4 * hidden * hidden \
        + 4 * hidden + 4 * hidden * hidden + hidden
    return layers * block + 2 * vocab * hidden + hidden


def job_cmd(out: Path, hidden: int, layers: int, steps: int, device: str, capture: str, faulty: bool,
            deterministic: str = "true") -> List[str]:
    return [sys.executable, "-m", "sweep", "model=transformer", f"model.hidden_size={hidden}",
            f"model.args.num_layers={layers}", f"model.args.num_heads={max(1, hidden // 64)}", f"steps={steps}",
            f"device={device}", "mesh=dp2", "execution.timeout_s=36000", f"compare.trace_capture={capture}",
            f"deterministic={deterministic}", *([FAULT] if faulty else []), f"hydra.run.dir={out}"]


def floor_cmd(hidden: int, layers: int, steps: int, device: str, deterministic: str = "true") -> List[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            str(ROOT / "benchmarks" / "scale_floor.py"), str(hidden), str(layers), str(max(1, hidden // 64)),
            str(steps), device, deterministic]


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def failing_details(out: Path) -> Dict[str, Any]:
    """What the failing job's record says: status, the rerun's time, the module and tensor
    named, the trace dir's bytes and the bytes the ranks spooled."""
    record = json.loads((out / "result.json").read_text())
    module, tensor = record.get("first_module") or {}, record.get("first_tensor") or {}
    spooled = 0
    for path in (out / "trace" / "ranks").glob("rank_*.json"):
        spooled += ((json.loads(path.read_text()).get("features") or {}).get("trace") or {}).get("spooled_bytes", 0)
    return {"status": record["status"], "trace_s": (record.get("timings_s") or {}).get("trace"),
            "module": f"{module.get('module')} {module.get('phase')} step {module.get('step')}",
            "tensor": f"{tensor.get('name')} {tensor.get('kind')} step {tensor.get('step')}",
            "trace_bytes": _du(out / "trace"), "spooled": spooled}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="512x4,512x8,1024x4,1024x8", help="HIDDENxLAYERS, comma-separated")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--capture", default="staged", choices=("staged", "full"))
    parser.add_argument("--only", default="floor,passing,failing")
    parser.add_argument("--deterministic", default="true", choices=("true", "false"),
                        help="torch's deterministic algorithms in the jobs (their default) and the floor alike")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="sweep-scale-"))
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    arms = args.only.split(",")
    rows, notes = [], []
    print(f"transformer preset, mesh dp2, fp32, Adam, {args.steps} steps, device={args.device}, "
          f"compare.trace_capture={args.capture}, deterministic={args.deterministic}; runs under {out}", flush=True)
    for size in args.sizes.split(","):
        hidden, layers = (int(v) for v in size.split("x"))
        n = parameters(hidden, layers)
        got: Dict[str, Dict[str, Any]] = {}
        for arm in arms:
            where = out / f"{size}_{arm}"
            cmd = floor_cmd(hidden, layers, args.steps, args.device, args.deterministic) if arm == "floor" else \
                job_cmd(where, hidden, layers, args.steps, args.device, args.capture, arm == "failing",
                        args.deterministic)
            where.mkdir(parents=True, exist_ok=True)
            got[arm] = measure(cmd, out / f"{size}_{arm}.log", env)
            line = (f"  {n / 1e6:6.1f}M {arm:>8}: {got[arm]['wall']:7.1f} s ({got[arm]['cpu']:7.1f} CPU s), peak "
                    f"{got[arm]['peak'] / GIB:5.2f} GiB, wrote {got[arm]['written'] / 1e6:8.1f} MB, exit {got[arm]['rc']}")
            if arm == "failing" and (where / "result.json").exists():
                got[arm].update(failing_details(where))
                d = got[arm]
                line += (f"; {d['status']}, rerun {d['trace_s'] or float('nan'):.1f} s, trace files "
                         f"{d['trace_bytes'] / 1e6:.2f} MB, spooled {d['spooled'] / 1e6:.1f} MB; named {d['module']}, "
                         f"{d['tensor']}")
            print(line, flush=True)
        row = [f"{n / 1e6:.1f}M"]
        for arm in ("floor", "passing", "failing"):
            m = got.get(arm)
            row.append(f"{m['wall']:.0f} s ({m['cpu']:.0f} CPU s), {m['peak'] / GIB:.2f} GiB, {m['written'] / 1e6:.0f} MB"
                       if m else "-")
        p, f, fl = got.get("passing"), got.get("failing"), got.get("floor")
        row.append(f"{p['wall'] / fl['wall']:.2f}x time ({p['cpu'] / fl['cpu']:.2f}x CPU)" if p and fl else "-")
        row.append(f"{f['wall'] / p['wall']:.2f}x time ({f['cpu'] / p['cpu']:.2f}x CPU), {f['peak'] / p['peak']:.2f}x "
                   "memory" if p and f else "-")
        row.append(f"{f['trace_bytes'] / 1e6:.2f} MB kept, {f['spooled'] / 1e6:.0f} MB spooled" if f and "trace_bytes" in f
                   else "-")
        rows.append(row)
        if f and "tensor" in f:
            notes.append(f"{n / 1e6:.1f}M: {f['status']}; first module {f['module']}; first tensor {f['tensor']}")
    print()
    print(tabulate(rows, headers=["parameters", "floor: time, peak, written", "passing job", "failing job",
                                  "passing / floor", "failing / passing", "trace (failing)"]))
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
