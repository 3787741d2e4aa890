"""Reading a torch model's tensors without changing them: copies out of live storage, the
tensors by canonical name, digests of the local shards and which shards a rank holds. What
the rank code and the observers (``sweep.train.observers``) read the copies with."""

from __future__ import annotations

from typing import Any, Dict, Iterator, Tuple

import numpy as np


def local_part(tensor: Any) -> Any:
    """``tensor``'s local part: a torch ``DTensor``'s shard read off its ``_local_tensor``
    (``to_local()`` gives the same tensor through an autograd function: a few microseconds a
    call, paid per parameter per step by the observers), another library's ``to_local()``, or
    ``tensor`` itself."""
    local = getattr(tensor, "_local_tensor", None)
    if local is not None:
        return local
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def host_copy(tensor: Any) -> np.ndarray:
    """A float32 numpy array copied out of ``tensor`` (any dtype, any device; a ``DTensor``
    gives its local shard): ``detach().to("cpu", float32, copy=True)``. The copy is the
    point: ``.float()``/``.cpu()`` return the tensor itself for an fp32 CPU tensor, and
    ``.numpy()`` on live storage marks it non-resizable, after which FSDP2's reshard of an
    unsharded parameter raises "Trying to resize storage that is not resizable". Every
    snapshot of a live tensor (trace, ``moved``, digests, step-0 check) goes through here."""
    import torch

    return local_part(tensor).detach().to("cpu", torch.float32, copy=True).numpy()


def named_state(model: Any, kind: str, gather: bool = True) -> Dict[str, Any]:
    """``{canonical name: tensor}`` of ``model``: ``kind="weight"`` its parameters,
    ``"grad"`` their gradients (``None`` ones left out), ``"buffer"`` every buffer
    (persistent or not, ``named_buffers()``). Names go through
    ``sweep.analysis.trace.canonical_name`` (wrapper segments dropped), so both copies
    name a tensor alike. ``gather``: a sharded ``DTensor`` becomes the full tensor
    (``full_tensor()``, a collective every rank makes at the same point); else it stays as
    it is (``host_copy`` takes its local shard)."""
    return dict(iter_state(model, kind, gather))


def iter_state(model: Any, kind: str, gather: bool = True) -> Iterator[Tuple[str, Any]]:
    """:func:`named_state`'s items one at a time: a sharded tensor is gathered only when its
    turn comes, so a caller that drops each one holds one full tensor at a time (every rank
    must read them in the same order: the gathers are collectives)."""
    from sweep.analysis.trace import canonical_name

    items = model.named_buffers() if kind == "buffer" else model.named_parameters()
    for name, tensor in items:
        if kind == "grad":
            tensor = tensor.grad
        if tensor is None:
            continue
        if gather and hasattr(tensor, "full_tensor"):
            tensor = tensor.full_tensor()
        yield canonical_name(name), tensor


def record_tensors(model: Any, kind: str) -> Dict[str, np.ndarray]:
    """Every parameter's gradient (``kind="grad"``) or value (``"weight"``), or every
    buffer (``"buffer"``), as a full float32 numpy array copied out of live storage
    (:func:`host_copy`), by canonical name (:func:`named_state`): a sharded ``DTensor``
    is gathered (``full_tensor()``, a collective every rank makes at the same point)."""
    return {name: host_copy(tensor) for name, tensor in iter_state(model, kind)}


def local_digest(model: Any) -> str:
    """The digest (hex, ``sweep.train.digests``) of this rank's local parameter values, in
    ``named_parameters`` order:
    each parameter's local shard (a ``DTensor``'s ``to_local()``) as float32 bytes,
    copied out of live storage (:func:`host_copy`). Ranks that hold the same shards
    (replicas across an HSDP mesh's replicate dim, or DDP's ranks) must give equal
    digests."""
    from sweep.train.digests import hasher

    digest = hasher()
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


def shard_slices(model: Any) -> Dict[str, Dict[str, Any]]:
    """This rank's dim-0 shard of each parameter of ``model`` that FSDP2 shards on dim 0 over
    one mesh dim of two or more ranks (every other mesh dim replicating it: a ``DTensor``
    placed ``Shard(0)`` and ``Replicate()``), by canonical name: ``{"offset", "rows"`` (its
    first row and row count, ``compute_local_shape_and_global_offset``, ``torch.chunk``'s
    split), ``"total"`` (the whole tensor's rows), ``"shards"``, ``"index"`` (its coordinate
    on that mesh dim), ``"group"`` (that dim's process group)}. Other parameters (plain
    tensors, another library's mesh, other placements) are left out: they are gathered."""
    from sweep.analysis.trace import canonical_name

    try:
        from torch.distributed.tensor import DTensor, Replicate, Shard
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    except ImportError:
        return {}
    out = {}
    for name, param in model.named_parameters():
        if not isinstance(param, DTensor):
            continue
        placements, mesh = param.placements, param.device_mesh
        sharded = [d for d, p in enumerate(placements) if isinstance(p, Shard)]
        if len(sharded) != 1 or placements[sharded[0]].dim != 0 or \
                not all(isinstance(p, (Shard, Replicate)) for p in placements) or mesh.size(sharded[0]) < 2:
            continue
        dim = sharded[0]
        shape, offset = compute_local_shape_and_global_offset(param.shape, mesh, placements)
        out[canonical_name(name)] = {"offset": int(offset[0]), "rows": int(shape[0]), "total": int(param.shape[0]),
                                     "shards": int(mesh.size(dim)), "index": int(mesh.get_local_rank(dim)),
                                     "group": mesh.get_group(dim)}
    return out


def gather_rows(device: Any) -> Any:
    """``gather(group, rows)`` for ``sweep.train.trace_book.TraceBook``: every rank of
    ``group``'s float64 ``rows`` (one shape on every rank), stacked in group-rank order
    (``all_gather_into_tensor``, on ``device``: NCCL gathers device tensors)."""
    import torch
    import torch.distributed as dist

    def gather(group: Any, rows: np.ndarray) -> np.ndarray:
        mine = torch.from_numpy(np.ascontiguousarray(rows, np.float64)).to(device)
        ranks = dist.get_world_size(group)
        out = torch.empty((ranks * mine.shape[0],) + tuple(mine.shape[1:]), dtype=torch.float64, device=device)
        dist.all_gather_into_tensor(out, mine, group=group)  # (concatenated along dim 0: gloo's form)
        return out.cpu().numpy().reshape((ranks,) + tuple(mine.shape))

    return gather
