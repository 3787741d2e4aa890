"""A tracing rerun's findings, the same for every framework (``sweep.train.torch_rank`` and
``sweep.train.mindspore_rank`` both call :func:`traced`): the first differing module, the
per-step tensor rows and the first differing tensor, each against the twin's rounding
envelope. Only what the observers recorded enters (their traces are framework-neutral:
numpy statistics in ``sweep.train.trace_book``), so only the engine differs between the
frameworks' rank processes, not what they conclude from it.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from sweep.config.enums import as_str
from sweep.records import RankResult
from sweep.train import twin
from sweep.train.observers import Observer


def traced(cfg: Any, seen: Dict[str, Dict[str, Observer]], result: RankResult,
           twin_seen: Optional[Dict[str, Observer]] = None, book: Any = None) -> None:
    """A tracing rerun's findings into ``result`` (its ``rank`` and ``world_size`` say whose):
    the module traces' first differing module (``sweep.analysis.modules.compare_modules``;
    the hooks taken off), the per-step tensor rows (``result.tensors``,
    ``sweep.analysis.trace.tensor_rows_in``) and the first differing tensor
    (``sweep.analysis.trace.locate_in``), both from the ``book``'s pair statistics
    (``sweep.train.trace_book``: the standalone tensors cut to this rank's shards), and what
    the book wrote (``features["trace"]``). The twin's traces (``twin_seen``; its tensors in
    the book as copy ``twin``) are each tensor's and module's rounding envelope, cut alike.
    Without a ``book`` (no tensors traced) only the modules are compared."""
    from sweep.analysis.envelope import EnvelopeSetting

    twin_seen = twin_seen or {}
    setting = EnvelopeSetting(float(cfg.compare.get("envelope_margin", 4.0)), twin.perturbation_dtype(cfg))
    modules = {name: obs["modules"] for name, obs in seen.items() if "modules" in obs}
    for trace_of in [*modules.values(), *([twin_seen["modules"]] if "modules" in twin_seen else [])]:
        trace_of.remove()
    if len(modules) == 2:
        from sweep.analysis.modules import compare_modules

        result.modules = compare_modules(modules["standalone"].steps, modules["distributed"].steps, result.rank,
                                         sharded=as_str(cfg.data.split) == "sharded",
                                         twin=twin_seen["modules"].steps if "modules" in twin_seen else None,
                                         envelope=setting)
    if book is None:
        return
    pairs, envelope = book.pairs("distributed"), book.pairs("twin") or None
    if pairs:
        from sweep.analysis.trace import Search, envelope_bounds_in, locate_in, tensor_rows_in

        bounds = envelope_bounds_in(envelope, setting.margin, setting.dtype) if envelope else None
        result.tensors = tensor_rows_in(pairs, bounds)
        shape = [int(n) for n in cfg.mesh.mesh_shape]
        known = {"world_size": float(result.world_size), "grad_accum_steps": float(cfg.train.grad_accum_steps),
                 "the replicate degree": float(shape[0]) if len(shape) == 2 else None}
        result.first_tensor = locate_in(pairs, seen["distributed"]["trace"].last,
                                        Search(float(cfg.compare.noise_floor), result.rank, known), twin=envelope,
                                        envelope=setting)
    result.features = dict(result.features or {}, trace=book.close())
