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
from sweep.train.activations import offload as activation_offload


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
    digests: Optional[List[str]] = None,
    modules: Optional[Any] = None,
    ledger: Optional[List[Dict[str, Any]]] = None,
    ledger_until: int = 0,
    optimizer_log: Optional[List[Dict[str, Any]]] = None,
    scheduler: Optional[Any] = None,
    lrs: Optional[List[float]] = None,
    offload: bool = False,
) -> List[float]:
    """Train one pass over ``samples`` (per step a pair of tensors, ``(rows, ...)``) with
    the step of the module docstring. Returns the loss of every step (float).

    ``input_dtype``: floating inputs are cast to it (``model.init_dtype``), as the data
    is float32 and a model created in bf16 takes bf16 inputs.

    If ``observed`` is a dict, step 0 fills it with the dtypes that actually ran:
    ``param_forward`` (the weight of the first module that has one, seen by its
    forward), ``output`` (the model output), ``reduce`` (the dtype of the first reduction
    torch.distributed was called with: the engine's ledger, ``engine.collectives()``),
    ``grad`` (the gradient the optimizer reads),
    ``master`` (this rank's stored parameter: the master weights) and
    ``optimizer_state`` (the optimizer's first state tensor after the step, e.g. Adam's
    ``exp_avg``; none for plain SGD).

    If ``trace`` is a list, each step up to ``max(trace_until, weights_until)`` appends
    ``{"buffer": ..., "grad": ..., "weight": ...}`` (:func:`record_tensors`): the buffers
    after the forward (BatchNorm's running statistics), the gradients after the backward
    (and its reduction; up to ``trace_until`` only), the weights after the step; step 0's
    entry also ``"initial"`` and ``"initial_buffer"``, the weights and buffers before it
    (``sweep.analysis.trace``).

    If ``digests`` is a list, each step appends :func:`local_digest` of the weights after
    the step (this rank's local shards; the replica check of ``sweep.run.job``).

    If ``modules`` is a ``sweep.train.torch_observe.ModuleTrace`` (already attached to
    ``model``), each step up to ``trace_until`` is recorded by it, and that step's trace
    entry gets ``"order": {"grad": [...]}``: the parameters in the order autograd produced
    their modules' output gradients (the first tensor by cause, ``sweep.analysis.trace``).
    If ``ledger`` is a list, the collectives of steps 0 to ``ledger_until`` (forward,
    backward, unscale, clipping, optimizer step; not the trace's own gathers) are appended
    to it (``engine.collectives()``, ``sweep.engines.collectives``). If ``optimizer_log``
    is a list, it gets ``optimizer_ran(optimizer)`` after step 0's
    optimizer step: the hyper-parameters the step ran with.

    ``scheduler`` (``sweep.train.schedules.torch_scheduler``) is stepped after each
    optimizer step, and ``lrs`` (a list) gets the lr each step ran with (param group 0).
    ``offload``: forward and backward inside ``sweep.train.activations.offload``
    (``activation_offload``).
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
            trace.append({"initial": record_tensors(model, "weight"),
                          "initial_buffer": record_tensors(model, "buffer")} if i == 0 else {})
        watching = handle is not None or (ledger is not None and i <= ledger_until)
        watch = engine.collectives() if watching else contextlib.nullcontext()
        if watching:
            watch.step = i
        recording = modules is not None and traced and i <= trace_until
        if recording:
            modules.begin_step()
        if input_dtype is not None and x.is_floating_point():
            x = x.to(input_dtype)
        step_loss = 0.0
        with watch:
            for j, (xm, ym) in enumerate(micro_batches(x, y, accum)):
                sync = engine.no_sync(model) if j < accum - 1 else contextlib.nullcontext()
                with sync, activation_offload(offload):
                    with modules if recording else contextlib.nullcontext():
                        out = model(xm)
                    loss = loss_fn(out, ym)
                    scaled = loss if accum == 1 else loss / accum
                    (scaler.scale(scaled) if scaler is not None else scaled).backward()
                step_loss += float(loss.item())
            if scaler is not None:
                scaler.unscale_(optimizer)
        if handle is not None:
            handle.remove()
            observed["output"] = _dtype(first_floating(out))
            observed["grad"] = _dtype(next(model.parameters()).grad)
            reduced = [e for e in watch.entries if e["op"].startswith(("reduce_scatter", "all_reduce"))]
            observed.setdefault("reduce", reduced[0]["dtype"] if reduced else None)
        if traced:
            trace[-1]["buffer"] = record_tensors(model, "buffer")
        if traced and i <= trace_until:
            trace[-1]["grad"] = record_tensors(model, "grad")
            if recording:
                trace[-1]["order"] = {"grad": _grad_order(modules)}
        with watch if watching else contextlib.nullcontext():
            if clip is not None:
                engine.clip_grad_norm(model, float(clip))
            if scaler is not None:
                engine.optimizer_step(optimizer, scaler=scaler)
                scaler.update()
            else:
                engine.optimizer_step(optimizer)
        if optimizer_log is not None and i == 0:  # what step 0 ran with: before the scheduler moves the lr
            optimizer_log.extend(optimizer_ran(optimizer))
        if lrs is not None:
            lrs.append(float(optimizer.param_groups[0]["lr"]))
        if scheduler is not None:
            scheduler.step()
        if watching and ledger is not None and i <= ledger_until:
            ledger.extend(watch.entries)
        if traced:
            trace[-1]["weight"] = record_tensors(model, "weight")
        if digests is not None:
            digests.append(local_digest(model))
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


OPTIMIZER_KEYS = ("lr", "betas", "eps", "weight_decay", "momentum")


def optimizer_ran(optimizer: Any) -> List[Dict[str, Any]]:
    """Each param group's hyper-parameters as ``optimizer`` holds them (``lr``, ``betas``,
    ``eps``, ``weight_decay``, ``momentum``, those it has; a tensor ``lr`` as a float):
    ``[{"group": i, "params": n, key: value}]``, JSON-ready."""
    out = []
    for i, group in enumerate(optimizer.param_groups):
        entry: Dict[str, Any] = {"group": i, "params": len(group.get("params", []))}
        for key in OPTIMIZER_KEYS:
            if key in group:
                value = group[key]
                entry[key] = [float(v) for v in value] if isinstance(value, (tuple, list)) else float(value)
        out.append(entry)
    return out


def _grad_order(modules: Any) -> List[str]:
    """The parameters (canonical names) in the order autograd produced the gradients of
    their modules' outputs in the last recorded step, each module's parameters by name;
    parameters of modules whose output had no gradient follow, by name."""
    by_module: Dict[str, List[str]] = {}
    for param, module in modules.owners.items():
        by_module.setdefault(module, []).append(param)
    ordered = [p for module in modules.grad_order() for p in sorted(by_module.get(module, []))]
    return ordered + sorted(set(modules.owners) - set(ordered))


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
