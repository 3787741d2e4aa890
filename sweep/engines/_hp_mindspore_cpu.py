"""hyper-parallel's MindSpore platform on CPU: the two collectives MindSpore lacks there,
computed exactly from all-reduce, substituted at hyper-parallel's platform layer.

Facts (MindSpore 2.10 on CPU with mccl): no kernel for
reduce-scatter or all-gather-into-tensor in any API (``ops.ReduceScatter``,
``comm_func.reduce_scatter_tensor``, ``comm_func.all_gather_into_tensor``,
``mint.distributed.*_tensor``); ``mint.distributed.all_reduce`` works on the world
group and on sub-groups; ``ops.AllGather`` on the world group only. All of
hyper-parallel's collectives go through static methods of ``MindSporePlatform``
(hyper_parallel/platform/mindspore/platform.py), e.g.
``all_gather_into_tensor(data, group_info, async_op=False) -> (output, handle)``
with ``group_info.group_name`` / ``group_info.rank_size``.

Substitutes (same signature and return value; ``data`` is a Tensor of shape
``(d0, ...)``, any dtype ``ops.AllReduce`` accepts on CPU; ``ops.AllReduce`` and
``mint.distributed.all_reduce`` work on the world group and on sub-groups there):

* all-gather: a zero buffer of shape ``(n * d0, ...)`` holding ``data`` at rows
  ``[r * d0, (r + 1) * d0)`` (``r`` = this rank's index in the group), all-reduced
  (sum, ``ops.AllReduce``, out of place). Every element is one rank's value plus zeros: exact.
* reduce-scatter (sum): ``data`` (shape ``(n * c, ...)``) all-reduced, then
  rows ``[r * c, (r + 1) * c)``. The same sum as a reduce-scatter computes, in the
  all-reduce's summation order.

The zero buffer is ``ops.zeros(shape, dtype)``, never ``ops.zeros_like(param)``:
measured on MindSpore 2.10 CPU (one process, no hyper-parallel), after
``ops.zeros_like(p)`` on a Parameter ``p`` and ``p._update_data(t)`` to another shape
(hyper-parallel swaps shard and gathered tensor that way), ``ops.BiasAdd`` still infers
with the old shape ("bias[0] shape should be equal to input_x[1] shape") while
``ops.shape``/``asnumpy`` see the new one; ``ops.concat``, ``copy``, ``*`` do not pin it.

They are blocking: ``async_op=True`` returns a handle whose ``wait()`` is a no-op.
Nothing is substituted on NPUs: the engine calls :func:`install_cpu_collectives` only
for ``device=cpu``. ``mindspore`` and hyper-parallel are imported lazily.
"""

from __future__ import annotations

from typing import Any, List, Tuple

EMULATED = (
    "all_gather_into_tensor = all_reduce(sum) of a zero buffer holding the local shard at this rank's offset",
    "reduce_scatter_tensor = all_reduce(sum), then this rank's chunk along dim 0",
)


class _Done:
    """The handle of a collective that has already completed."""

    def wait(self) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def _group(group_info: Any) -> Tuple[str, int, int]:
    """``(group_name, rank_size, this rank's index in the group)`` of a hyper-parallel
    ``GroupInfo`` (or a group name)."""
    from mindspore.communication import get_group_size, get_rank

    name = group_info if isinstance(group_info, str) else group_info.group_name
    size = get_group_size(name) if isinstance(group_info, str) else int(group_info.rank_size)
    return name, size, get_rank(name)


_ALL_REDUCE: dict = {}
CALLS = {"all_gather_into_tensor": 0, "reduce_scatter_tensor": 0}  # substitute calls in this process


def _all_reduce(data: Any, name: str) -> Any:
    """Out-of-place sum over group ``name`` (``ops.AllReduce``, which has CPU kernels on the
    world group and on sub-groups); a new Tensor, ``data`` unchanged."""
    from mindspore import ops

    if name not in _ALL_REDUCE:
        _ALL_REDUCE[name] = ops.AllReduce(ops.ReduceOp.SUM, group=name)
    return _ALL_REDUCE[name](data)


def all_gather_into_tensor(data: Any, group_info: Any, async_op: bool = False) -> Tuple[Any, Any]:
    """Rank-order concatenation along dim 0 of every group member's ``data``; shape
    ``(n * d0, ...)``, dtype of ``data``. Returns ``(output, handle)``."""
    from mindspore import ops

    CALLS["all_gather_into_tensor"] += 1
    name, size, index = _group(group_info)
    # ops.zeros(shape, dtype), not zeros_like(data): mint.zeros_like has no CPU kernel, and ops.zeros_like on a
    # Parameter pins the shard's shape in MindSpore's PyNative abstract cache (module docstring)
    zeros = ops.zeros(tuple(data.shape), data.dtype)
    parts: List[Any] = [data if i == index else zeros for i in range(size)]
    buffer = ops.concat(parts, axis=0) if size > 1 else data
    return _all_reduce(buffer, name), (_Done() if async_op else None)


def reduce_scatter_tensor(data: Any, group_info: Any, async_op: bool = False) -> Tuple[Any, Any]:
    """Sum over the group of ``data`` (shape ``(n * c, ...)``), this rank's rows
    ``[r * c, (r + 1) * c)``; shape ``(c, ...)``. Returns ``(output, handle)``.

    Raises:
        ValueError: dim 0 of ``data`` is not a multiple of the group size.
    """
    CALLS["reduce_scatter_tensor"] += 1
    name, size, index = _group(group_info)
    rows = int(data.shape[0])
    if rows % size:
        raise ValueError(f"reduce_scatter_tensor: dim 0 ({rows}) is not a multiple of the group size {size}")
    buffer = _all_reduce(data, name)
    chunk = rows // size
    return buffer[index * chunk:(index + 1) * chunk].copy(), (_Done() if async_op else None)


def install_cpu_collectives() -> List[str]:
    """Replace ``MindSporePlatform.all_gather_into_tensor`` and ``reduce_scatter_tensor``
    (static methods) with the substitutes above for the rest of the process (a rank
    parallelises one job's copy at a time; installing again is a no-op). Other
    collectives (``all_reduce``, ``broadcast``) stay hyper-parallel's own.

    Returns:
        The descriptions of what is emulated (:data:`EMULATED`), for the rank result.
    """
    from hyper_parallel.platform.mindspore.platform import MindSporePlatform

    MindSporePlatform.all_gather_into_tensor = staticmethod(all_gather_into_tensor)
    MindSporePlatform.reduce_scatter_tensor = staticmethod(reduce_scatter_tensor)
    return list(EMULATED)


def mccl_backend_default() -> str:
    """Make ``MindSporePlatform.init_process_group``'s default backend ``mccl`` instead
    of ``hccl`` (its docstring: "Default is hccl"), for ``init_device_mesh`` on CPU.
    Returns the note to record."""
    from hyper_parallel.platform.mindspore.platform import MindSporePlatform

    original = MindSporePlatform.__dict__["init_process_group"]
    original_fn = getattr(original, "__func__", original)
    if getattr(original_fn, "_sweep_mccl", False):
        return "init_process_group default backend hccl -> mccl (CPU)"

    def init_process_group(backend: Any = None, **kwargs: Any) -> None:
        return original_fn(backend="mccl" if backend in (None, "hccl") else backend, **kwargs)

    init_process_group._sweep_mccl = True  # type: ignore[attr-defined]
    MindSporePlatform.init_process_group = staticmethod(init_process_group)
    return "init_process_group default backend hccl -> mccl (CPU)"


