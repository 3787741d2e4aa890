"""The lr each step ran with (``RankResult.features["lr"]``, with a ``train.lr_scheduler``)."""

from __future__ import annotations

from typing import List

from sweep.train.observers.base import Observer, Step


class LearningRates(Observer):
    """``after_update`` (before the scheduler steps): appends param group 0's lr of the copy's
    torch optimizer to :attr:`lrs` (a float a step)."""

    def __init__(self) -> None:
        self.lrs: List[float] = []

    def after_update(self, step: Step) -> None:
        self.lrs.append(float(step.copy.optimizer.param_groups[0]["lr"]))
