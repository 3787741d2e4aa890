"""The dtypes that actually ran in step 0 (``RankResult.dtypes_observed``, held against the
configured ``mp_policy`` by ``sweep.run.judge``).

Keys: ``param_forward`` (the weight the first module with one saw in its forward),
``output`` (the model output), ``reduce`` (the dtype of the first gradient reduction),
``grad`` (the gradient the optimizer reads), ``master`` (this rank's stored parameter after
the step: the master weights) and ``optimizer_state`` (the optimizer's first state tensor
after the step: Adam's ``exp_avg`` / ``moment1``, SGD's momentum; ``None`` for plain SGD).
Per module and per parameter, as they ran (issue 51): ``modules`` (every module's first
forward of step 0 in execution order, ``{"module", "params": its own parameters' dtype as
its forward saw them, "input", "output", "grad_output": the dtype of its output's gradient}``),
``grads`` (each parameter's gradient as the optimizer reads it, by name; MindSpore's modules
have no ``grad_output``: its Cell backward hooks are the module trace's), and ``master_lower``
(``{"step", "params", "holds"}``: the first step after which some float32 master weights hold
only values a lower precision represents, a lower-precision copy written back; ``None``).
"""

from __future__ import annotations

import numpy as np

from typing import Any, Callable, ContextManager, Dict, List, Optional, Tuple

from sweep.train.observers.base import Observer, Step
from sweep.train.observers.ledger import CollectiveLedger


def torch_dtype(tensor: Any) -> Optional[str]:
    """``torch.bfloat16`` -> ``"bfloat16"``; a ``DTensor`` gives its local shard's; ``None``
    for ``None``."""
    if tensor is None:
        return None
    tensor = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return str(tensor.dtype).replace("torch.", "")


def first_weighted(model: Any) -> Any:
    """The first sub-module (in ``named_modules`` order) with a ``weight`` parameter.

    Raises:
        ValueError: the model has none.
    """
    import torch

    for _, module in model.named_modules():
        if isinstance(getattr(module, "weight", None), torch.Tensor):
            return module
    raise ValueError("the model has no module with a weight parameter")


def override_targets(model: Any, cfg: Any) -> Dict[str, Tuple[str, Dict[str, Any]]]:
    """The modules ``mp_policy.overrides`` asks a policy of, found on ``model`` as it runs
    (sharded, checkpoint-wrapped or not): ``{canonical module name: (override key, merged
    policy as plain values)}``. A key names a module by its canonical name
    (``sweep.analysis.trace.canonical_name``: wrapper segments dropped) or a module class,
    matched along each module's class hierarchy (``fully_shard`` swaps a module's class for
    a subclass ``FSDP<class>``); of several modules under one canonical name (a wrapper and
    the module it wraps) the innermost. Keys that match nothing are left out (the engine's
    ``sweep.engines.wrapping.units`` refuses them first)."""
    from omegaconf import OmegaConf

    from sweep.analysis.trace import canonical_name
    from sweep.engines.wrapping import POLICY_KEYS, policy_for

    overrides = dict(cfg.mp_policy.get("overrides") or {})
    if not overrides:
        return {}
    found: Dict[str, Tuple[str, Dict[str, Any]]] = {}
    for name, module in model.named_modules():
        canonical = canonical_name(name)
        if not canonical:
            continue
        classes = {c.__name__ for c in type(module).__mro__}
        for key, override in overrides.items():
            if key == canonical or key in classes:
                merged = OmegaConf.to_container(policy_for(cfg.mp_policy, override), resolve=True)
                found[canonical] = (str(key), {k: merged.get(k) for k in POLICY_KEYS})
    return found


MASTER_MIN_ELEMENTS = 8  # a tensor of fewer elements may hold bfloat16-exact values by chance (2^-16 each)
# A float32 that float16 or bfloat16 represents exactly has its 13 lowest mantissa bits zero (float16
# keeps 10 of float32's 23 mantissa bits, bfloat16 7; float16's subnormals are float32 normals with
# more zeros still): a tensor with any of them set holds neither, which one test tells, every step.
LOW_BITS = 0x1FFF
PREFIX = 4096  # elements :class:`_Lower` tests first: one of them with low bits set decides it


def lower_precision(values: np.ndarray) -> Optional[str]:
    """``"bfloat16"`` or ``"float16"`` when every value of a float32 array (at least
    :data:`MASTER_MIN_ELEMENTS`, not all zero) is exactly one of that dtype (bfloat16: the low 16
    bits of each float32 are zero; float16: the value survives a round trip), else ``None``.
    A float32 tensor an optimizer steps holds such values only if a lower-precision copy was
    written back into it."""
    flat = np.ascontiguousarray(values, np.float32).ravel()
    if flat.size < MASTER_MIN_ELEMENTS or np.any(flat.view(np.uint32) & np.uint32(LOW_BITS)):
        return None  # (the common case, in one test: see LOW_BITS)
    if not np.any(flat) or not np.all(np.isfinite(flat)):
        return None
    if not np.any(flat.view(np.uint32) & np.uint32(0xFFFF)):
        return "bfloat16"
    if np.array_equal(flat.astype(np.float16).astype(np.float32), flat):
        return "float16"
    return None


class _MasterWatch:
    """The first step after which float32 master weights changed and hold only lower-precision
    values (:func:`lower_precision`), into ``observed["master_lower"]``."""

    observed: Dict[str, Any]

    def watch_master(self, step_index: int, params: Dict[str, Any]) -> None:
        """``params``: each float32 master tensor's summary (``_Lower``: ``holds`` and ``sum``,
        a checksum of its bits) after step ``step_index``."""
        before = getattr(self, "_master_before", {})
        if self.observed.get("master_lower") is None:
            hits = {}
            for name, now in params.items():
                if name in before and now.holds and (before[name].holds is None or before[name].sum != now.sum):
                    hits[name] = now.holds  # changed by the step, and only lower-precision values
            if hits:
                self.observed["master_lower"] = {"step": step_index, "params": sorted(hits),
                                                 "holds": sorted(set(hits.values()))[0]}
        self._master_before = params


class TorchDtypes(_MasterWatch, Observer):
    """Step 0's dtypes (module docstring) of a torch copy into :attr:`observed`.

    ``begin_step``: a forward pre-hook on :func:`first_weighted` (``param_forward``);
    ``after_forward``: ``output`` (the last micro-batch's); ``after_backward``: ``grad`` and
    ``reduce``, the first ``reduce_scatter``/``all_reduce`` of ``ledger``'s step-0 entries
    (the copy's ``CollectiveLedger``, which watches step 0 whatever its ``until``);
    ``after_step``: ``master`` and ``optimizer_state``. With ``targets``, also the dtypes
    each module named by ``mp_policy.overrides`` ran (``overrides``)."""

    def __init__(self, ledger: CollectiveLedger, targets: Optional[Callable[[Any], Dict[str, Any]]] = None) -> None:
        self.observed: Dict[str, Any] = {}
        self.ledger = ledger
        self.targets = targets  # a callable of the model: override_targets
        self._handle: Any = None
        self._override_handles: list = []

    def begin_step(self, step: Step) -> None:
        if step.index == 0:
            self._master_before = _torch_master(step.copy.model)
        if step.index != 0:
            return

        def record(module: Any, args: Any) -> None:  # a pre-hook's return value replaces the input
            self.observed.setdefault("param_forward", torch_dtype(module.weight))

        self._handle = first_weighted(step.copy.model).register_forward_pre_hook(record)
        if self.targets is not None:
            self._watch_overrides(step.copy.model)
        self._watch_modules(step.copy.model)

    def _watch_modules(self, model: Any) -> None:
        """``observed["modules"]``: every module's first forward of step 0 (module docstring),
        by canonical name (a wrapper and the module it wraps share one: the innermost's
        forward is the one that computes), hooks taken off after the backward."""
        from sweep.analysis.trace import canonical_name
        from sweep.train.torch_tensors import first_floating

        seen: Dict[str, Dict[str, Any]] = {}
        self.observed["modules"] = []

        def after(name: str) -> Any:
            def hook(module: Any, args: Any, out: Any) -> None:
                if name in seen:
                    return None
                params = [p for p in module.parameters(recurse=False)]
                output = first_floating(out)
                entry = {"module": name, "params": torch_dtype(params[0]) if params else None,
                         "input": torch_dtype(first_floating(args)), "output": torch_dtype(output),
                         "grad_output": None}
                seen[name] = entry
                self.observed["modules"].append(entry)
                if output is not None and output.requires_grad:
                    def on_grad(grad: Any, entry: Dict[str, Any] = entry) -> None:
                        entry["grad_output"] = entry["grad_output"] or torch_dtype(grad)
                    output.register_hook(on_grad)
                return None
            return hook

        for name, module in model.named_modules():
            self._override_handles.append(module.register_forward_hook(after(canonical_name(name) or "(model)")))

    def _watch_overrides(self, model: Any) -> None:
        """``observed["overrides"]``: for each module ``mp_policy.overrides`` names
        (``self.targets(model)``), the dtypes its first forward ran: ``{name: {"key", "want":
        merged policy, "param": its first parameter as the forward saw it (after
        ``fully_shard``'s pre-forward all-gather and cast, whose hook runs first), "input":
        the first floating input, "output": the first floating output}}``."""
        from sweep.analysis.trace import canonical_name
        from sweep.train.torch_tensors import first_floating

        seen: Dict[str, Dict[str, Any]] = {}
        self.observed["overrides"] = seen
        by_canonical = {canonical_name(n): m for n, m in model.named_modules() if n}  # the innermost: last wins
        for name, (key, want) in self.targets(model).items():
            module = by_canonical.get(name)
            params = list(module.parameters()) if module is not None else []
            if not params:
                continue
            entry = seen.setdefault(name, {"key": key, "want": want})

            def before(mod: Any, args: Any, entry: Dict[str, Any] = entry) -> None:
                if "param" not in entry:
                    entry["param"] = torch_dtype(next(mod.parameters()))
                    entry["input"] = torch_dtype(first_floating(args))

            def after(mod: Any, args: Any, out: Any, entry: Dict[str, Any] = entry) -> None:
                entry.setdefault("output", torch_dtype(first_floating(out)))

            self._override_handles += [module.register_forward_pre_hook(before), module.register_forward_hook(after)]

    def after_forward(self, step: Step, output: Any) -> None:
        if step.index == 0:
            from sweep.train.torch_tensors import first_floating

            self.observed["output"] = torch_dtype(first_floating(output))

    def after_backward(self, step: Step) -> None:
        if step.index != 0:
            return
        self._handle.remove()
        for handle in self._override_handles:
            handle.remove()
        self._override_handles = []
        self.observed["grad"] = torch_dtype(next(step.copy.model.parameters()).grad)
        from sweep.analysis.trace import canonical_name

        self.observed["grads"] = {canonical_name(n): torch_dtype(p.grad) for n, p in step.copy.model.named_parameters()
                                  if p.grad is not None}
        reduced = [e for e in self.ledger.current.entries if e["op"].startswith(("reduce_scatter", "all_reduce"))]
        self.observed.setdefault("reduce", reduced[0]["dtype"] if reduced else None)

    def after_step(self, step: Step) -> None:
        model = step.copy.model
        if getattr(self, "_named", (None,))[0] is not model or not _same_params(model, self._named[1]):
            self._named = (model, _trainable(model))
        self.watch_master(step.index, _torch_master(step.copy.model, self._named[1]))
        if step.index != 0:
            return
        self.observed.setdefault("master_lower", None)
        self.observed["master"] = torch_dtype(next(step.copy.model.parameters()).detach())
        state = [v for s in step.copy.optimizer.state.values() for v in s.values()
                 if hasattr(v, "dtype") and getattr(v, "dim", lambda: 0)() > 0]
        self.observed["optimizer_state"] = torch_dtype(state[0]) if state else None


class _Lower:
    """A float32 tensor's summary for :class:`_MasterWatch`, read in place with torch ops (no
    copy of the weights each step): which lower precision represents every value (``holds``,
    :func:`lower_precision`'s rule) and a checksum of its bits (``sum``), to tell a tensor the
    step changed from one it left alone."""

    def __init__(self, tensor: Any) -> None:
        import torch

        bits = tensor.view(torch.int32).reshape(-1)
        self.sum, self.holds = None, None
        if tensor.numel() < MASTER_MIN_ELEMENTS or bool((bits[:PREFIX] & LOW_BITS).any()) \
                or bool((bits & LOW_BITS).any()):
            return  # neither bfloat16 nor float16 values (:data:`LOW_BITS`): the common case, told by
            # the first PREFIX elements mostly (the whole tensor's test reads every element, 30 ms per 4.7M)
        if not bool((bits & 0xFFFF).any()):
            self.holds = "bfloat16"
        elif bool(tensor.to(torch.float16).to(torch.float32).eq(tensor).all()):
            self.holds = "float16"
        if self.holds and not (bool(tensor.ne(0).any()) and bool(torch.isfinite(tensor).all())):
            self.holds = None  # all zeros (or not finite): nothing a precision says
        if self.holds:  # (only then: is it the same tensor as before?)
            self.sum = int(bits.to(torch.int64).sum())


def _torch_master(model: Any, named: Optional[List[Tuple[str, Any]]] = None) -> Dict[str, Any]:
    """Each trainable parameter's local part as stored (the master weights), float32 ones only,
    as :class:`_Lower` summaries; ``named``: :func:`_trainable` of ``model``, where the caller
    keeps it across steps."""
    import torch

    from sweep.train.torch_tensors import local_part

    out = {}
    for name, param in (named if named is not None else _trainable(model)):
        local = local_part(param).detach()
        if local.dtype == torch.float32:
            out[name] = _Lower(local)
    return out


def _same_params(model: Any, named: List[Tuple[str, Any]]) -> bool:
    """Whether ``named`` (:func:`_trainable`) still holds ``model``'s trainable parameters (an
    engine may swap the ones it registers)."""
    now = [p for p in model.parameters() if p.requires_grad]
    return len(now) == len(named) and all(a is b for a, (_, b) in zip(now, named))


def _trainable(model: Any) -> List[Tuple[str, Any]]:
    """``[(canonical name, parameter)]`` of ``model``'s trainable parameters (engines keep their
    parameter objects across steps, so an observer names them once)."""
    from sweep.analysis.trace import canonical_name

    return [(canonical_name(n), p) for n, p in model.named_parameters() if p.requires_grad]


def _ms_dtype(tensor: Any) -> Optional[str]:
    return None if tensor is None else str(tensor.dtype).lower()


class MindSporeDtypes(_MasterWatch, Observer):
    """Step 0's dtypes (module docstring) of a MindSpore copy into :attr:`observed`.

    ``after_forward``: ``param_forward`` (the first trainable ``*weight``) and ``output``,
    read inside ``value_and_grad``'s forward function (PYNATIVE mode runs it as Python);
    ``span("grads")``: the engine's ``observe_reduce`` (``reduce``, and the engine's
    ``ledger`` of hyper-parallel's platform collectives); ``after_backward``: ``grad`` (the
    summed local gradient, before the reduction); ``after_step``: ``master`` and
    ``optimizer_state`` (Adam's ``moment1``, SGD's ``moments``)."""

    def __init__(self) -> None:
        self.observed: Dict[str, Any] = {}
        self._handles: list = []

    def begin_step(self, step: Step) -> None:
        if step.index == 0:
            self._master_before = _ms_master(step.copy.model)
            self._watch_cells(step.copy.model)

    def _watch_cells(self, net: Any) -> None:
        """``observed["modules"]``: every Cell's first forward of step 0, by name (the root:
        ``(model)``): its own parameters' dtype, its first tensor input's and its first floating
        output's (``Cell.register_forward_hook``, PYNATIVE mode; hooks return ``None``)."""
        from sweep.train.observers.module_trace import _mindspore_first

        self.observed["modules"] = []
        seen = set()

        def hook_for(name: str) -> Any:
            def hook(cell: Any, args: Any, output: Any) -> None:
                if name in seen:
                    return None
                seen.add(name)
                params = [p for _, p in cell.parameters_and_names(expand=False)]
                self.observed["modules"].append({"module": name, "params": _ms_dtype(params[0]) if params else None,
                                                 "input": _ms_dtype(_mindspore_first(args)),
                                                 "output": _ms_dtype(_mindspore_first(output))})
                return None
            return hook

        for name, cell in net.cells_and_names():
            self._handles.append(cell.register_forward_hook(hook_for(name or "(model)")))

    def after_forward(self, step: Step, output: Any) -> None:
        if "output" not in self.observed:
            first = next(p for p in step.copy.model.trainable_params() if p.name.endswith("weight"))
            self.observed["param_forward"] = str(first.dtype).lower()
            self.observed["output"] = str(output.dtype).lower()

    def span(self, step: Step, name: str) -> Optional[ContextManager[Any]]:
        return step.copy.engine.observe_reduce(self.observed) if name == "grads" and step.index == 0 else None

    def after_backward(self, step: Step) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if "grad" not in self.observed:
            self.observed["grad"] = str(step.local_grads[0].dtype).lower()

    def before_optimizer(self, step: Step) -> None:
        if "grads" not in self.observed:
            names = [p.name for p in step.copy.optimizer.parameters]
            self.observed["grads"] = {n: _ms_dtype(g) for n, g in zip(names, step.grads)}

    def after_step(self, step: Step) -> None:
        self.watch_master(step.index, _ms_master(step.copy.model))
        self.observed.setdefault("master_lower", None)
        if "master" not in self.observed:
            optimizer = step.copy.optimizer
            self.observed["master"] = str(step.copy.model.trainable_params()[0].dtype).lower()
            moments = getattr(optimizer, "moment1", None) or getattr(optimizer, "moments", None)
            self.observed["optimizer_state"] = str(moments[0].dtype).lower() if moments else None


class _NumpyLower:
    """:class:`_Lower` of a float32 ndarray (MindSpore's values, read with ``asnumpy``)."""

    def __init__(self, values: np.ndarray) -> None:
        flat = np.ascontiguousarray(values, np.float32).ravel()
        self.holds = lower_precision(flat)
        self.sum = int(flat.view(np.int32).astype(np.int64).sum()) if self.holds else None


def _ms_master(net: Any) -> Dict[str, Any]:
    """Each trainable parameter of a MindSpore ``net`` as stored (its local part), float32 ones
    only, as :class:`_NumpyLower` summaries."""
    out = {}
    for param in net.trainable_params():
        values = param.asnumpy()
        if values.dtype == np.float32:
            out[param.name] = _NumpyLower(values)
    return out
