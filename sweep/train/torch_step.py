"""The PyTorch training step both copies run (``train`` section), and the tensor reads its
observers share (``sweep.train.observers``). The two copies differ only in
their engine (``sweep.engines``): the standalone copy's is ``StandaloneTorch`` (a plain
module), or ``StandaloneFSDP2`` (``fully_shard`` on one rank) with ``baseline.precision=policy``.

A step, per ``train``: for each of ``grad_accum_steps`` equal micro-batches (gradient
sync off on all but the last, ``engine.no_sync``): forward, ``loss / grad_accum_steps``
(scaled by the gradient scaler if enabled), ``backward()``. Then ``scaler.unscale_``,
``engine.clip_grad_norm`` if ``clip_grad_norm`` is set, ``engine.optimizer_step``,
``scaler.update()``, the lr scheduler's step, and ``zero_grad()`` where the copy clears
its gradients. The step's loss is the mean of its micro-batches' losses. What a step
observes (dtypes that ran, tensors, digests, the module trace, the collectives, the
optimizer as it ran, lrs, random draws) is its observers' (``sweep.train.observers``),
called at the protocol's named points; activation offload is one too (a context).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterable, List

import numpy as np

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
        return F.mse_loss
    if name == "cross_entropy":
        return lambda out, target: F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
    if "." in name:
        from hydra.utils import get_method

        return get_method(name)
    raise ValueError(f"train.loss={name!r}; allowed: mse, cross_entropy, or a dotted path")


def host_copy(tensor: Any) -> np.ndarray:
    """A float32 numpy array copied out of ``tensor`` (any dtype, any device; a ``DTensor``
    gives its local shard): ``detach().to("cpu", float32, copy=True)``. The copy is the
    point: ``.float()``/``.cpu()`` return the tensor itself for an fp32 CPU tensor, and
    ``.numpy()`` on live storage marks it non-resizable, after which FSDP2's reshard of an
    unsharded parameter raises "Trying to resize storage that is not resizable". Every
    snapshot of a live tensor (trace, ``moved``, digests, step-0 check) goes through here."""
    import torch

    data = tensor.detach()
    data = data.to_local() if hasattr(data, "to_local") else data
    return data.to("cpu", torch.float32, copy=True).numpy()


def named_state(model: Any, kind: str, gather: bool = True) -> Dict[str, Any]:
    """``{canonical name: tensor}`` of ``model``: ``kind="weight"`` its parameters,
    ``"grad"`` their gradients (``None`` ones left out), ``"buffer"`` every buffer
    (persistent or not, ``named_buffers()``). Names go through
    ``sweep.analysis.trace.canonical_name`` (wrapper segments dropped), so both copies
    name a tensor alike. ``gather``: a sharded ``DTensor`` becomes the full tensor
    (``full_tensor()``, a collective every rank makes at the same point); else it stays as
    it is (``host_copy`` takes its local shard)."""
    from sweep.analysis.trace import canonical_name

    items = model.named_buffers() if kind == "buffer" else model.named_parameters()
    out = {}
    for name, tensor in items:
        if kind == "grad":
            tensor = tensor.grad
        if tensor is None:
            continue
        if gather and hasattr(tensor, "full_tensor"):
            tensor = tensor.full_tensor()
        out[canonical_name(name)] = tensor
    return out


def record_tensors(model: Any, kind: str) -> Dict[str, np.ndarray]:
    """Every parameter's gradient (``kind="grad"``) or value (``"weight"``), or every
    buffer (``"buffer"``), as a full float32 numpy array copied out of live storage
    (:func:`host_copy`), by canonical name (:func:`named_state`): a sharded ``DTensor``
    is gathered (``full_tensor()``, a collective every rank makes at the same point)."""
    return {name: host_copy(tensor) for name, tensor in named_state(model, kind).items()}


def local_digest(model: Any) -> str:
    """sha1 (hex) of this rank's local parameter values, in ``named_parameters`` order:
    each parameter's local shard (a ``DTensor``'s ``to_local()``) as float32 bytes,
    copied out of live storage (:func:`host_copy`). Ranks that hold the same shards
    (replicas across an HSDP mesh's replicate dim, or DDP's ranks) must give equal
    digests."""
    import hashlib

    digest = hashlib.sha1()
    for _, param in model.named_parameters():
        digest.update(np.ascontiguousarray(host_copy(param)).tobytes())
    return digest.hexdigest()


def shard_key(model: Any) -> Dict[str, Any]:
    """Which shards of the weights this rank holds, and where it sits on the mesh:
    ``{"key": str | None, "coords": [int] | None, "mesh_dims": [str] | None}``. ``key``
    lists, per parameter (canonical name), its local shape and the index of its local
    shard on every mesh dim its placement does not replicate; ranks with equal keys hold
    the same slices (replicas: an HSDP mesh's replicate dim, DDP's ranks). A plain tensor
    (DDP, no mesh) adds only its shape, so every rank holds the same key. ``coords``/
    ``mesh_dims``: this rank's coordinates on the first sharded parameter's mesh and its
    dim names (the rank code replaces them by those on the job's ``mesh``). A mesh this
    cannot read gives ``key`` ``None``: nothing compared."""
    from sweep.analysis.trace import canonical_name

    parts, coords, dims = [], None, None
    try:
        for name, param in model.named_parameters():
            mesh = getattr(param, "device_mesh", None)
            local = param.to_local() if hasattr(param, "to_local") else param
            entry = f"{canonical_name(name)}{tuple(local.shape)}"
            if mesh is not None:
                where = list(mesh.get_coordinate() or [])
                if coords is None:
                    coords, dims = [int(c) for c in where], list(mesh.mesh_dim_names or [])
                held = [f"{i}:{where[i]}/{mesh.size(i)}" for i, p in enumerate(param.placements)
                        if type(p).__name__ != "Replicate"]
                entry += "@" + ",".join(held)
            parts.append(entry)
    except Exception:  # another library's mesh: no replica check rather than a false one
        return {"key": None, "coords": coords, "mesh_dims": dims}
    return {"key": ";".join(parts), "coords": coords, "mesh_dims": dims}


def shard_layout(model: Any) -> Dict[str, int]:
    """Per parameter name (as :func:`record_tensors` gives it), how many dim-0 shards its
    ``DTensor`` has (the size of the mesh dim its ``Shard(0)`` placement is on; FSDP2 and
    hyper-parallel shard dim 0 over the mesh's last dim). Parameters that are not
    sharded on dim 0 (plain tensors, DDP) are left out."""
    from torch.distributed.tensor import Shard

    from sweep.analysis.trace import canonical_name

    out = {}
    for name, param in model.named_parameters():
        for mesh_dim, placement in enumerate(getattr(param, "placements", ()) or ()):
            if isinstance(placement, Shard) and placement.dim == 0:
                out[canonical_name(name)] = int(param.device_mesh.size(mesh_dim))
    return out


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
        step = Step(index=i, copy=copy)
        watch.call("begin_step", step)
        if copy.input_dtype is not None and x.is_floating_point():
            x = x.to(copy.input_dtype)
        step_loss = 0.0
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
                step_loss += float(loss.item())
            if scaler is not None:
                scaler.unscale_(optimizer)
        watch.call("after_backward", step)
        with watch.span(step, "update"):
            if clip is not None:
                engine.clip_grad_norm(model, float(clip))
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
        losses.append(step_loss if accum == 1 else step_loss / accum)
    watch.call("end", len(losses))
    return losses


def first_floating(value: Any, floating: bool = True) -> Any:
    """The first tensor in ``value`` (a tensor, or tuples, lists and dicts of them: a model
    may return any of these), a floating one unless ``floating=False``, or ``None``."""
    import torch

    if isinstance(value, torch.Tensor):
        return value if value.is_floating_point() or not floating else None
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else ()
    for item in items:
        found = first_floating(item, floating)
        if found is not None:
            return found
    return None
