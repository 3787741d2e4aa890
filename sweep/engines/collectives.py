"""A ledger of the collectives a copy issues (torch): what ``torch.distributed`` is called
with while the ledger is open, and, for FSDP2, the gradient divide factors its
reduction chose. The engine owns it (``TorchEngine.collectives``): the step opens it
around its forward, backward and optimizer step, never around the tracer's own gathers.

Each call is one entry, ``{"op", "dtype", "numel", "group": [global ranks], "reduce_op",
"step", "span", "params"}`` (``numel``: elements of the tensor sent, the input; ``reduce_op``: ``SUM``,
``AVG``, ``PREMUL_SUM``, ... or ``None`` for a gather or broadcast, the op the call was *given*;
``span``: the part of the step that made it, ``grads``, ``clip`` or ``update``, set by the step's
observer; ``params``: the parameters whose gradients the call carried (names from the root
module; readers drop wrapper segments), where
the engine says (FSDP2: ``foreach_reduce``'s parameters; ``None`` where unknown), or, in the
``update`` span, where the tensor a reduction is given *is* a parameter's gradient (this rank's
local tensor of it, the same memory and size: an engine that reduces gradients by hand before
stepping), that parameter, with ``"params_from": "grad"``). What each
gradient *became* (the op that ran) is judged from the values, not from the call's arguments
(``sweep.train.observers.reductions``, ``sweep.analysis.reductions``). FSDP2's reduction
adds ``{"op": "divide_factors", "predivide", "postdivide", "factor", "reduce_scatter_op",
"all_reduce_op", "all_reduce_group", "step"}`` from
``torch.distributed.fsdp._fully_shard._fsdp_collectives._get_gradient_divide_factors``
(torch 2.13: the factors ``foreach_reduce`` divides by before and after the
reduce-scatter, and the ops it reduces with). The ledger only looks: every call goes
through unchanged. Collectives issued from C++ (DDP's reducer buckets) or through
``torch.distributed._functional_collectives`` (DTensor redistribution) are out of its sight.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

# name -> (position of the tensor sent, its keyword, position of the reduce op or None)
WATCHED = {
    "all_gather_single": (1, "input_tensor", None), "all_gather_into_tensor": (1, "input_tensor", None),
    "_all_gather_base": (1, "input_tensor", None), "all_gather": (1, "tensor", None),
    "reduce_scatter_single": (1, "input", 2), "reduce_scatter_tensor": (1, "input", 2),
    "_reduce_scatter_base": (1, "input", 2), "reduce_scatter": (1, "input_list", 2),
    "all_reduce": (0, "tensor", 1), "broadcast": (0, "tensor", None), "all_to_all_single": (1, "input", None),
}


def op_name(op: Any) -> Optional[str]:
    """``ReduceOp.SUM`` / ``RedOpType.AVG`` / a ``PREMUL_SUM`` op object -> ``"SUM"``, ``"AVG"``, ``"PREMUL_SUM"``."""
    if op is None:
        return None
    text = str(op)
    for name in ("PREMUL_SUM", "AVG", "SUM", "MAX", "MIN", "PRODUCT", "BAND", "BOR", "BXOR"):
        if name in text or name in repr(op):
            return name
    return text


def _functional_ranks(group: Any) -> List[int]:
    """The global ranks of a functional collective's group: a ``ProcessGroup``, a group
    name, a 1-D ``DeviceMesh``, ``(DeviceMesh, dim)`` or a list of ranks
    (``_functional_collectives.RANK_TYPES``); ``[]`` for a form it cannot read."""
    try:
        if isinstance(group, tuple) and len(group) == 2 and hasattr(group[0], "get_group"):
            return _ranks(group[0].get_group(int(group[1])))
        if hasattr(group, "get_group"):
            return _ranks(group.get_group(0))
        if isinstance(group, str):
            from torch.distributed.distributed_c10d import _resolve_process_group

            return _ranks(_resolve_process_group(group))
        if isinstance(group, (list, tuple)) and all(isinstance(r, int) for r in group):
            return [int(r) for r in group]
        return _ranks(group)
    except Exception:  # another torch's forms
        return []


def _ranks(group: Any) -> List[int]:
    import torch.distributed as dist

    try:
        return [int(r) for r in dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)]
    except Exception:  # a group this rank is not in, or another library's
        return []


def _dtype(tensor: Any) -> Optional[str]:
    if isinstance(tensor, (list, tuple)):
        tensor = tensor[0] if tensor else None
    return str(tensor.dtype).replace("torch.", "") if hasattr(tensor, "dtype") else None


def _numel(tensor: Any) -> int:
    if isinstance(tensor, (list, tuple)):
        return sum(int(t.numel()) for t in tensor)
    return int(tensor.numel()) if hasattr(tensor, "numel") else 0


class Ledger:
    """A context that records every watched ``torch.distributed`` call into ``entries``
    (module docstring), tagging each with ``step`` (set :attr:`step` before entering).
    Re-entrant use is not supported; patching is undone on exit."""

    def __init__(self) -> None:
        self.entries: List[Dict[str, Any]] = []
        self.step = 0
        self.span: Optional[str] = None  # the part of the step entered for (grads, clip, update)
        self.carrying: Optional[List[str]] = None  # the parameters the gradient reduction under way carries
        self.grad_owners: Dict[Tuple[int, int], str] = {}  # (data_ptr, numel) of a local gradient -> its parameter
        self._saved: Dict[str, Any] = {}

    def _carrying_now(self, name: str, tensor: Any) -> Tuple[Optional[List[str]], Optional[str]]:
        """``(params, where from)`` of a call: the reduction under way's (the engine says), else
        the parameter whose local gradient a reduction was given (:attr:`grad_owners`, by its memory
        and size), else ``(None, None)``."""
        reduces = name.lstrip("_").startswith(("all_reduce", "reduce"))
        if self.carrying is not None or not self.grad_owners or not reduces or not hasattr(tensor, "data_ptr"):
            return self.carrying, None
        found = self.grad_owners.get((int(tensor.data_ptr()), int(tensor.numel())))
        return ([found], "grad") if found is not None else (None, None)

    def _watch(self, name: str, original: Any, position: int, keyword: str, op_position: Optional[int]) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tensor = kwargs.get(keyword, args[position] if len(args) > position else None)
            op = kwargs.get("op", args[op_position] if op_position is not None and len(args) > op_position
                            else None)
            if op is None and op_position is not None:
                op = "SUM"  # the signature's default
            params, source = self._carrying_now(name, tensor)
            self.entries.append({"op": name.lstrip("_"), "dtype": _dtype(tensor), "numel": _numel(tensor),
                                 "group": _ranks(kwargs.get("group")), "reduce_op": op_name(op), "step": self.step,
                                 "span": self.span, "params": params, **({"params_from": source} if source else {})})
            return original(*args, **kwargs)

        return wrapper

    def _watch_functional(self, original: Any) -> Any:
        """``_functional_collectives.all_reduce(self, reduceOp, group, tag="")``, recorded as an
        ``all_reduce`` with ``"functional": True``."""
        def wrapper(tensor: Any, reduceOp: Any = "sum", group: Any = None, *args: Any, **kwargs: Any) -> Any:
            self.entries.append({"op": "all_reduce", "dtype": _dtype(tensor), "numel": _numel(tensor),
                                 "group": _functional_ranks(group), "reduce_op": str(reduceOp).upper(),
                                 "step": self.step, "span": self.span, "functional": True})
            return original(tensor, reduceOp, group, *args, **kwargs)

        return wrapper

    def extra_patches(self) -> Dict[Any, Dict[str, Any]]:
        """``{module: {attribute: wrapper factory}}`` an engine adds (:class:`FSDP2Ledger`)."""
        return {}

    def __enter__(self) -> "Ledger":
        import torch.distributed as dist

        for name, (position, keyword, op_position) in WATCHED.items():
            if hasattr(dist, name):
                self._saved[("dist", name)] = (dist, getattr(dist, name))
                setattr(dist, name, self._watch(name, getattr(dist, name), position, keyword, op_position))
        try:
            import torch.distributed._functional_collectives as funcol
        except ImportError:
            funcol = None
        if funcol is not None and hasattr(funcol, "all_reduce"):
            self._saved[(funcol.__name__, "all_reduce")] = (funcol, funcol.all_reduce)
            funcol.all_reduce = self._watch_functional(funcol.all_reduce)
        for module, patches in self.extra_patches().items():
            for attr, factory in patches.items():
                if hasattr(module, attr):
                    self._saved[(module.__name__, attr)] = (module, getattr(module, attr))
                    setattr(module, attr, factory(getattr(module, attr)))
        return self

    def __exit__(self, *exc: Any) -> None:
        for (_, attr), (module, original) in self._saved.items():
            setattr(module, attr, original)
        self._saved = {}


class FSDP2Ledger(Ledger):
    """:class:`Ledger` plus FSDP2's gradient divide factors (module docstring)."""

    def extra_patches(self) -> Dict[Any, Dict[str, Any]]:
        try:
            from torch.distributed.fsdp._fully_shard import _fsdp_collectives as fc
        except ImportError:  # another torch layout: the calls are still recorded
            return {}

        def factory(original: Any) -> Any:
            def wrapper(reduce_scatter_group: Any, all_reduce_group: Any, reduce_dtype: Any, device_type: str = "",
                        factor: Any = None, force_sum_reduction_for_comms: bool = False) -> Any:
                out = original(reduce_scatter_group, all_reduce_group, reduce_dtype, device_type, factor,
                               force_sum_reduction_for_comms)
                pre, post, rs_op, ar_op = out
                self.entries.append({
                    "op": "divide_factors", "predivide": pre, "postdivide": post,
                    "factor": None if factor is None else float(factor),
                    "reduce_scatter_op": op_name(rs_op), "all_reduce_op": op_name(ar_op),
                    "reduce_scatter_group": _ranks(reduce_scatter_group) if reduce_scatter_group is not None else [],
                    "all_reduce_group": _ranks(all_reduce_group) if all_reduce_group is not None else [],
                    "dtype": _dtype_name(reduce_dtype), "step": self.step, "span": self.span})
                return out

            return wrapper

        def carry(original: Any) -> Any:
            def wrapper(fsdp_params: Any, *args: Any, **kwargs: Any) -> Any:
                outer, self.carrying = self.carrying, [fqn_name(p) for p in fsdp_params]
                try:
                    return original(fsdp_params, *args, **kwargs)
                finally:
                    self.carrying = outer

            return wrapper

        patches: Dict[Any, Dict[str, Any]] = {fc: {"_get_gradient_divide_factors": factory}}
        group = _fsdp_param_group()
        if group is not None:
            patches[group] = {"foreach_reduce": carry}
        return patches


def _fsdp_param_group() -> Any:
    """torch's ``_fsdp_param_group`` module (which calls ``foreach_reduce`` by the name it
    imported), or ``None`` on a torch without it."""
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group
    except ImportError:
        return None
    return _fsdp_param_group if hasattr(_fsdp_param_group, "foreach_reduce") else None


def local_grads(model: Any) -> Dict[Tuple[int, int], str]:
    """``{(data_ptr, numel): parameter name}`` of ``model``'s gradients as this rank holds them
    (a ``DTensor``'s local tensor), for :attr:`Ledger.grad_owners`; empty tensors left out."""
    out: Dict[Tuple[int, int], str] = {}
    for name, param in model.named_parameters():
        grad = getattr(param, "grad", None)
        if grad is None:
            continue
        local = grad.to_local() if hasattr(grad, "to_local") else grad
        if local.numel():
            out[(int(local.data_ptr()), int(local.numel()))] = name
    return out


def fqn_name(fsdp_param: Any) -> str:
    """An ``FSDPParam``'s name from the root module (``_param_fqn``; readers drop wrapper
    segments: ``sweep.analysis.trace.canonical_name``)."""
    return str(getattr(fsdp_param, "_param_fqn", None) or "?")


class LocalGrads:
    """A context that keeps each parameter's *local* gradient, the one this rank computed
    before any reduction (``grads``: name as ``named_parameters`` gives it -> float32 tensor, summed over the
    micro-batches of a step). This base class hooks the parameters themselves
    (``Tensor.register_hook``, which runs before the gradient is accumulated, hence before
    DDP's reducer, a post-accumulate hook, sees it): a plain module or DDP. Engines whose
    autograd runs on other tensors than the registered parameters (FSDP2's unsharded ones)
    override it (:class:`FSDP2LocalGrads`). It only looks: hooks return ``None``."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.grads: Dict[str, Any] = {}
        self._handles: List[Any] = []

    def keep(self, name: str, grad: Any) -> None:
        """Add ``grad`` (a local gradient) to ``name``'s, as float32 on the host."""
        import torch

        value = grad.detach().to("cpu", torch.float32, copy=True)
        self.grads[name] = self.grads[name] + value if name in self.grads else value

    def __enter__(self) -> "LocalGrads":
        self.grads = {}
        for name, param in self.model.named_parameters():
            if param.requires_grad:
                self._handles.append(param.register_hook(lambda grad, name=name: self.keep(name, grad)))
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def squared_norm(tensor: Any) -> float:
    """The squared norm of a plain (local) ``tensor``: accumulated in float32 (a float64
    tensor's in float64), taken again in float64 where float32 overflows, squared in Python's
    float64; the gradient observer's every norm (``sweep.train.observers.reductions._norm_sq``
    says why float32). ``torch.linalg.vector_norm`` reads the tensor, it writes nothing."""
    import math

    import torch

    if not tensor.numel():
        return 0.0
    wide = torch.float64 if tensor.dtype == torch.float64 else torch.float32
    with torch.no_grad():
        norm = float(torch.linalg.vector_norm(tensor, dtype=wide))
        if math.isinf(norm) and wide != torch.float64:
            norm = float(torch.linalg.vector_norm(tensor, dtype=torch.float64))
    return norm ** 2


class FSDP2LocalGrads(LocalGrads):
    """:class:`LocalGrads` of FSDP2: the unsharded gradients ``foreach_reduce`` receives
    (after gradient accumulation with sync off: the micro-batches' sum), by ``FSDPParam``
    name, taken as the call starts (``_fsdp_param_group.foreach_reduce``, patched while entered).
    With sync on between micro-batches (one call per micro-batch) the step's calls are summed:
    this rank's gradient of the step, as the standalone copy's accumulates.
    With :attr:`values` false (a step whose reduction is not checked: the observer needs only
    the norms) each gradient's squared norm goes to ``squares`` instead, computed on the
    gradient as it stands (the same float32 values the copy would hold, no copy)."""

    values = True  # keep the gradients themselves; False: only each one's squared norm (``squares``)

    def __enter__(self) -> "FSDP2LocalGrads":
        self.grads, self.squares = {}, {}
        module = _fsdp_param_group()
        if module is None:
            return self
        original = module.foreach_reduce

        def wrapper(fsdp_params: Any, unsharded_grads: Any, *args: Any, **kwargs: Any) -> Any:
            for param, grad in zip(fsdp_params, unsharded_grads):
                name = fqn_name(param)
                if self.values:  # sync on every micro-batch: one call each, this rank's gradient is their sum
                    got = grad.detach().float().clone().cpu()
                    self.grads[name] = got if name not in self.grads else self.grads[name] + got
                elif name in self.squares:  # (the sum's norm is not the norms': not known without the values)
                    self.squares[name] = float("nan")
                else:  # (a copy of every local gradient a step, read once for its norm: the norm alone)
                    self.squares[name] = squared_norm(grad.detach().float())
            return original(fsdp_params, unsharded_grads, *args, **kwargs)

        self._saved = (module, original)
        module.foreach_reduce = wrapper
        return self

    def __exit__(self, *exc: Any) -> None:
        saved = getattr(self, "_saved", None)
        if saved is not None:
            saved[0].foreach_reduce = saved[1]
            self._saved = None


def _dtype_name(dtype: Any) -> Optional[str]:
    return None if dtype is None else str(dtype).replace("torch.", "")
