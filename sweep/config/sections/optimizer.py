"""The ``optimizer`` section (``conf/optimizer/``): the optimizer, its hyperparameters
and their ranges."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, List

from omegaconf import MISSING

from sweep.config.roles import ALL_NUMERIC, WORKLOAD, affects
from sweep.config.sections._checks import _positive
from sweep.errors import ConfigError


class OptimizerName(str, enum.Enum):
    adam = "adam"
    adamw = "adamw"
    sgd = "sgd"


@dataclass
class OptimizerConfig:
    """Optimizer and its hyperparameters. ``lr`` is the learning rate; ``betas`` and
    ``eps`` apply to adam/adamw, ``momentum`` to sgd."""

    name: OptimizerName = affects(*ALL_NUMERIC, WORKLOAD, default=MISSING, doc="The optimizer.")
    lr: float = affects(*ALL_NUMERIC, WORKLOAD, default=1e-4, doc="Learning rate (finite, > 0).")
    betas: List[float] = affects(*ALL_NUMERIC, WORKLOAD, default_factory=lambda: [0.9, 0.999],
                                 doc="adam/adamw: the two moment decays, each in [0, 1).")
    eps: float = affects(*ALL_NUMERIC, WORKLOAD, default=1e-8, doc="adam/adamw: the denominator's epsilon (finite, > 0).")
    weight_decay: float = affects(*ALL_NUMERIC, WORKLOAD, default=0.0, doc="Weight decay (>= 0).")
    momentum: float = affects(*ALL_NUMERIC, WORKLOAD, default=0.0, doc="sgd: momentum (>= 0).")

    @staticmethod
    def check(opt: Any) -> None:
        """Raises: ConfigError: ``lr`` or ``eps`` not finite and > 0, a beta outside
        [0, 1), a negative ``weight_decay`` or ``momentum``."""
        _positive("optimizer", opt, "lr", "eps")
        betas = list(opt.betas)
        if len(betas) != 2 or any(not (0.0 <= b < 1.0) for b in betas):
            raise ConfigError(f"optimizer.betas={betas}: two values in [0, 1)")
        for key in ("weight_decay", "momentum"):
            if not math.isfinite(opt[key]) or opt[key] < 0:
                raise ConfigError(f"optimizer.{key}={opt[key]}: must be a finite number >= 0")
