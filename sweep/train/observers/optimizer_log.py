"""The optimizer as it ran (``RankResult.optimizer``): each param group's hyper-parameters
as the copy's optimizer holds them in step 0, held against the ``optimizer`` section by
``sweep.analysis.collectives.optimizer_notes``."""

from __future__ import annotations

from typing import Any, Dict, List

from sweep.train.observers.base import Observer, Step

OPTIMIZER_KEYS = ("lr", "betas", "eps", "weight_decay", "momentum")


def optimizer_ran(optimizer: Any) -> List[Dict[str, Any]]:
    """Each param group's hyper-parameters as a torch ``optimizer`` holds them (``lr``,
    ``betas``, ``eps``, ``weight_decay``, ``momentum``, those it has; a tensor ``lr`` as a
    float): ``[{"group": i, "params": n, key: value}]``, JSON-ready."""
    out = []
    for i, group in enumerate(optimizer.param_groups):
        entry: Dict[str, Any] = {"group": i, "params": len(group.get("params", []))}
        for key in OPTIMIZER_KEYS:
            if key in group:
                value = group[key]
                entry[key] = [float(v) for v in value] if isinstance(value, (tuple, list)) else float(value)
        out.append(entry)
    return out


class OptimizerLog(Observer):
    """``after_update`` of step 0 (before the scheduler moves the lr): :attr:`groups` gets
    :func:`optimizer_ran` of the copy's optimizer (torch)."""

    def __init__(self) -> None:
        self.groups: List[Dict[str, Any]] = []

    def after_update(self, step: Step) -> None:
        if step.index == 0:
            self.groups.extend(optimizer_ran(step.copy.optimizer))
