"""The learning-rate schedules of ``train.lr_scheduler``, one formula for both frameworks:
the factor on ``optimizer.lr`` at optimizer step ``t`` (0-based) of ``steps``.

``linear_warmup``: ``min(1, (t + 1) / warmup_steps)`` (1 without warmup), then constant.
``cosine``: that warmup, then ``0.5 (1 + cos(pi p))`` with ``p = (t - warmup_steps) /
(steps - warmup_steps)`` (0 at the first step after warmup, towards 1 at the last): the
decay to 0 of Loshchilov & Hutter, SGDR (ICLR 2017), as torchtitan's ``warmup_stable_decay``
uses it. torch: ``torch.optim.lr_scheduler.LambdaLR`` with :func:`lr_factor`, stepped after
each optimizer step; MindSpore: the optimizer's ``learning_rate`` as the list of per-step
values (:func:`lr_values`).
"""

from __future__ import annotations

import math
from typing import Any, List, Optional

from sweep.config.enums import as_str


def lr_factor(t: int, name: str, warmup_steps: int, steps: int) -> float:
    """The factor at step ``t`` (module docstring).

    Raises:
        ValueError: an unknown schedule name.
    """
    if name == "none":
        return 1.0
    if name not in ("linear_warmup", "cosine"):
        raise ValueError(f"train.lr_scheduler={name}; allowed: none, linear_warmup, cosine")
    if warmup_steps and t < warmup_steps:
        return (t + 1) / warmup_steps
    if name == "linear_warmup":
        return 1.0
    p = (t - warmup_steps) / max(1, steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * p))


def lr_values(cfg: Any) -> List[float]:
    """``optimizer.lr`` times :func:`lr_factor` for every step of the job."""
    name, warmup = as_str(cfg.train.lr_scheduler), int(cfg.train.warmup_steps)
    return [float(cfg.optimizer.lr) * lr_factor(t, name, warmup, int(cfg.steps)) for t in range(int(cfg.steps))]


def torch_scheduler(optimizer: Any, cfg: Any) -> Optional[Any]:
    """``LambdaLR(optimizer, lr_factor)`` for ``train.lr_scheduler``, ``None`` for ``none``."""
    name = as_str(cfg.train.lr_scheduler)
    if name == "none":
        return None
    from torch.optim.lr_scheduler import LambdaLR

    warmup, steps = int(cfg.train.warmup_steps), int(cfg.steps)
    return LambdaLR(optimizer, lambda t: lr_factor(t, name, warmup, steps))
