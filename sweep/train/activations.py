"""Activation checkpointing and activation offload, applied to both copies alike
(``activation_checkpoint``, ``activation_offload``; torch).

Which modules are wrapped: the units of ``wrap=per_layer`` (``sweep.engines.wrapping
.layer_names``: every entry of the model's ``layers``, else each direct child with
parameters), as torchtitan's ``apply_ac`` wraps each transformer block. Each is replaced in
its parent by torch's ``checkpoint_wrapper`` (non-reentrant,
``torch.distributed.algorithms._checkpoint.checkpoint_wrapper``), before sharding, so a
``fully_shard`` unit is the wrapper (torchtitan's order: AC, then FSDP); the wrapper's
``_checkpoint_wrapped_module`` segment is dropped from names
(``sweep.analysis.trace.canonical_name``). ``selective`` passes a ``context_fn`` from
``torch.utils.checkpoint.create_selective_checkpoint_contexts`` whose policy saves the
outputs of ``save_ops`` (``MUST_SAVE``: the matmuls and attention, torchtitan's default),
recomputes ``recompute_ops`` (``MUST_RECOMPUTE``, what the report's commented-out
``policy_fn`` returns) and prefers to recompute every other op (``PREFER_RECOMPUTE``).
``preserve_rng_state`` is ``checkpoint``'s: the recompute replays the forward's random
draws, so a Dropout mask is the same in forward and recompute.

Activation offload is ``torch.autograd.graph.save_on_cpu`` around forward and backward
(saved tensors move to the CPU in forward and back in backward; on a CPU device a copy).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, ContextManager, Dict, List

from sweep.config.enums import as_str


def checkpoint_targets(model: Any) -> List[str]:
    """The names of the modules ``activation_checkpoint`` wraps (module docstring)."""
    from sweep.engines.wrapping import layer_names

    return layer_names(model)


def _policy(save: List[str], recompute: List[str]) -> Any:
    """The selective policy: ``MUST_SAVE`` for ``save``, ``MUST_RECOMPUTE`` for
    ``recompute``, ``PREFER_RECOMPUTE`` for every other op (torchtitan's
    ``_get_custom_policy``; saving an op whose output is later changed in place, such as a
    view of a parameter FSDP2 reshards, would raise "Tensor cached during selective
    activation checkpoint has been mutated")."""
    from torch.utils.checkpoint import CheckpointPolicy

    saved, recomputed = set(save), set(recompute)

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
        name = str(op)
        if name in recomputed:
            return CheckpointPolicy.MUST_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE if name in saved else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def apply_checkpointing(model: Any, ac_cfg: Any) -> Dict[str, Any]:
    """Wrap the modules of :func:`checkpoint_targets` in place per ``ac_cfg`` (the
    ``activation_checkpoint`` section). Returns the record: ``{"mode", "wrapped": [names],
    "preserve_rng_state", "mechanism"}`` (``wrapped`` empty for ``mode=none``).

    Raises:
        ValueError: ``mode`` unknown.
    """
    mode = as_str(ac_cfg.mode)
    record: Dict[str, Any] = {"mode": mode, "wrapped": [], "preserve_rng_state": bool(ac_cfg.preserve_rng_state)}
    if mode == "none":
        return record
    if mode not in ("full", "selective"):
        raise ValueError(f"activation_checkpoint.mode={mode}; allowed: none, full, selective")
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

    record["mechanism"] = "torch checkpoint_wrapper (non-reentrant)" + (
        ", create_selective_checkpoint_contexts" if mode == "selective" else "")
    kwargs: Dict[str, Any] = {"preserve_rng_state": bool(ac_cfg.preserve_rng_state)}
    if mode == "selective":
        from torch.utils.checkpoint import create_selective_checkpoint_contexts

        save, recompute = [str(op) for op in ac_cfg.save_ops], [str(op) for op in ac_cfg.recompute_ops]
        kwargs["context_fn"] = functools.partial(create_selective_checkpoint_contexts, _policy(save, recompute))
        record.update(save_ops=save, recompute_ops=recompute)
    for name in checkpoint_targets(model):
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        wrapped = checkpoint_wrapper(model.get_submodule(name), checkpoint_impl=CheckpointImpl.NO_REENTRANT, **kwargs)
        parent.register_module(child, wrapped)
        record["wrapped"].append(name)
    return record


def offload(enabled: bool) -> ContextManager[Any]:
    """``torch.autograd.graph.save_on_cpu(pin_memory=False)`` when ``enabled``, else a no-op."""
    if not enabled:
        return contextlib.nullcontext()
    import torch

    return torch.autograd.graph.save_on_cpu(pin_memory=False)
