"""The ``train`` section: the training step both copies run (batch, accumulation,
clipping, loss, lr schedule) and its ``grad_scaler``."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Optional

from sweep.config.roles import ALL_NUMERIC, WORKLOAD, affects
from sweep.config.sections._checks import _positive
from sweep.errors import ConfigError

# train.loss's built-in names (train.loss is a str: it may also be a dotted path)
LOSSES = {
    "mse": "mean squared error (torch.nn.functional.mse_loss, mindspore.nn.MSELoss)",
    "cross_entropy": "mean over all targets of the logits' cross-entropy (F.cross_entropy on "
                     "(rows * positions, vocab) logits)",
}


class LrScheduler(str, enum.Enum):
    """``train.lr_scheduler``: ``none``, ``linear_warmup`` (lr from ``lr / warmup_steps`` up to ``lr``
    over ``warmup_steps``, then constant), ``cosine`` (that warmup, then a cosine decay to 0 at
    the last step)."""

    none = "none"
    linear_warmup = "linear_warmup"
    cosine = "cosine"


@dataclass
class GradScalerConfig:
    """Loss scaling for fp16 (``torch.amp.GradScaler``'s arguments; FSDP2 uses
    ``ShardedGradScaler``, whose inf check is all-reduced over the ranks)."""

    enabled: bool = affects(*ALL_NUMERIC, default=False,
                            doc="Scale the loss (fp16): the scaler's ``unscale_`` before clipping, its "
                                "``step`` and ``update``.")
    init_scale: float = affects(*ALL_NUMERIC, default=65536.0, doc="The initial scale (> 0).")
    growth_factor: float = affects(*ALL_NUMERIC, default=2.0,
                                   doc="The scale's factor after ``growth_interval`` steps without inf/NaN.")
    backoff_factor: float = affects(*ALL_NUMERIC, default=0.5, doc="The scale's factor after a step with inf/NaN.")
    growth_interval: int = affects(*ALL_NUMERIC, default=2000,
                                   doc="Steps without inf/NaN before the scale grows (>= 1).")


@dataclass
class TrainConfig:
    """The training step, the same in both copies (``sweep.train``): per optimizer step,
    ``grad_accum_steps`` micro-batches of ``batch_size / grad_accum_steps`` rows each, the
    loss of each divided by ``grad_accum_steps``; gradient sync is off on all but the last
    (FSDP2's ``set_requires_gradient_sync(False)``, DDP's ``no_sync``). Then, if set,
    gradient-norm clipping to ``clip_grad_norm`` (the global 2-norm; over sharded
    gradients the norm of the full tensors, ``torch.nn.utils.get_total_norm`` and
    ``DTensor.full_tensor``), the optimizer step (through ``grad_scaler`` if enabled).

    ``batch_size``: rows per step on each rank (``data.split=replicated``) or per rank
    of a global batch of ``batch_size * world_size`` (``sharded``)."""

    batch_size: int = affects(*ALL_NUMERIC, WORKLOAD, default=1,
                              doc="Rows per step on each rank (``data.split=replicated``), or per rank of "
                                  "a global batch of ``batch_size * world_size`` rows (``sharded``).")
    grad_accum_steps: int = affects(*ALL_NUMERIC, default=1,
                                    doc="Micro-batches per optimizer step (must divide ``batch_size``); "
                                        "gradient sync off on all but the last.")
    clip_grad_norm: Optional[float] = affects(*ALL_NUMERIC, default=None,
                                              doc="Max global gradient 2-norm (over sharded gradients: the "
                                                  "full tensors'); ``null``: no clipping.")
    loss: str = affects(*ALL_NUMERIC, WORKLOAD, default="mse",
                        doc="``mse``, ``cross_entropy``, or a dotted path to "
                            "``loss(output, target) -> scalar tensor``.")
    grad_scaler: GradScalerConfig = field(default_factory=GradScalerConfig)
    lr_scheduler: LrScheduler = affects(*ALL_NUMERIC, WORKLOAD, default=LrScheduler.none,
                                        doc="``none``, ``linear_warmup`` or ``cosine`` (after ``warmup_steps``), "
                                            "stepped once per optimizer step in both copies; the lr of each "
                                            "step is recorded.")
    warmup_steps: int = affects(*ALL_NUMERIC, WORKLOAD, default=0,
                                doc="Steps of linear warmup from ``lr / warmup_steps`` to ``lr`` (>= 0).")

    @staticmethod
    def check(train: Any) -> None:
        """Raises: ConfigError: a batch size < 1, a ``batch_size`` that ``grad_accum_steps``
        does not divide, a non-positive ``clip_grad_norm``, an unknown ``loss``, or a
        scaler setting out of range."""
        if train.batch_size < 1:
            raise ConfigError(f"train.batch_size={train.batch_size}: must be >= 1")
        if train.grad_accum_steps < 1:
            raise ConfigError(f"train.grad_accum_steps={train.grad_accum_steps}: must be >= 1")
        if train.batch_size % train.grad_accum_steps:
            raise ConfigError(
                f"train.batch_size={train.batch_size} is not a multiple of train.grad_accum_steps="
                f"{train.grad_accum_steps}: every micro-batch must have the same number of rows"
            )
        _positive("train", train, "clip_grad_norm", allow_none=True)
        loss = str(train.loss)
        if loss not in LOSSES and "." not in loss:
            raise ConfigError(
                f"train.loss={loss}: allowed: {', '.join(LOSSES)}, or a dotted path to "
                "a function loss(output, target) -> scalar tensor"
            )
        if train.get("warmup_steps", 0) < 0:
            raise ConfigError(f"train.warmup_steps={train.warmup_steps}: must be >= 0")
        scaler = train.grad_scaler
        _positive("train.grad_scaler", scaler, "init_scale", "growth_factor", "backoff_factor")
        if scaler.growth_interval < 1:
            raise ConfigError(f"train.grad_scaler.growth_interval={scaler.growth_interval}: must be >= 1")
