"""Activation offload (``activation_offload=true``) as the step's context: each micro-batch's
forward, loss and backward run inside ``sweep.train.activations.offload``
(``torch.autograd.graph.save_on_cpu``), in both copies alike. It moves saved tensors, not
values: the losses are those of a run without it."""

from __future__ import annotations

from typing import Any, ContextManager, Optional

from sweep.train.observers.base import Observer, Step


class ActivationOffload(Observer):
    """``span("micro")``: ``sweep.train.activations.offload(True)``."""

    def span(self, step: Step, name: str) -> Optional[ContextManager[Any]]:
        from sweep.train.activations import offload

        return offload(True) if name == "micro" else None
