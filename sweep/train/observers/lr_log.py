"""The lr each step ran with (``RankResult.features["lr"]``; torch, with a ``train.lr_scheduler``
or without: an engine that moves the lr itself is seen either way)."""

from __future__ import annotations

from typing import Any, List, Optional

from sweep.train.observers.base import Observer, Step


class LearningRates(Observer):
    """Param group 0's lr of the copy's torch optimizer as each step's ``optimizer.step()``
    read it, one float a step in :attr:`lrs`.

    It is taken inside the optimizer's step (``Optimizer.register_step_pre_hook``, torch >= 2.0),
    not at a point of the training step around it: an engine's ``optimizer_step`` may move the
    lr itself before or after calling ``optimizer.step()`` (a scheduler stepped twice), and
    only the value the update read is what ran. A step whose ``optimizer.step()`` did not run
    (a grad scaler's skipped step) records the lr at ``before_optimizer``."""

    def __init__(self) -> None:
        self.lrs: List[float] = []
        self._read: Optional[float] = None
        self._before = float("nan")
        self._hooked: Any = None

    def _lr(self, optimizer: Any) -> float:
        return float(optimizer.param_groups[0]["lr"])

    def before_optimizer(self, step: Step) -> None:
        optimizer = step.copy.optimizer
        if self._hooked is not optimizer and hasattr(optimizer, "register_step_pre_hook"):
            optimizer.register_step_pre_hook(self._pre_step)
            self._hooked = optimizer
        self._read = None
        self._before = self._lr(optimizer)

    def _pre_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._read is None:  # the first optimizer.step() of the training step
            self._read = self._lr(optimizer)

    def after_update(self, step: Step) -> None:
        self.lrs.append(self._read if self._read is not None else self._before)
