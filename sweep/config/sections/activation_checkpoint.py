"""The ``activation_checkpoint`` section: activation checkpointing of both copies
(:class:`CheckpointMode`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import List

from sweep.config.roles import ALL_NUMERIC, affects


class CheckpointMode(str, enum.Enum):
    """``activation_checkpoint.mode`` (:class:`ActivationCheckpointConfig`)."""

    none = "none"
    full = "full"
    selective = "selective"


@dataclass
class ActivationCheckpointConfig:
    """Activation checkpointing, applied to both copies alike (``sweep.train.activations``):
    ``full`` wraps every ``layers`` unit, else each direct child with parameters (the units
    of ``wrap=per_layer``), in torch's non-reentrant ``checkpoint_wrapper``; ``selective``
    wraps the same modules with a policy (``create_selective_checkpoint_contexts``) that
    saves the outputs of ``save_ops``, recomputes ``recompute_ops`` and prefers to
    recompute the rest (torchtitan's selective AC). MindSpore: ``full`` is
    ``Cell.recompute()`` on those cells; ``selective`` is refused."""

    mode: CheckpointMode = affects(*ALL_NUMERIC, default=CheckpointMode.none,
                                   doc="``none``, ``full`` (recompute each wrapped module's forward in "
                                       "backward) or ``selective`` (recompute only ``recompute_ops``).")
    preserve_rng_state: bool = affects(*ALL_NUMERIC, default=True,
                                       doc="Replay the forward's random draws in the recompute (dropout masks "
                                           "equal); torch ``checkpoint(preserve_rng_state=)``.")
    save_ops: List[str] = affects(
        *ALL_NUMERIC, default_factory=lambda: ["aten.mm.default", "aten.addmm.default", "aten.bmm.default",
                                               "aten._scaled_dot_product_efficient_attention.default",
                                               "aten._scaled_dot_product_flash_attention.default",
                                               "aten._scaled_dot_product_flash_attention_for_cpu.default"],
        doc="``selective``: the aten ops whose outputs are saved (``CheckpointPolicy.MUST_SAVE``; "
            "torchtitan's default keeps the matmuls and attention).")
    recompute_ops: List[str] = affects(
        *ALL_NUMERIC, default_factory=list,
        doc="``selective``: aten ops always recomputed (``MUST_RECOMPUTE``, the report's ``policy_fn``); every "
            "op in neither list is recomputed by preference (``PREFER_RECOMPUTE``).")
