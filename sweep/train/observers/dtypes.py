"""The dtypes that actually ran in step 0 (``RankResult.dtypes_observed``, held against the
configured ``mp_policy`` by ``sweep.run.judge``).

Keys: ``param_forward`` (the weight the first module with one saw in its forward),
``output`` (the model output), ``reduce`` (the dtype of the first gradient reduction),
``grad`` (the gradient the optimizer reads), ``master`` (this rank's stored parameter after
the step: the master weights) and ``optimizer_state`` (the optimizer's first state tensor
after the step: Adam's ``exp_avg`` / ``moment1``, SGD's momentum; ``None`` for plain SGD).
"""

from __future__ import annotations

from typing import Any, Callable, ContextManager, Dict, Optional, Tuple

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


class TorchDtypes(Observer):
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
        if step.index != 0:
            return

        def record(module: Any, args: Any) -> None:  # a pre-hook's return value replaces the input
            self.observed.setdefault("param_forward", torch_dtype(module.weight))

        self._handle = first_weighted(step.copy.model).register_forward_pre_hook(record)
        if self.targets is not None:
            self._watch_overrides(step.copy.model)

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
        reduced = [e for e in self.ledger.current.entries if e["op"].startswith(("reduce_scatter", "all_reduce"))]
        self.observed.setdefault("reduce", reduced[0]["dtype"] if reduced else None)

    def after_step(self, step: Step) -> None:
        if step.index != 0:
            return
        self.observed["master"] = torch_dtype(next(step.copy.model.parameters()).detach())
        state = [v for s in step.copy.optimizer.state.values() for v in s.values()
                 if hasattr(v, "dtype") and getattr(v, "dim", lambda: 0)() > 0]
        self.observed["optimizer_state"] = torch_dtype(state[0]) if state else None


class MindSporeDtypes(Observer):
    """Step 0's dtypes (module docstring) of a MindSpore copy into :attr:`observed`.

    ``after_forward``: ``param_forward`` (the first trainable ``*weight``) and ``output``,
    read inside ``value_and_grad``'s forward function (PYNATIVE mode runs it as Python);
    ``span("grads")``: the engine's ``observe_reduce`` (``reduce``, and the engine's
    ``ledger`` of hyper-parallel's platform collectives); ``after_backward``: ``grad`` (the
    summed local gradient, before the reduction); ``after_step``: ``master`` and
    ``optimizer_state`` (Adam's ``moment1``, SGD's ``moments``)."""

    def __init__(self) -> None:
        self.observed: Dict[str, Optional[str]] = {}

    def after_forward(self, step: Step, output: Any) -> None:
        if "output" not in self.observed:
            first = next(p for p in step.copy.model.trainable_params() if p.name.endswith("weight"))
            self.observed["param_forward"] = str(first.dtype).lower()
            self.observed["output"] = str(output.dtype).lower()

    def span(self, step: Step, name: str) -> Optional[ContextManager[Any]]:
        return step.copy.engine.observe_reduce(self.observed) if name == "grads" and step.index == 0 else None

    def after_backward(self, step: Step) -> None:
        if "grad" not in self.observed:
            self.observed["grad"] = str(step.local_grads[0].dtype).lower()

    def after_step(self, step: Step) -> None:
        if "master" not in self.observed:
            optimizer = step.copy.optimizer
            self.observed["master"] = str(step.copy.model.trainable_params()[0].dtype).lower()
            moments = getattr(optimizer, "moment1", None) or getattr(optimizer, "moments", None)
            self.observed["optimizer_state"] = str(moments[0].dtype).lower() if moments else None
