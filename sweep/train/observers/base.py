"""The observer protocol: what a training step tells the observers of one copy, and when.

The step of each framework (``sweep.train.torch_step.train``,
``sweep.train.mindspore_step.train``) runs a short loop and calls every observer at the
same named points, in this order per step:

============================  ===============================================================
point                         when
============================  ===============================================================
``begin_step(step)``          before step ``step.index`` touches anything
``span(step, "grads")``       a context around every micro-batch's forward and backward, up to
                              the gradients as the optimizer reads them (reduced; unscaled)
``span(step, "micro")``       a context around one micro-batch's forward, loss and backward
``span(step, "forward")``     a context around one micro-batch's model call
``after_forward(step, out)``  after each micro-batch's model call: ``out`` its output
``after_backward(step)``      the gradients reduced (``step.grads`` on MindSpore), not clipped
``span(step, "clip")``        a context around gradient clipping (``train.clip_grad_norm``; empty without)
``before_optimizer(step)``    the gradients as the optimizer reads them: reduced, unscaled and
                              clipped (``step.grads`` on MindSpore: the clipped ones)
``span(step, "update")``      a context around the optimizer step
``after_update(step)``        after the optimizer step, before the lr scheduler steps
``after_step(step)``          the step done (scheduler stepped), before gradients are cleared
``end(steps)``                after the last step; ``steps``: how many ran
============================  ===============================================================

An observer only looks: it reads tensors (copied out of live storage), hooks that return
``None``, or a context that lets every call through unchanged, so a run with observers gives
the same losses bit for bit as one without (``tests/integration/test_inside_model.py``,
``tests/unit/test_observers.py``). What an observer records stays on it (its attributes),
for the rank code to put in ``sweep.records.RankResult``. The protocol is framework-neutral:
a point that has nothing to do in one framework is simply not overridden.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, ContextManager, Iterable, Iterator, List, Optional

SPANS = ("grads", "micro", "forward", "clip", "update")
POINTS = ("begin_step", "after_forward", "after_backward", "before_optimizer", "after_update", "after_step", "end")


@dataclass
class Copy:
    """One copy of the model as its step trains it: ``model`` (a torch module or a
    MindSpore Cell, after its engine's ``parallelize``), its ``engine``
    (``sweep.engines``), ``optimizer``, and how the step treats it: ``scheduler`` (torch:
    stepped after each optimizer step, ``sweep.train.schedules.torch_scheduler``),
    ``clear_grads`` (the step clears gradients after the update: always for the standalone
    copy, ``zero_grad`` for the distributed one), ``input_dtype`` (torch: floating inputs
    are cast to it, ``model.init_dtype``), ``grad_api`` (MindSpore:
    ``framework.grad_api``)."""

    model: Any
    engine: Any
    optimizer: Any
    scheduler: Any = None
    clear_grads: bool = True
    input_dtype: Any = None
    grad_api: str = "value_and_grad"


@dataclass
class Step:
    """What the step tells an observer at a point: ``index`` (0-based step), ``copy`` (the
    :class:`Copy` being trained), ``micro`` (the micro-batch being run, 0 to
    ``train.grad_accum_steps - 1``), and on MindSpore, whose gradients are values and not
    attributes of the parameters, ``local_grads`` (this rank's summed micro-batch gradients,
    before the engine's reduction) and ``grads`` (after it, in ``optimizer.parameters``
    order); both stay ``None`` on torch (read ``param.grad``). ``scaler``: torch's gradient
    scaler where ``train.grad_scaler`` is on (its scale is what the loss was multiplied by)."""

    index: int
    copy: Copy
    micro: int = 0
    local_grads: Optional[tuple] = None
    grads: Optional[tuple] = None
    scaler: Any = None


class Observer:
    """An observer of one copy's training (module docstring): every point does nothing
    here; a subclass overrides the points it needs."""

    def begin_step(self, step: Step) -> None:
        """Before step ``step.index``."""

    def span(self, step: Step, name: str) -> Optional[ContextManager[Any]]:
        """A context to enter around the part ``name`` (one of :data:`SPANS`) of the step,
        or ``None`` for none."""
        return None

    def after_forward(self, step: Step, output: Any) -> None:
        """After micro-batch ``step.micro``'s model call; ``output``: what the model returned."""

    def after_backward(self, step: Step) -> None:
        """The step's gradients computed and reduced, before clipping and the optimizer."""

    def before_optimizer(self, step: Step) -> None:
        """The gradients as the optimizer reads them: reduced, unscaled and clipped (both
        copies at the same point of the step, whatever clips them)."""

    def after_update(self, step: Step) -> None:
        """After the optimizer step, before the lr scheduler moves the lr."""

    def after_step(self, step: Step) -> None:
        """The step done, before the copy's gradients are cleared."""

    def end(self, steps: int) -> None:
        """After the last step; ``steps``: how many ran."""


class Observers:
    """A list of observers called as one, in list order (contexts nest: the first is the
    outermost). The training steps call only this."""

    def __init__(self, observers: Iterable[Observer] = ()) -> None:
        self.items: List[Observer] = [o for o in observers if o is not None]

    def call(self, point: str, *args: Any) -> None:
        """Call ``point`` (one of :data:`POINTS`) on every observer with ``args``."""
        for observer in self.items:
            getattr(observer, point)(*args)

    @contextlib.contextmanager
    def span(self, step: Step, name: str) -> Iterator[None]:
        """Every observer's context for the part ``name`` of the step, entered in order."""
        with contextlib.ExitStack() as stack:
            for observer in self.items:
                context = observer.span(step, name)
                if context is not None:
                    stack.enter_context(context)
            yield
