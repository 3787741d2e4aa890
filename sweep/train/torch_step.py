"""The PyTorch training step both copies run (``train`` section), and what a step
observes (dtypes that ran, tensors for ``sweep.analysis.trace``). The two copies differ only in
their engine (``sweep.engines``): the standalone copy's is ``StandaloneTorch`` (a plain
module), or ``StandaloneFSDP2`` (``fully_shard`` on one rank) with ``baseline.precision=policy``.

A step, per ``train``: for each of ``grad_accum_steps`` equal micro-batches (gradient
sync off on all but the last, ``engine.no_sync``): forward, ``loss / grad_accum_steps``
(scaled by the gradient scaler if enabled), ``backward()``. Then ``scaler.unscale_``,
``engine.clip_grad_norm`` if ``clip_grad_norm`` is set, ``engine.optimizer_step``,
``scaler.update()``, and ``zero_grad()`` where the copy clears its gradients. The step's
loss is the mean of its micro-batches' losses.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from sweep.train import micro_batches


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
        return F.mse_loss
    if name == "cross_entropy":
        return lambda out, target: F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
    if "." in name:
        from hydra.utils import get_method

        return get_method(name)
    raise ValueError(f"train.loss={name!r}; allowed: mse, cross_entropy, or a dotted path")


class _ObserveReduce:
    """While entered, record the dtype of the first tensor torch.distributed reduces
    (``reduce_scatter_single``/``reduce_scatter_tensor``: FSDP2's gradient reduction,
    torch 2.13's ``_fsdp_collectives`` calls the former; ``all_reduce``: HSDP's
    replicate dim, hyper-parallel) into ``observed["reduce"]``. It only looks: the call
    goes through unchanged. DDP reduces in C++ (its buckets), out of sight: unknown."""

    # name -> (position, keyword) of the tensor being reduced
    WATCHED = {"reduce_scatter_tensor": (1, "input"), "reduce_scatter_single": (1, "input"),
               "all_reduce": (0, "tensor")}

    def __init__(self, observed: Dict[str, str]) -> None:
        self.observed = observed
        self.saved: Dict[str, Any] = {}

    def _watch(self, original: Any, position: int, keyword: str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tensor = kwargs.get(keyword, args[position] if len(args) > position else None)
            if tensor is not None and hasattr(tensor, "dtype"):
                self.observed.setdefault("reduce", _dtype(tensor))
            return original(*args, **kwargs)

        return wrapper

    def __enter__(self) -> "_ObserveReduce":
        import torch.distributed as dist

        for name, (position, keyword) in self.WATCHED.items():
            if not hasattr(dist, name):
                continue
            self.saved[name] = getattr(dist, name)
            setattr(dist, name, self._watch(self.saved[name], position, keyword))
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch.distributed as dist

        for name, original in self.saved.items():
            setattr(dist, name, original)


def record_tensors(model: Any, kind: str) -> Dict[str, np.ndarray]:
    """Every parameter's gradient (``kind="grad"``) or value (``"weight"``) as a full numpy
    array: a sharded ``DTensor`` is gathered (``full_tensor()``, a collective every rank
    makes at the same point), DDP's ``module.`` prefix is dropped from the names."""
    out = {}
    for name, param in model.named_parameters():
        tensor = param.grad if kind == "grad" else param.detach()
        if tensor is None:
            continue
        if hasattr(tensor, "full_tensor"):
            tensor = tensor.full_tensor()
        out[name[len("module."):] if name.startswith("module.") else name] = \
            tensor.detach().float().cpu().numpy().copy()
    return out


def shard_layout(model: Any) -> Dict[str, int]:
    """Per parameter name (as :func:`record_tensors` gives it), how many dim-0 shards its
    ``DTensor`` has (the size of the mesh dim its ``Shard(0)`` placement is on; FSDP2 and
    hyper-parallel shard dim 0 over the mesh's last dim). Parameters that are not
    sharded on dim 0 (plain tensors, DDP) are left out."""
    from torch.distributed.tensor import Shard

    out = {}
    for name, param in model.named_parameters():
        for mesh_dim, placement in enumerate(getattr(param, "placements", ()) or ()):
            if isinstance(placement, Shard) and placement.dim == 0:
                out[name[len("module."):] if name.startswith("module.") else name] = \
                    int(param.device_mesh.size(mesh_dim))
    return out


def train(
    model: Any,
    samples: List[Any],
    engine: Any,
    optimizer: Any,
    train_cfg: Any,
    *,
    clear_grads: bool = True,
    input_dtype: Any = None,
    observed: Optional[Dict[str, str]] = None,
    trace: Optional[List[Dict[str, Dict[str, np.ndarray]]]] = None,
    trace_until: int = -1,
    weights_until: int = -1,
) -> List[float]:
    """Train one pass over ``samples`` (per step a pair of tensors, ``(rows, ...)``) with
    the step of the module docstring. Returns the loss of every step (float).

    ``input_dtype``: floating inputs are cast to it (``model.init_dtype``), as the data
    is float32 and a model created in bf16 takes bf16 inputs.

    If ``observed`` is a dict, step 0 fills it with the dtypes that actually ran:
    ``param_forward`` (the weight of the first module that has one, seen by its
    forward), ``output`` (the model output), ``reduce`` (the gradients torch.distributed
    reduced, :class:`_ObserveReduce`), ``grad`` (the gradient the optimizer reads),
    ``master`` (this rank's stored parameter: the master weights) and
    ``optimizer_state`` (the optimizer's first state tensor after the step, e.g. Adam's
    ``exp_avg``; none for plain SGD).

    If ``trace`` is a list, each step up to ``max(trace_until, weights_until)`` appends
    ``{"grad": ..., "weight": ...}`` (:func:`record_tensors`): the gradients after the
    backward (and its reduction; up to ``trace_until`` only), the weights after the step;
    step 0's entry also ``"initial"``, the weights before it (``sweep.analysis.trace``).
"""
    loss_fn = loss_function(str(train_cfg.loss))
    accum = int(train_cfg.grad_accum_steps)
    clip = train_cfg.clip_grad_norm
    scaler = engine.grad_scaler(train_cfg.grad_scaler) if train_cfg.grad_scaler.enabled else None
    handle = None
    if observed is not None:
        first = _first_weighted(model)

        def record_param_dtype(module: Any, args: Any) -> None:  # a pre-hook's return value replaces the input
            observed.setdefault("param_forward", _dtype(module.weight))

        handle = first.register_forward_pre_hook(record_param_dtype)
    losses = []
    for i, (x, y) in enumerate(samples):
        traced = trace is not None and i <= max(trace_until, weights_until)
        if traced:
            trace.append({"initial": record_tensors(model, "weight")} if i == 0 else {})
        watch = _ObserveReduce(observed) if handle is not None else contextlib.nullcontext()
        if input_dtype is not None and x.is_floating_point():
            x = x.to(input_dtype)
        step_loss = 0.0
        with watch:
            for j, (xm, ym) in enumerate(micro_batches(x, y, accum)):
                sync = engine.no_sync(model) if j < accum - 1 else contextlib.nullcontext()
                with sync:
                    out = model(xm)
                    loss = loss_fn(out, ym)
                    scaled = loss if accum == 1 else loss / accum
                    (scaler.scale(scaled) if scaler is not None else scaled).backward()
                step_loss += float(loss.item())
        if handle is not None:
            handle.remove()
            observed["output"] = _dtype(out)
            observed["grad"] = _dtype(next(model.parameters()).grad)
        if scaler is not None:
            scaler.unscale_(optimizer)
        if traced and i <= trace_until:
            trace[-1]["grad"] = record_tensors(model, "grad")
        if clip is not None:
            engine.clip_grad_norm(model, float(clip))
        if scaler is not None:
            engine.optimizer_step(optimizer, scaler=scaler)
            scaler.update()
        else:
            engine.optimizer_step(optimizer)
        if traced:
            trace[-1]["weight"] = record_tensors(model, "weight")
        if handle is not None:
            handle = None
            observed["master"] = _dtype(next(model.parameters()).detach())
            state = [v for s in optimizer.state.values() for v in s.values()
                     if hasattr(v, "dtype") and getattr(v, "dim", lambda: 0)() > 0]
            observed["optimizer_state"] = _dtype(state[0]) if state else None
        if clear_grads:
            optimizer.zero_grad()
        losses.append(step_loss if accum == 1 else step_loss / accum)
    return losses


def _first_weighted(model: Any) -> Any:
    """The first sub-module (in ``named_modules`` order) with a ``weight`` parameter."""
    import torch

    for _, module in model.named_modules():
        if isinstance(getattr(module, "weight", None), torch.Tensor):
            return module
    raise ValueError("the model has no module with a weight parameter")


def _dtype(tensor: Any) -> Optional[str]:
    if tensor is None:
        return None
    tensor = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return str(tensor.dtype).replace("torch.", "")
