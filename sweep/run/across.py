"""Two copies traced in two frameworks (``baseline.framework``), compared under one name map:
the one the initial weights use (``sweep.models.convert.canonical_name``: PyTorch's spelling,
MindSpore's ``gamma``/``beta``/``moving_mean``/``moving_variance`` renamed), for the tensor
trace, the module trace (the presets' module names agree across the ports) and the buffers.

The tracing rerun of a cross-framework job trains the distributed copy on the ranks and the
standalone copy in the other framework's process, each writing its trace
(``sweep.train.trace_files``); :func:`compare` holds each rank's against the standalone one's
(``sweep.analysis.trace.locate``, ``sweep.analysis.modules.compare_modules``), so a job names
the first module and tensor where the frameworks part, as a job in one framework does."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from sweep.layout import JobDir
from sweep.models.convert import TORCH_ONLY, canonical_name

Trace = List[Dict[str, Any]]


def load(job_dir: Path | str, who: str) -> Optional[Dict[str, Any]]:
    """What ``sweep.train.trace_files.save`` wrote for ``who`` (``rank_<r>``, ``standalone``),
    or ``None`` where there is no such file."""
    path = JobDir(job_dir).trace_file(who)
    if not path.exists():
        return None
    with open(path, "rb") as handle:
        return pickle.load(handle)


def renamed(trace: Trace, framework: str) -> Trace:
    """``trace`` (a tensor trace: per step ``{kind: {name: array}}`` and ``"order": {kind:
    [names]}``) with every name in the canonical spelling, PyTorch-only buffers
    (``num_batches_tracked``) left out."""
    out = []
    for step in trace:
        entry: Dict[str, Any] = {}
        for kind, tensors in step.items():
            if kind == "order":
                entry[kind] = {k: [canonical_name(n, framework) for n in names] for k, names in tensors.items()}
            else:
                entry[kind] = {canonical_name(n, framework): v for n, v in tensors.items()
                               if n.rpartition(".")[2] not in TORCH_ONLY}
        out.append(entry)
    return out


def compare(trace_dir: Path | str, world: int, noise_floor: float, sharded: bool,
            envelope: Optional[Tuple[float, str]] = None) -> Tuple[List[Tuple[Dict[str, Any], int]],
                                                                   List[Tuple[Dict[str, Any], int]]]:
    """Each rank's first differing tensor and module against the standalone copy traced in the
    other framework: ``([(first tensor, rank)], [(module comparison, rank)])`` for the ranks
    whose trace file is there (:func:`load`), ``([], [])`` without the
    standalone copy's. ``envelope``: ``(compare.envelope_margin, the twin's nudge dtype)``
    where the rounding envelope is measured; then the standalone copy's twin, traced in the
    same process (``ranks/trace_twin.pkl``), bounds each tensor and module as in a
    one-framework job (``sweep.analysis.trace.locate``), and without its file nothing is
    called rounding."""
    from sweep.analysis.envelope import EnvelopeSetting
    from sweep.analysis.modules import compare_modules
    from sweep.analysis.trace import Search, locate, tensor_rows, to_shards

    alone = load(trace_dir, "standalone")
    twin = load(trace_dir, "twin") if envelope else None
    setting = EnvelopeSetting(*envelope) if envelope else EnvelopeSetting()
    tensors: List[Tuple[Dict[str, Any], int]] = []
    modules: List[Tuple[Dict[str, Any], int]] = []
    if alone is None:
        return tensors, modules
    ours_all = renamed(alone["tensors"], alone["framework"])
    twin_all = renamed(twin["tensors"], twin["framework"]) if twin else None
    for rank in range(world):
        mine = load(trace_dir, f"rank_{rank}")
        if mine is None:
            continue
        theirs = renamed(mine["tensors"], mine["framework"])
        ours = to_shards(ours_all, theirs, rank)
        if ours and theirs:
            found = locate(ours, theirs, min(alone["last"], mine["last"]), Search(noise_floor, rank),
                           twin=to_shards(twin_all, theirs, rank) if twin_all else None, envelope=setting)
            found["across"] = {"standalone": alone["framework"], "distributed": mine["framework"],
                               "rows": len(tensor_rows(ours, theirs))}
            tensors.append((found, rank))
        if alone.get("modules") and mine.get("modules"):
            compared = compare_modules(alone["modules"], mine["modules"], rank, sharded=sharded,
                                       twin=(twin or {}).get("modules"), envelope=setting)
            if ours and theirs:
                compared = buffer_owner(compared, found)
            modules.append((compared, rank))
    return tensors, modules


def buffer_owner(modules: Dict[str, Any], found: Dict[str, Any]) -> Dict[str, Any]:
    """The module comparison, with its first module the owner of a buffer that parts beyond
    its rounding envelope (``found``: the first tensor, or its first beyond the envelope,
    ``beyond_rounding``; without a measured envelope any difference counts) at an earlier
    step than any module's output does: the module whose forward updates that statistic
    otherwise, though its outputs agree (a BatchNorm's running statistics across
    frameworks)."""
    real = found.get("beyond_rounding") if "beyond_rounding" in found else found
    first = modules.get("first")
    if not real or real.get("kind") != "buffer" or (first is not None and first.get("step", 0) <= real["step"]):
        return modules
    owner, _, leaf = real["name"].rpartition(".")
    return dict(modules, first={"module": owner or "(model)", "phase": "forward", "step": real["step"],
                                "where": "buffer", "buffer": leaf, "rel_out": float(real["rel_diff"])})
