"""The tensor trace of the tracing rerun (``sweep.analysis.trace``): per step, a copy's
gradients as its optimizer reads them (reduced, unscaled and clipped: both copies at the
same point of the step, so a gradient one copy clips earlier, before its reduction, is
compared with the other's clipped one), its weights after the update, and (torch) its buffers
after the forward; step 0's entry also the weights (and buffers) before any step. The
first tensor where the copies part is found from two such traces
(``sweep.analysis.trace.locate``).

What a trace records goes to its *sink*, one tensor at a time: held whole by default
(``sweep.train.trace_book.Entries``: :attr:`_Trace.entries`), or streamed and compared as
it comes (the rank's ``sweep.train.trace_book.TraceBook``, ``compare.trace_capture``)."""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Sequence, Tuple

import numpy as np

from sweep.train.observers.base import Observer, Step


class _Trace(Observer):
    """Records steps 0 to ``max(until, weights_until)`` into its ``sink`` (one step after
    another), gradients only up to ``until``: past it, the weights alone tell the onset of a
    drift (``compare.onset_until``). Without a sink, an ``Entries`` holds them whole
    (:attr:`entries`)."""

    def __init__(self, until: int, weights_until: int = -1, sink: Any = None) -> None:
        from sweep.train.trace_book import Entries

        self.until, self.last = int(until), max(int(until), int(weights_until))
        self.sink = sink if sink is not None else Entries()

    @property
    def entries(self) -> List[Dict[str, Dict[str, np.ndarray]]]:
        """The trace held whole (``sweep.analysis.trace``'s ``Trace``): a sink that holds it only."""
        return self.sink.entries

    def traced(self, step: Step) -> bool:
        return step.index <= self.last

    def order(self, kind: str, names: Sequence[str]) -> None:
        """The order this step produced ``kind``'s tensors in (the module trace's: the
        gradients as autograd produced them)."""
        self.sink.order(kind, names)

    def end(self, steps: int) -> None:
        self.sink.end()


class TorchTensorTrace(_Trace):
    """A torch copy's trace: ``begin_step`` (step 0): ``"initial"`` and ``"initial_buffer"``,
    the weights and buffers before it; ``after_backward``: ``"buffer"`` (BatchNorm's running
    statistics, updated by the forward); ``before_optimizer``, up to ``until``: ``"grad"``
    (reduced, clipped, unscaled), or, with ``grads_read``, ``after_update``: as the optimizer
    read them (what the engine's ``optimizer_step`` did to them first included: an engine that
    reduces a mesh dim by hand there; torch's optimizers read gradients without writing them);
    ``after_step``: ``"weight"``. Each a ``{canonical name: float32 ndarray}`` of full tensors
    (``sweep.train.torch_tensors.record_tensors``: a sharded ``DTensor`` is gathered, a
    collective every rank makes at the same point, outside the ledger's spans)."""

    def begin_step(self, step: Step) -> None:
        if self.traced(step):
            model = step.copy.model
            self.sink.begin_step(step.index)
            if step.index == 0:
                self.sink.record("initial", self._copies(model, "weight"))
                self.sink.record("initial_buffer", self._copies(model, "buffer"))

    def after_backward(self, step: Step) -> None:
        if self.traced(step):
            self.sink.record("buffer", self._copies(step.copy.model, "buffer"))

    def __init__(self, until: int, weights_until: int = -1, sink: Any = None, grads_read: bool = False) -> None:
        super().__init__(until, weights_until, sink)
        self.grads_read = bool(grads_read)

    def before_optimizer(self, step: Step) -> None:
        if step.index <= self.until and not self.grads_read:
            self.sink.record("grad", self._copies(step.copy.model, "grad"))

    def after_update(self, step: Step) -> None:
        if step.index <= self.until and self.grads_read:
            self.sink.record("grad", self._copies(step.copy.model, "grad"))

    def after_step(self, step: Step) -> None:
        if self.traced(step):
            self.sink.record("weight", self._copies(step.copy.model, "weight"))

    def _copies(self, model: Any, kind: str) -> Iterator[Tuple[str, np.ndarray]]:
        """``(canonical name, float32 ndarray)`` of ``model``'s tensors of ``kind``, one at a
        time (``sweep.train.torch_tensors.iter_state``), each copied out of live storage: a
        sharded ``DTensor`` gathered as it comes (a collective every rank makes in the same
        order), or, where the sink takes it so (its ``local`` names: a staged trace), this
        rank's shard; of a whole tensor the sink compares only some rows of (``copy_rows``: the
        twin's, by the distributed copy's shards), only those rows."""
        from sweep.train.torch_tensors import host_copy, iter_state

        local = getattr(self.sink, "local", frozenset())
        rows = getattr(self.sink, "copy_rows", None)
        for name, tensor in iter_state(model, kind, gather=False):
            if hasattr(tensor, "full_tensor"):
                if name in local:
                    yield name, host_copy(tensor)
                    continue
                tensor = tensor.full_tensor()
            span = rows(name, int(tensor.shape[0])) if rows is not None and tensor.dim() else None
            yield name, host_copy(tensor if span is None else tensor[span[0]:span[1]])


def mindspore_state(net: Any, kind: str, frozen: Sequence[str] = ()) -> Dict[str, np.ndarray]:
    """``{parameter name: float32 ndarray}`` (copies) of a MindSpore ``net``: ``kind="weight"``
    its trainable parameters and the frozen ones (``frozen``: names ``model.frozen`` matched),
    ``"buffer"`` every other parameter that takes no gradient (BatchNorm's ``moving_mean``
    and ``moving_variance``: MindSpore's buffers are parameters with ``requires_grad=False``).
    A sharding engine's parameters give this rank's local shards."""
    return dict(_mindspore_copies(net, kind, frozen))


def _mindspore_copies(net: Any, kind: str, frozen: Sequence[str] = ()) -> Iterator[Tuple[str, np.ndarray]]:
    """:func:`mindspore_state`'s items, one copy at a time."""
    for param in net.get_parameters():
        is_buffer = not param.requires_grad and param.name not in frozen
        if is_buffer == (kind == "buffer"):
            yield param.name, param.asnumpy().astype(np.float32)


class MindSporeTensorTrace(_Trace):
    """A MindSpore copy's trace, by parameter name (:func:`mindspore_state`): ``begin_step``
    (step 0): ``"initial"`` and ``"initial_buffer"``; ``after_backward``: ``"buffer"`` (after
    the forward); ``before_optimizer``, up to ``until``: ``"grad"`` (``step.grads``, after the
    engine's reduction and clipping); ``after_step``: ``"weight"``. A sharding engine's tensors are its local
    shards (``sweep.analysis.trace.to_shards`` matches them to the standalone tensors).
    ``frozen``: the names of frozen parameters (weights, not buffers)."""

    def __init__(self, until: int, weights_until: int = -1, frozen: Sequence[str] = (), sink: Any = None) -> None:
        super().__init__(until, weights_until, sink)
        self.frozen = list(frozen)

    def begin_step(self, step: Step) -> None:
        if self.traced(step):
            net = step.copy.model
            self.sink.begin_step(step.index)
            if step.index == 0:
                self.sink.record("initial", _mindspore_copies(net, "weight", self.frozen))
                self.sink.record("initial_buffer", _mindspore_copies(net, "buffer", self.frozen))

    def after_backward(self, step: Step) -> None:
        if self.traced(step):
            self.sink.record("buffer", _mindspore_copies(step.copy.model, "buffer", self.frozen))

    def before_optimizer(self, step: Step) -> None:
        if step.index <= self.until:
            names = [p.name for p in step.copy.optimizer.parameters]
            self.sink.record("grad", ((n, g.asnumpy().astype(np.float32)) for n, g in zip(names, step.grads)))

    def after_step(self, step: Step) -> None:
        if self.traced(step):
            self.sink.record("weight", _mindspore_copies(step.copy.model, "weight", self.frozen))
