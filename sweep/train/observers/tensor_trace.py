"""The tensor trace of the tracing rerun (``sweep.analysis.trace``): per step, a copy's
gradients as its optimizer reads them (reduced, unscaled and clipped: both copies at the
same point of the step, so a gradient one copy clips earlier, before its reduction, is
compared with the other's clipped one), its weights after the update, and (torch) its buffers
after the forward; step 0's entry also the weights (and buffers) before any step. The
first tensor where the copies part is found from two such traces
(``sweep.analysis.trace.locate``)."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import numpy as np

from sweep.train.observers.base import Observer, Step


class _Trace(Observer):
    """Records steps 0 to ``max(until, weights_until)`` into :attr:`entries` (one dict a
    step), gradients only up to ``until``: past it, the weights alone tell the onset of a
    drift (``compare.onset_until``)."""

    def __init__(self, until: int, weights_until: int = -1) -> None:
        self.until, self.last = int(until), max(int(until), int(weights_until))
        self.entries: List[Dict[str, Dict[str, np.ndarray]]] = []

    def traced(self, step: Step) -> bool:
        return step.index <= self.last


class TorchTensorTrace(_Trace):
    """A torch copy's trace: ``begin_step`` (step 0): ``"initial"`` and ``"initial_buffer"``,
    the weights and buffers before it; ``after_backward``: ``"buffer"`` (BatchNorm's running
    statistics, updated by the forward); ``before_optimizer``, up to ``until``: ``"grad"``
    (clipped, unscaled); ``after_step``:
    ``"weight"``. Each a ``{canonical name: float32 ndarray}`` of full tensors
    (``sweep.train.torch_tensors.record_tensors``: a sharded ``DTensor`` is gathered, a
    collective every rank makes at the same point, outside the ledger's spans)."""

    def begin_step(self, step: Step) -> None:
        from sweep.train.torch_tensors import record_tensors

        if self.traced(step):
            model = step.copy.model
            self.entries.append({"initial": record_tensors(model, "weight"),
                                 "initial_buffer": record_tensors(model, "buffer")} if step.index == 0 else {})

    def after_backward(self, step: Step) -> None:
        from sweep.train.torch_tensors import record_tensors

        if self.traced(step):
            self.entries[-1]["buffer"] = record_tensors(step.copy.model, "buffer")

    def before_optimizer(self, step: Step) -> None:
        from sweep.train.torch_tensors import record_tensors

        if step.index <= self.until:
            self.entries[-1]["grad"] = record_tensors(step.copy.model, "grad")

    def after_step(self, step: Step) -> None:
        from sweep.train.torch_tensors import record_tensors

        if self.traced(step):
            self.entries[-1]["weight"] = record_tensors(step.copy.model, "weight")


def mindspore_state(net: Any, kind: str, frozen: Sequence[str] = ()) -> Dict[str, np.ndarray]:
    """``{parameter name: float32 ndarray}`` (copies) of a MindSpore ``net``: ``kind="weight"``
    its trainable parameters and the frozen ones (``frozen``: names ``model.frozen`` matched),
    ``"buffer"`` every other parameter that takes no gradient (BatchNorm's ``moving_mean``
    and ``moving_variance``: MindSpore's buffers are parameters with ``requires_grad=False``).
    A sharding engine's parameters give this rank's local shards."""
    out = {}
    for param in net.get_parameters():
        is_buffer = not param.requires_grad and param.name not in frozen
        if is_buffer == (kind == "buffer"):
            out[param.name] = param.asnumpy().astype(np.float32)
    return out


class MindSporeTensorTrace(_Trace):
    """A MindSpore copy's trace, by parameter name (:func:`mindspore_state`): ``begin_step``
    (step 0): ``"initial"`` and ``"initial_buffer"``; ``after_backward``: ``"buffer"`` (after
    the forward); ``before_optimizer``, up to ``until``: ``"grad"`` (``step.grads``, after the
    engine's reduction and clipping); ``after_step``: ``"weight"``. A sharding engine's tensors are its local
    shards (``sweep.analysis.trace.to_shards`` matches them to the standalone tensors).
    ``frozen``: the names of frozen parameters (weights, not buffers)."""

    def __init__(self, until: int, weights_until: int = -1, frozen: Sequence[str] = ()) -> None:
        super().__init__(until, weights_until)
        self.frozen = list(frozen)

    def begin_step(self, step: Step) -> None:
        if self.traced(step):
            net = step.copy.model
            self.entries.append({"initial": mindspore_state(net, "weight", self.frozen),
                                 "initial_buffer": mindspore_state(net, "buffer", self.frozen)}
                                if step.index == 0 else {})

    def after_backward(self, step: Step) -> None:
        if self.traced(step):
            self.entries[-1]["buffer"] = mindspore_state(step.copy.model, "buffer", self.frozen)

    def before_optimizer(self, step: Step) -> None:
        if step.index <= self.until:
            names = [p.name for p in step.copy.optimizer.parameters]
            self.entries[-1]["grad"] = {n: g.asnumpy().astype(np.float32) for n, g in zip(names, step.grads)}

    def after_step(self, step: Step) -> None:
        if self.traced(step):
            self.entries[-1]["weight"] = mindspore_state(step.copy.model, "weight", self.frozen)
