"""The MindSpore training step both copies run (``train`` section), as the report's
``train_step``: per micro-batch (``grad_accum_steps`` equal row slices)
``value_and_grad`` of ``MSE / grad_accum_steps`` w.r.t. ``optimizer.parameters``, the
gradients summed; then ``engine.reduce_grads`` (the data-parallel all-reduce: once per
step, so the inner micro-steps never sync), ``engine.clip_grad_norm`` if
``clip_grad_norm`` is set, ``engine.optimizer_step``; where the copy clears its gradients
(``zero_grad``) also ``net.zero_grad()`` if the net has one (hyper-parallel's
``fully_shard`` adds it; a plain Cell's functional gradients need no clearing). The two
copies differ only in their engine (``sweep.engines``). What a step observes is its
observers' (``sweep.train.observers``), called at the same named points as the torch
step's (``sweep.train.torch_step``). The step's loss is the sum of its micro-batches'
``MSE / grad_accum_steps``, summed in the loss's own dtype (the value keeps the precision
it was computed in, as the torch step's does).
"""

from __future__ import annotations

from typing import Any, Iterable, List

from sweep.train import micro_batches
from sweep.train.observers.base import Copy, Observer, Observers, Step


def train(copy: Copy, samples: List[Any], train_cfg: Any, observers: Iterable[Observer] = ()) -> List[float]:
    """Train ``copy`` (``sweep.train.observers.Copy``: its net, engine, optimizer,
    ``clear_grads``, ``grad_api``) one pass over ``samples`` (per step a pair of numpy
    arrays, ``(rows, ...)``) with the step of the module docstring, calling ``observers``
    at the points of ``sweep.train.observers.base`` (``after_forward`` inside the forward
    function ``value_and_grad`` runs: PYNATIVE mode runs it as Python). Returns the loss of
    every step (float): the sum of its micro-batches' scaled losses.

    Raises:
        NotImplementedError: ``grad_api="backward"`` (not wired; on a MindSpore without
        ``Tensor.backward`` it says so).
    """
    import mindspore as ms
    from mindspore import Tensor, nn

    _check_grad_api(copy.grad_api)
    net, engine, optimizer = copy.model, copy.engine, copy.optimizer
    watch = Observers(observers)
    loss_fn, accum, clip = nn.MSELoss(), int(train_cfg.grad_accum_steps), train_cfg.clip_grad_norm
    step = Step(index=0, copy=copy)

    def forward_fn(inputs: Any, labels: Any) -> Any:
        with watch.span(step, "forward"):
            out = net(inputs)
        watch.call("after_forward", step, out)
        loss = loss_fn(out, labels)
        return loss if accum == 1 else loss / accum

    net.set_train(True)  # a Cell starts in inference mode (BatchNorm would use its running statistics)
    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters)
    clear = getattr(net, "zero_grad", None) if copy.clear_grads else None
    losses = []
    for i, (x, y) in enumerate(samples):
        step = Step(index=i, copy=copy)
        watch.call("begin_step", step)
        step_loss, grads = None, None
        with watch.span(step, "grads"):
            for j, (xm, ym) in enumerate(micro_batches(x, y, accum)):
                step.micro = j
                with watch.span(step, "micro"):
                    loss, micro = grad_fn(Tensor(xm), Tensor(ym))
                grads = micro if grads is None else tuple(g + m for g, m in zip(grads, micro))
                step_loss = loss.asnumpy() if step_loss is None else step_loss + loss.asnumpy()
            step.local_grads = grads
            step.grads = grads = engine.reduce_grads(optimizer, grads)
        watch.call("after_backward", step)
        with watch.span(step, "clip"):
            if clip is not None:
                step.grads = grads = engine.clip_grad_norm(grads, float(clip))
        watch.call("before_optimizer", step)
        with watch.span(step, "update"):
            engine.optimizer_step(optimizer, grads)
        watch.call("after_update", step)
        watch.call("after_step", step)
        if clear is not None:
            clear()
        losses.append(float(step_loss))
    watch.call("end", len(losses))
    return losses


def _check_grad_api(grad_api: str) -> None:
    """Raise for a ``framework.grad_api`` the step does not run (``value_and_grad`` only).

    Raises:
        NotImplementedError: ``backward``, naming whether this MindSpore has ``Tensor.backward``.
    """
    import mindspore as ms
    from mindspore import Tensor

    if grad_api == "value_and_grad":
        return
    if not hasattr(Tensor, "backward"):
        raise NotImplementedError(
            f"framework.grad_api={grad_api}: MindSpore {ms.__version__} has no Tensor.backward; "
            "use framework.grad_api=value_and_grad"
        )
    raise NotImplementedError(f"framework.grad_api={grad_api} is not wired for MindSpore yet")
