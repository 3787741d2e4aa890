"""Per-rank training: what every rank of a job runs, started by torchrun or msrun.

May import: ``sweep.config``, ``sweep.models``, ``sweep.engines``, ``sweep.analysis`` and the
contracts at the top; never ``sweep.frameworks``, ``sweep.launch`` or ``sweep.run``, which start it.

``python -m sweep.train JOB_DIR`` (or the file ``sweep/train/__main__.py`` for msrun)
reads ``JOB_DIR/job.yaml`` (the resolved config the job wrote), trains the copies of
the model on this rank in the configured ``order``, and writes
``JOB_DIR/ranks/rank_<rank>.json``: a ``sweep.records.RankResult``. In a job's first pass
rank 0 trains the standalone copy and the distributed one, the others the distributed one
(the last rank the standalone copy's twin first); in a tracing rerun every rank all of them
(:func:`phase_order`).

With ``order=separate`` the ranks train only the distributed copy and
``python -m sweep.train JOB_DIR --phase standalone`` (one plain process, no launcher)
writes ``ranks/standalone.json`` with the standalone sequence. So does the standalone
process of a job whose ``baseline.framework`` names another framework
(:func:`crosses_frameworks`): it runs under that framework's preset
(:func:`standalone_config`), after the ranks, from the initial weights rank 0 wrote.
Losses are Python floats of the framework's scalar loss (float32 values, exact).
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np
from omegaconf import DictConfig, OmegaConf

from sweep.layout import JobDir
from sweep.records import RankResult

PHASES = ("both", "standalone", "distributed")


def load_job(job_dir: Path | str) -> DictConfig:
    """The job's resolved config (plain values: enums are strings)."""
    return OmegaConf.load(JobDir(job_dir).config)


def rank_functions(cfg: Any) -> Any:
    """The rank module of the job's framework (``framework.impl``'s ``rank_module``).

    The class is looked up by the path the config names (checked in the job process
    before launch, ``sweep.run.checks``), so rank-side code imports no framework module
    by name: ``sweep.train`` stays below ``sweep.frameworks``, which starts it."""
    from hydra.utils import get_class

    return get_class(str(cfg.framework.impl)).rank_functions()


def write_rank_result(
    job_dir: Path | str, phase: str, result: RankResult, setup_s: float, seconds: Dict[str, float]
) -> None:
    """Write this process's ``result`` (its ``timings_s`` completed with ``setup_s`` and
    the per-copy ``seconds``): ``ranks/rank_<rank>.json``, or ``ranks/standalone.json``
    for the standalone-only process of ``order=separate``."""
    result.timings_s = {"setup": setup_s, **seconds}
    result.python = platform.python_version()
    job = JobDir(job_dir)
    result.write(job.standalone_result if phase == "standalone" else job.rank_result(result.rank))


def redirect_to(path: Path) -> None:
    """Send this process's stdout/stderr (C level too) to ``path`` (appended)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def redirect_output(job_dir: Path, rank: int) -> None:
    """Send this process's stdout/stderr (C level too) to ``JOB_DIR/logs/worker_<rank>.log``."""
    redirect_to(JobDir(job_dir).worker_log(rank))


def phase_order(order: str, phase: str, job_dir: Path | str | None = None, rank: int = 0,
                everywhere: bool = False) -> List[str]:
    """The copies this process trains, in order. The standalone copy is left out when
    its losses are already known: ``order=separate``, or a baseline the job took from
    the sweep's cache (``JOB_DIR/ranks/standalone.json`` exists before the ranks start).
    Of the ranks of one launch (``phase="both"``) only rank 0 trains it, unless every rank
    must (``everywhere``, :func:`standalone_everywhere`): every rank would train the same
    sequence from the same weights and data, and the others' cores are free for the
    standalone copy's twin meanwhile (:func:`sweep.train.twin.trains`: the last rank's).
    :func:`launch_order` gives the launch's (rank 0's) copies.

    Raises:
        ValueError: unknown ``order`` or ``phase``.
    """
    names = launch_order(order, phase, job_dir)
    if rank > 0 and not everywhere and phase == "both":
        return [name for name in names if name != "standalone"]
    return names


def standalone_everywhere(cfg: Any) -> bool:
    """Whether every rank of a launch trains the standalone copy (:func:`phase_order`): in a
    tracing rerun (``compare.trace_until`` set: each rank traces its own rows of it), and where
    training it moves the rank's own distributed copy (``weights.transfer=shared``: the copies
    share storage, as the seed report's ``set_data(param)`` does, so each rank's distributed
    copy starts where that rank's standalone training left it, as in the user's script)."""
    from sweep.config.enums import as_str

    traced = (cfg.get("compare") or {}).get("trace_until") is not None
    return traced or as_str((cfg.get("weights") or {}).get("transfer")) == "shared"


def launch_order(order: str, phase: str, job_dir: Path | str | None = None) -> List[str]:
    """The copies a launch trains, in order (rank 0's, :func:`phase_order`).

    Raises:
        ValueError: unknown ``order`` or ``phase``.
    """
    if phase == "standalone":
        return ["standalone"]
    known = job_dir is not None and JobDir(job_dir).standalone_result.exists()
    if phase == "distributed" or order == "separate" or known:
        return ["distributed"]
    if phase != "both":
        raise ValueError(f"phase={phase!r}; allowed: {', '.join(PHASES)}")
    orders = {"standalone_first": ["standalone", "distributed"], "distributed_first": ["distributed", "standalone"]}
    if order not in orders:
        raise ValueError(f"order={order!r}; allowed: standalone_first, distributed_first, separate")
    return orders[order]


def crosses_frameworks(cfg: Any) -> bool:
    """Whether the standalone copy trains in another framework than the distributed one:
    ``baseline.framework`` is set. The job writes it ``null`` where it names the job's own
    framework (``sweep.config.schema.normalize``), so in the ranks it names the other one,
    and in the standalone process (:func:`standalone_config`) its own."""
    return (cfg.get("baseline") or {}).get("framework") is not None


def copy_order(cfg: Any) -> str:
    """The ``order`` the ranks train in: ``separate`` where the standalone copy trains in
    another framework (:func:`crosses_frameworks`: in a process of its own), else ``order``."""
    from sweep.config.enums import as_str

    return "separate" if crosses_frameworks(cfg) else as_str(cfg.order)


def standalone_config(cfg: Any) -> Any:
    """The config the standalone-only process trains under: the job's, or, where
    ``baseline.framework`` names another framework than ``framework.name``, the job's with
    that framework's preset as its ``framework`` section
    (``sweep.config.presets.with_framework``: its rank module, device map and gradient API).

    Raises:
        ConfigError: no preset of that name.
    """
    from sweep.config.sections.baseline import foreign_framework

    other = foreign_framework(cfg)
    if other is None:
        return cfg
    from sweep.config.presets import with_framework

    return with_framework(cfg, other)


def rank_samples(cfg: Any, rank: int) -> Tuple[List[Any], List[Any]]:
    """``(standalone_samples, rank_samples)``: numpy ``(inputs, targets)`` pairs per step
    from ``data._target_`` (``sweep.models.data.build``).

    ``data.split=replicated``: both are the same ``train.batch_size``-row samples.
    ``data.split=sharded``: the standalone copy gets ``batch_size * world_size`` rows per
    step (the job's world size, also in the standalone-only process of
    ``order=separate``) and rank ``rank`` rows ``[rank * batch_size, (rank + 1) * batch_size)``.
    """
    from sweep.config.schema import world_size
    from sweep.models.data import build

    world = world_size(cfg)
    sharded = cfg.data.split == "sharded"
    b = cfg.train.batch_size
    global_samples = build(cfg, b * (world if sharded else 1))
    if not sharded:
        return global_samples, global_samples
    return global_samples, [(x[rank * b:(rank + 1) * b], y[rank * b:(rank + 1) * b]) for x, y in global_samples]


def micro_batches(inputs: Any, targets: Any, n: int) -> List[Tuple[Any, Any]]:
    """``n`` equal row slices of a step's ``(inputs, targets)`` (``train.grad_accum_steps``;
    the config check makes ``n`` divide the rows of each copy: the standalone copy's
    rows of a sharded step are ``world_size`` times a rank's). Rows, not a framework's
    tensor type, are sliced, so both copies split the same way."""
    if n == 1:
        return [(inputs, targets)]
    rows = len(inputs) // n
    return [(inputs[j * rows:(j + 1) * rows], targets[j * rows:(j + 1) * rows]) for j in range(n)]


def train_phases(
    names: Sequence[str],
    train: Dict[str, Callable[[], List[float]]],
    snapshot: Dict[str, Callable[[], List[np.ndarray]]],
) -> Tuple[Dict[str, List[float]], Dict[str, float], Dict[str, float]]:
    """Run ``train[name]()`` for each name in order; around each, snapshot the *other*
    copy's parameters (if this process holds it) to measure how far training one copy
    moved the other: the max absolute change, 0.0 for independent copies.

    Returns ``(losses, moved, seconds)`` keyed by copy name (``moved`` by
    ``"<other>_during_<name>"``).
    """
    losses, moved, seconds = {}, {}, {}
    for name in names:
        other = "distributed" if name == "standalone" else "standalone"
        before = snapshot[other]() if other in names else None
        t0 = time.perf_counter()
        losses[name] = train[name]()
        seconds[name] = time.perf_counter() - t0
        if before is not None:
            moved[f"{other}_during_{name}"] = moved_by(before, snapshot[other]())
    return losses, moved, seconds


def moved_by(before: Sequence[np.ndarray], after: Sequence[np.ndarray]) -> float:
    """The largest absolute change of any element between two snapshots of the same tensors
    (float arrays, pairwise): 0.0 when every element is unchanged (a NaN that stays NaN and an
    infinity that stays the same one included: a diverged copy that did not move), ``inf``
    where an element changed to or from a non-finite value."""
    worst = 0.0
    for a, b in zip(after, before):
        with np.errstate(invalid="ignore"):
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            if same.all():
                continue
            change = np.abs(a - b)[~same]
        worst = max(worst, float(np.max(np.where(np.isfinite(change), change, np.inf))))
    return worst
