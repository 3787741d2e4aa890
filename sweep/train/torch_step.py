"""The PyTorch training step both copies run (``train`` section). The two copies differ only in
their engine (``sweep.engines``): the standalone copy's is ``StandaloneTorch`` (a plain
module), or ``StandaloneFSDP2`` (``fully_shard`` on one rank) with ``baseline.precision=policy``.

A step, per ``train``: for each of ``grad_accum_steps`` equal micro-batches (gradient
sync off on all but the last, ``engine.no_sync``): forward, ``loss / grad_accum_steps``
(scaled by the gradient scaler if enabled), ``backward()``. Then ``scaler.unscale_``,
``engine.clip_grad_norm`` if ``clip_grad_norm`` is set, ``engine.optimizer_step``,
``scaler.update()``, the lr scheduler's step, and ``zero_grad()`` where the copy clears
its gradients. The step's loss is the mean of its micro-batches' losses, summed and divided
in the loss's own dtype, so the recorded value keeps the precision the loss was computed in
(a float64 mean of float32 losses would read as float64, and its rounding envelope's floor,
``sweep.analysis.envelope.resolution``, as float64's). What a step
observes (dtypes that ran, tensors, digests, the module trace, the collectives, the
optimizer as it ran, lrs, random draws) is its observers' (``sweep.train.observers``),
called at the protocol's named points; activation offload is one too (a context).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, List

from sweep.train import micro_batches
from sweep.train.observers.base import Copy, Observer, Observers, Step


def loss_function(name: str) -> Callable[[Any, Any], Any]:
    """``train.loss`` -> ``loss(output, target)``: ``mse`` is ``F.mse_loss`` (mean);
    ``cross_entropy`` is ``F.cross_entropy`` (mean) of ``(rows, ..., classes)`` logits
    flattened to ``(N, classes)`` against ``(rows, ...)`` int64 targets flattened to
    ``(N,)``; a dotted path names the user's function.

    Raises:
        ValueError: a name that is neither.
    """
    import torch.nn.functional as F

    if name == "mse":
        return _tensor_output(F.mse_loss, name)
    if name == "cross_entropy":
        return _tensor_output(lambda out, target: F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1)),
                              name)
    if "." in name:
        from sweep.config.factories import locate

        return _scalar(locate(name), name)
    raise ValueError(f"train.loss={name!r}; allowed: mse, cross_entropy, or a dotted path")


def _tensor_output(loss: Callable[[Any, Any], Any], name: str) -> Callable[[Any, Any], Any]:
    """A built-in ``loss`` that first checks the model returned one tensor.

    Raises:
        TypeError: the model returned something else (a tuple, a dict), naming ``train.loss``.
    """
    import torch

    def checked(out: Any, target: Any) -> Any:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"train.loss={name} reads one output tensor, and the model returned a "
                            f"{type(out).__name__}: return the output tensor, or give train.loss a function of "
                            "(output, target) that reads what the model returns")
        return loss(out, target)

    return checked


def _scalar(loss: Callable[[Any, Any], Any], name: str) -> Callable[[Any, Any], Any]:
    """A user's ``loss`` held to its contract: one element (a mean over the batch).

    Raises:
        ValueError: it returned a tensor of more than one element (``reduction="none"``), naming
            ``train.loss`` and the shape.
        TypeError: it returned no tensor (a Python float: ``.item()``, or a number), naming
            ``train.loss``: a backward needs the tensor.
    """
    import torch

    def scalar_loss(out: Any, target: Any) -> Any:
        value = loss(out, target)
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"train.loss={name} returned a {type(value).__name__}, not a tensor: a loss returns the "
                            "tensor the backward starts from (no .item(), no float())")
        if value.numel() != 1:
            raise ValueError(f"train.loss={name} returned a tensor of shape {tuple(value.shape)}: a loss returns one "
                             "element, a mean over the batch (reduction='mean')")
        return value

    return scalar_loss


def train(copy: Copy, samples: List[Any], train_cfg: Any, observers: Iterable[Observer] = ()) -> List[float]:
    """Train ``copy`` (``sweep.train.observers.Copy``: its model, engine, optimizer,
    scheduler, ``clear_grads``, ``input_dtype``) one pass over ``samples`` (per step a pair
    of tensors, ``(rows, ...)``) with the step of the module docstring, calling
    ``observers`` at the points of ``sweep.train.observers.base``. Returns the loss of every
    step (float): the mean of its micro-batches' losses.

    ``copy.input_dtype``: floating inputs are cast to it (``model.init_dtype``), as the data
    is float32 and a model created in bf16 takes bf16 inputs.
    """
    model, engine, optimizer = copy.model, copy.engine, copy.optimizer
    watch = Observers(observers)
    loss_fn = loss_function(str(train_cfg.loss))
    accum, clip = int(train_cfg.grad_accum_steps), train_cfg.clip_grad_norm
    scaler = engine.grad_scaler(train_cfg.grad_scaler) if train_cfg.grad_scaler.enabled else None
    losses = []
    for i, (x, y) in enumerate(samples):
        step = Step(index=i, copy=copy, scaler=scaler)
        watch.call("begin_step", step)
        if copy.input_dtype is not None and x.is_floating_point():
            x = x.to(copy.input_dtype)
        step_loss = None
        with watch.span(step, "grads"):
            for j, (xm, ym) in enumerate(micro_batches(x, y, accum)):
                step.micro = j
                sync = engine.no_sync(model) if j < accum - 1 else contextlib.nullcontext()
                with sync, watch.span(step, "micro"):
                    with watch.span(step, "forward"):
                        out = model(xm)
                    watch.call("after_forward", step, out)
                    loss = loss_fn(out, ym)
                    scaled = loss if accum == 1 else loss / accum
                    (scaler.scale(scaled) if scaler is not None else scaled).backward()
                step_loss = loss.detach() if step_loss is None else step_loss + loss.detach()
            if scaler is not None:
                scaler.unscale_(optimizer)
        watch.call("after_backward", step)
        with watch.span(step, "clip"):
            if clip is not None:
                engine.clip_grad_norm(model, float(clip))
        watch.call("before_optimizer", step)
        with watch.span(step, "update"):
            if scaler is not None:
                engine.optimizer_step(optimizer, scaler=scaler)
                scaler.update()
            else:
                engine.optimizer_step(optimizer)
        watch.call("after_update", step)
        if copy.scheduler is not None:
            copy.scheduler.step()
        watch.call("after_step", step)
        if copy.clear_grads:
            optimizer.zero_grad()
        losses.append(float((step_loss if accum == 1 else step_loss / accum).item()))
    watch.call("end", len(losses))
    return losses
