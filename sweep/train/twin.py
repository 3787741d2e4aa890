"""The standalone copy's twin: the same training from initial weights nudged by one unit in the
last place, whose gap from the standalone copy is the job's rounding envelope
(``sweep.analysis.envelope``).

What every framework's rank shares: whether this process trains the twin (:func:`trains`),
in which dtype its weights are nudged (:func:`perturbation_dtype`), the signs' seed
(:func:`seed`), and its record (:func:`record`). A rank module builds the twin as it builds
the standalone copy (same model, engine, optimizer, schedule, data and random stream), nudges
its parameters with ``sweep.analysis.envelope.perturb`` in name order, and trains it before
the other copies (its own random stream: the others draw as without it).

Who trains it, once per distinct baseline (the sweep's baseline cache keeps it,
``sweep.run.baseline``): the launch that trains the standalone copy, on its last rank while
rank 0 trains the standalone copy (the ranks; one rank trains both), or the standalone-only
process of ``order=separate`` and ``baseline.framework``,
unless the job found it cached (``ranks/twin.json`` written before launch, as
``ranks/standalone.json`` for a cached baseline); in a tracing rerun every rank, traced like
the other copies, so each rank's tensors have their envelope on the same elements.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

from sweep.analysis.rounding import twin_dtype
from sweep.layout import JobDir

SEED_OFFSET = 0x7717  # the signs' generator: numpy.random.default_rng(seed + SEED_OFFSET)


def enabled(cfg: Any) -> bool:
    """``compare.envelope`` (default true)."""
    return bool((cfg.get("compare") or {}).get("envelope", True))


def tracing(cfg: Any) -> bool:
    """Whether this launch is a tracing rerun (``compare.trace_until`` set by the job)."""
    return (cfg.get("compare") or {}).get("trace_until") is not None


def cached(job_dir: Path | str) -> bool:
    """Whether the job found the twin's losses cached (``ranks/twin.json``)."""
    return JobDir(job_dir).twin_result.exists()


def built_here(cfg: Any, job_dir: Path | str, phase: str, apart: bool) -> bool:
    """Whether this launch builds the twin at all (on every one of its ranks: with
    ``baseline.precision=policy`` its engine's one-rank mesh is made collectively):
    :func:`enabled`, and a tracing rerun, or a twin not cached whose standalone copy belongs
    to this launch (``apart``: the standalone copy trains in a process of its own,
    ``order=separate`` or ``baseline.framework``; then that process, ``phase="standalone"``)."""
    if not enabled(cfg):
        return False
    if tracing(cfg):
        return True
    if cached(job_dir):
        return False
    return phase == "standalone" or not apart


def trains(cfg: Any, job_dir: Path | str, phase: str, apart: bool, rank: int, world: int = 1) -> bool:
    """Whether this process trains the twin: where :func:`built_here`, every rank of a tracing
    rerun, else the last rank (``world - 1``) only: its losses are the envelope, one is enough,
    and there it trains while rank 0 trains the standalone copy, which no other rank does
    (``sweep.train.phase_order``). A launch of one rank trains both, the twin first."""
    return built_here(cfg, job_dir, phase, apart) and (tracing(cfg) or rank == world - 1)


def probed(cfg: Any, job_dir: Path | str, phase: str, apart: bool, rank: int, world: int) -> bool:
    """Whether this rank records the standalone model's first loss, forward only (``probe_loss``
    of ``sweep.train.torch_rank``; ``sweep.analysis.envelope.twin_unlike`` holds the two against
    each other): rank 0, whose standalone copy the job compares with, and the last rank, which
    trains its twin (:func:`trains`), in a launch of more than one rank that builds the twin
    (:func:`built_here`; not a tracing rerun, where every rank trains both)."""
    return world > 1 and rank in (0, world - 1) and built_here(cfg, job_dir, phase, apart) and not tracing(cfg)


def plain(cfg: Any) -> Dict[str, Any]:
    """The job's config as a plain dict (``sweep.analysis`` reads plain dicts)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg


def perturbation_dtype(cfg: Any) -> str:
    """The dtype whose unit in the last place nudges the twin's weights: the lowest
    precision either copy computes in (``sweep.analysis.rounding.twin_dtype``)."""
    return twin_dtype(plain(cfg))


def seed(cfg: Any) -> int:
    """The seed of the twin's signs: ``seed + SEED_OFFSET``."""
    return int(cfg.seed) + SEED_OFFSET


def record(losses: List[float], dtype: str, sign_seed: int, nudged: Dict[str, int], seconds: float,
           final: Optional[Dict[str, Any]] = None, engine: str = "the standalone copy's") -> Dict[str, Any]:
    """``RankResult.twin``: ``{"losses", "dtype", "seed", "perturbation", "nudged":
    {"parameters", "elements"}, "seconds", "buffers", "engine"}``; ``buffers``: the twin's
    buffers after the last step (``final``: ``sweep.train.final_state.final_record`` of copy
    ``twin``; the envelope of the copies' end buffers), ``None`` for a model without buffers;
    ``engine``: what it computed under (the job's ``mp_policy`` on one rank, or the standalone
    copy's precision)."""
    return {"losses": losses, "dtype": dtype, "seed": sign_seed, "buffers": (final or {}).get("twin"),
            "engine": engine,
            "perturbation": f"every initial weight nudged by one unit in the last place of {dtype}, random signs "
                            f"(numpy default_rng({sign_seed}), parameters in name order)",
            "nudged": nudged, "seconds": seconds}


def cached_losses(job_dir: Path | str) -> Optional[Dict[str, Any]]:
    """The cached twin record the job wrote (``ranks/twin.json``), or ``None``."""
    from sweep.io import read_json

    path = JobDir(job_dir).twin_result
    return read_json(path) if path.exists() else None


def release() -> None:
    """Free the twin's model and optimizer once it has trained (the caller drops its own
    references first), before the other copies build up theirs: otherwise the twin stays beside
    the standalone copy and the distributed shard, a third copy's weights, gradients and
    optimizer state at the peak (the last rank of a passing job; every rank of a tracing rerun). Its
    observers keep what they recorded, not the model (module hooks hold the observer, not the
    other way round); a collection breaks the reference cycles hooks make, so the memory goes
    now (a failing 42.6M-parameter job, ``benchmarks/scale.py``, peaked at 7.82 GiB without it,
    6.49 GiB with it, the code otherwise the same), and glibc returns the freed pages
    (``sweep.train.heap.give_back``: 5.18 GiB against 4.70 GiB at a later commit). The
    collection was taken out once after a rank died of SIGSEGV in CI; a rank died the same way,
    in a gloo all-gather, with it out: not the cause."""
    from sweep.train.heap import give_back

    give_back()
