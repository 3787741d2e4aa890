"""The optimizer as it ran (``RankResult.optimizer``): each param group's hyper-parameters
as the copy's optimizer holds them in step 0, held against the ``optimizer`` section by
``sweep.analysis.collectives.optimizer_notes`` (:func:`optimizer_record`). The same keys on
both frameworks (torch's names: ``lr``, ``betas``, ``eps``, ``weight_decay``,
``momentum``); MindSpore's ``beta1``/``beta2`` are read as ``betas``."""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

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


def _value(value: Any) -> Any:
    """A MindSpore Tensor/Parameter or a number as a float (a 1-element tensor's element)."""
    if hasattr(value, "asnumpy"):
        value = value.asnumpy()
    return float(np.asarray(value, np.float64).reshape(-1)[0])


def mindspore_optimizer_ran(optimizer: Any, lr: float) -> List[Dict[str, Any]]:
    """A MindSpore ``optimizer``'s hyper-parameters as it holds them, in
    :func:`optimizer_ran`'s shape (one group: ``[{"group": 0, "params": n, "lr": lr,
    "betas": [beta1, beta2], "eps", "weight_decay", "momentum", "loss_scale"}]``, those it
    has; ``lr``: the one step 0 ran with, read by the observer before the step). A
    ``weight_decay`` the step never applies (``exec_weight_decay`` false: it was 0 when the
    optimizer was built) is 0, whatever the attribute holds."""
    entry: Dict[str, Any] = {"group": 0, "params": len(list(optimizer.parameters)), "lr": lr}
    if getattr(optimizer, "beta1", None) is not None:
        entry["betas"] = [_value(optimizer.beta1), _value(optimizer.beta2)]
    for key in ("eps", "weight_decay", "momentum", "loss_scale"):
        if getattr(optimizer, key, None) is not None:
            entry[key] = _value(getattr(optimizer, key))
    if "weight_decay" in entry and getattr(optimizer, "exec_weight_decay", True) is False:
        # MindSpore decides at build whether its step applies weight decay (``exec_weight_decay``,
        # weight_decay > 0 then): a value set on the optimizer later is held but never applied
        entry["weight_decay"] = 0.0
    return [entry]


class MindSporeOptimizerLog(Observer):
    """A MindSpore copy's optimizer as step 0 ran it into :attr:`groups`
    (:func:`mindspore_optimizer_ran`): ``begin_step`` reads the lr step 0 runs with
    (``get_lr()``, a dynamic lr's entry 0: the optimizer advances its ``global_step`` in its
    update); ``after_update`` the rest (a hyper-parameter the step changed shows)."""

    def __init__(self) -> None:
        self.groups: List[Dict[str, Any]] = []
        self._lr: float = float("nan")

    def begin_step(self, step: Step) -> None:
        if step.index == 0:
            self._lr = _value(step.copy.optimizer.get_lr())

    def after_update(self, step: Step) -> None:
        if step.index == 0:
            self.groups.extend(mindspore_optimizer_ran(step.copy.optimizer, self._lr))


def optimizer_record(cfg: Any, ran: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Any]:
    """``RankResult.optimizer``: each copy's param groups as its optimizer held them in step
    0 (``ran``: ``{copy: groups}``) and the notes where they depart from the ``optimizer``
    section, its ``lr`` as the schedule gives it at step 0
    (``sweep.analysis.collectives.optimizer_notes``; ``sweep.train.schedules.lr_factor``)."""
    from omegaconf import OmegaConf

    from sweep.analysis.collectives import optimizer_notes
    from sweep.config.enums import as_str
    from sweep.train.schedules import lr_factor

    configured = OmegaConf.to_container(cfg.optimizer, resolve=True)
    configured["name"] = as_str(cfg.optimizer.name)
    # step 0 runs the scheduled lr (train.lr_scheduler), not optimizer.lr itself
    configured["lr"] = float(cfg.optimizer.lr) * lr_factor(0, as_str(cfg.train.lr_scheduler),
                                                          int(cfg.train.warmup_steps), int(cfg.steps))
    held = {copy: groups for copy, groups in ran.items() if groups}
    return dict(held, notes=optimizer_notes(held, configured))
