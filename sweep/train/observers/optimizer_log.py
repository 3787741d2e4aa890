"""The optimizer as it ran (``RankResult.optimizer``): each param group's hyper-parameters
as the copy's optimizer holds them in step 0, held against the ``optimizer`` section by
``sweep.analysis.collectives.optimizer_notes`` (:func:`optimizer_record`). The same keys on
both frameworks (torch's names: ``lr``, ``betas``, ``eps``, ``weight_decay``,
``momentum``); MindSpore's ``beta1``/``beta2`` are read as ``betas``."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

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


def torch_decay(optimizer: Any, model: Any) -> Dict[str, float]:
    """The weight decay each parameter is stepped with: its param group's ``weight_decay``,
    by canonical name (``sweep.analysis.trace.canonical_name``); parameters in no group left out."""
    from sweep.analysis.trace import canonical_name

    names = {id(p): canonical_name(n) for n, p in model.named_parameters()}
    return {names[id(p)]: float(group.get("weight_decay", 0.0)) for group in optimizer.param_groups
            for p in group.get("params", []) if id(p) in names}


class OptimizerLog(Observer):
    """Step 0's update as the optimizer read it: :attr:`groups` gets :func:`optimizer_ran` of
    the copy's optimizer (torch), :attr:`decay` each parameter's weight decay
    (:func:`torch_decay`), both taken inside its first ``optimizer.step()``
    (``Optimizer.register_step_pre_hook``: an engine's ``optimizer_step`` may move the lr or the
    groups before or after it, a scheduler stepped twice; at ``after_update`` where no
    ``step()`` ran, a grad scaler's skipped step), and :attr:`loss_scale` the gradient
    scaler's scale the step ran with (``train.grad_scaler``; ``None`` without one,
    :attr:`unscaled`)."""

    unscaled = None  # a torch step without a gradient scaler scales nothing

    def __init__(self) -> None:
        self.groups: List[Dict[str, Any]] = []
        self.decay: Dict[str, float] = {}
        self.loss_scale: Any = None
        self._read: Optional[Tuple[List[Dict[str, Any]], Dict[str, float]]] = None
        self._handle: Any = None

    def before_optimizer(self, step: Step) -> None:
        if step.index != 0:
            return
        if step.scaler is not None:
            self.loss_scale = float(step.scaler.get_scale())
        optimizer, model = step.copy.optimizer, step.copy.model
        if self._handle is None and hasattr(optimizer, "register_step_pre_hook"):
            def read(opt: Any, args: Any, kwargs: Any) -> None:
                if self._read is None:  # the first optimizer.step() of step 0
                    self._read = (optimizer_ran(opt), torch_decay(opt, model))
            self._handle = optimizer.register_step_pre_hook(read)

    def after_update(self, step: Step) -> None:
        if step.index != 0:
            return
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        groups, decay = self._read or (optimizer_ran(step.copy.optimizer),
                                       torch_decay(step.copy.optimizer, step.copy.model))
        self.groups.extend(groups)
        self.decay = decay


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
    entry["loss_scale"] = mindspore_loss_scale(optimizer)
    return [entry]


def mindspore_loss_scale(optimizer: Any) -> float:
    """The loss scale a MindSpore optimizer divides the gradients by before its update, as its
    step applies it (``scale_grad``: ``1 / reciprocal_scale`` when ``need_scale``, else 1),
    whatever its ``loss_scale`` attribute says."""
    if not getattr(optimizer, "need_scale", False):
        return 1.0
    reciprocal = _value(getattr(optimizer, "reciprocal_scale", 1.0))
    return 1.0 / reciprocal if reciprocal else float("inf")


def mindspore_decay(optimizer: Any) -> Dict[str, float]:
    """The weight decay each parameter is stepped with, by name: the optimizer's
    ``weight_decay`` where its ``decay_flags`` entry is set (MindSpore's default filter leaves
    out names holding ``beta`` or ``gamma``: the norms) and its step applies decay at all
    (``exec_weight_decay``), else 0."""
    params = list(optimizer.parameters)
    flags = list(getattr(optimizer, "decay_flags", None) or [True] * len(params))
    applies = getattr(optimizer, "exec_weight_decay", True) is not False
    value = _value(getattr(optimizer, "weight_decay", 0.0)) if applies else 0.0
    return {p.name: (value if flag else 0.0) for p, flag in zip(params, flags)}


class MindSporeOptimizerLog(Observer):
    """A MindSpore copy's optimizer as step 0 ran it into :attr:`groups`
    (:func:`mindspore_optimizer_ran`): ``begin_step`` reads the lr step 0 runs with
    (``get_lr()``, a dynamic lr's entry 0: the optimizer advances its ``global_step`` in its
    update); ``after_update`` the rest (a hyper-parameter the step changed shows)."""

    unscaled = 1.0  # a MindSpore optimizer's loss scale where none is set

    def __init__(self) -> None:
        self.groups: List[Dict[str, Any]] = []
        self.decay: Dict[str, float] = {}
        self.loss_scale: Any = None
        self._lr: float = float("nan")

    def begin_step(self, step: Step) -> None:
        if step.index == 0:
            self._lr = _value(step.copy.optimizer.get_lr())

    def after_update(self, step: Step) -> None:
        if step.index == 0:
            self.groups.extend(mindspore_optimizer_ran(step.copy.optimizer, self._lr))
            self.decay = mindspore_decay(step.copy.optimizer)
            self.loss_scale = self.groups[0].get("loss_scale") if self.groups else None


def optimizer_record(cfg: Any, ran: Dict[str, List[Dict[str, Any]]],
                     logs: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``RankResult.optimizer``: each copy's param groups as its optimizer held them in step
    0 (``ran``: ``{copy: groups}``) and the notes where they depart from the ``optimizer``
    section, its ``lr`` as the schedule gives it at step 0
    (``sweep.analysis.collectives.optimizer_notes``; ``sweep.train.schedules.lr_factor``); with
    ``logs`` (``{copy: its OptimizerLog}``) also ``decay`` (each copy's weight decay per
    parameter) and ``loss_scale`` (each copy's), and the notes where the two copies differ in
    them or the loss scale departs from the configured one (``decay_notes``,
    ``loss_scale_notes``)."""
    from omegaconf import OmegaConf

    from sweep.analysis.collectives import decay_notes, held_notes, loss_scale_notes, optimizer_notes
    from sweep.config.enums import as_str
    from sweep.train.schedules import lr_factor

    configured = OmegaConf.to_container(cfg.optimizer, resolve=True)
    configured["name"] = as_str(cfg.optimizer.name)
    # step 0 runs the scheduled lr (train.lr_scheduler), not optimizer.lr itself
    configured["lr"] = float(cfg.optimizer.lr) * lr_factor(0, as_str(cfg.train.lr_scheduler),
                                                          int(cfg.train.warmup_steps), int(cfg.steps))
    held = {copy: groups for copy, groups in ran.items() if groups}
    notes = optimizer_notes(held, configured)
    out: Dict[str, Any] = dict(held)
    if logs:
        decay = {copy: log.decay for copy, log in logs.items() if getattr(log, "decay", None)}
        scales = {copy: log.loss_scale for copy, log in logs.items() if getattr(log, "groups", None)}
        out.update(decay=decay or None, loss_scale=scales or None)
        notes += decay_notes(decay) + held_notes(decay)
        scaler = cfg.train.get("grad_scaler") or {}
        wanted = float(scaler.get("init_scale")) if scaler.get("enabled") else None
        unscaled = next((getattr(log, "unscaled", None) for log in logs.values()), None)
        notes += loss_scale_notes(scales, wanted if wanted is not None else unscaled)
    out["notes"] = notes
    return out
