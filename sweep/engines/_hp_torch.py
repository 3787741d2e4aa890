"""hyper-parallel on torch: the one narrow workaround the adapter applies, and the
pre-launch check of what the installed release cannot run.

Facts (measured with hyper-parallel fdd0a80, torch 2.13,
gloo): ``TorchHSDPParamV2._get_unsharded_param_data``
(hyper_parallel/platform/torch/fully_shard/param.py) all-gathers into
``all_gather_outputs[0]``, the buffer the unsharded parameter views through
``torch.as_strided``. gloo's ``all_gather_into_tensor`` bumps that buffer's autograd
version counter (by ``world_size``). With ``reshard_after_forward=True`` the parameter
is re-gathered for backward after autograd saved it in forward, so backward fails:
"one of the variables needed for gradient computation has been modified by an
inplace operation ... AsStrided, is at version 4; expected version 2". PyTorch's
FSDP2 performs the same write inside ``torch.autograd._unsafe_preserve_version_counter``
(torch/distributed/fsdp/_fully_shard/_fsdp_param.py); this hyper-parallel does not.

Nothing here imports hyper-parallel: it operates on the objects ``fully_shard`` left
on the module (``module.hsdp_scheduler.hsdp_state.hsdp_params``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, List

VERSION_COUNTER_WORKAROUND = (
    "workaround: autograd version counter preserved around hyper-parallel's re-gather -- "
    "TorchHSDPParamV2._get_unsharded_param_data (all_gather_into_tensor into the buffer the unsharded "
    "parameter views) runs inside torch.autograd._unsafe_preserve_version_counter, as PyTorch FSDP2 does; "
    "without it backward fails on gloo with 'modified by an inplace operation' (a library fault in this "
    "release, not hyper-parallel's behaviour)"
)


def hsdp_params(module: Any) -> List[Any]:
    """The hyper-parallel parameter objects (``TorchHSDPParamV2``) of every submodule
    ``fully_shard`` was applied to; ``[]`` if none (another API generation)."""
    out = []
    for sub in module.modules():
        state = getattr(getattr(sub, "hsdp_scheduler", None), "hsdp_state", None)
        out.extend(getattr(state, "hsdp_params", None) or [])
    return out


def preserve_all_gather_version_counter(module: Any) -> int:
    """Wrap, on the instances belonging to ``module`` only, hyper-parallel's all-gather
    into the unsharded parameter's buffer so that it leaves that buffer's autograd version
    counter unchanged (``torch.autograd._unsafe_preserve_version_counter``).

    The write itself, its values and its communication are hyper-parallel's; only the
    counter bump that autograd's saved-tensor check sees is hidden. The first call of each
    parameter (no buffer yet, nothing saved for backward) runs unchanged.

    Returns:
        How many parameter objects were wrapped (0: nothing to do, e.g. a release
        without ``_get_unsharded_param_data``).
    """
    import torch

    wrapped = 0
    for param in hsdp_params(module):
        original = getattr(param, "_get_unsharded_param_data", None)
        if original is None or getattr(original, "_sweep_wrapped", False):
            continue

        @functools.wraps(original)
        def gather(*args: Any, _original: Any = original, _param: Any = param, **kwargs: Any) -> Any:
            outputs = getattr(_param, "all_gather_outputs", None) or []
            if not outputs:
                return _original(*args, **kwargs)
            with torch.autograd._unsafe_preserve_version_counter(outputs[0]):
                return _original(*args, **kwargs)

        gather._sweep_wrapped = True  # type: ignore[attr-defined]
        param._get_unsharded_param_data = gather
        wrapped += 1
    return wrapped


def missing_layout_infer_ops(ops: List[str]) -> List[str]:
    """The torch op names in ``ops`` for which the installed hyper-parallel declares no
    parallel layout-infer function (its ``core/shard/ops/yaml/*.yaml`` files, read as
    text; hyper-parallel is not imported). Its DTensor dispatch raises "Operator <op> dose
    not contain parallel layout infer func." for such an op on a DTensor outside
    ``SkipDTensorDispatch()``. ``[]`` if hyper-parallel is not installed."""
    import importlib.util

    spec = importlib.util.find_spec("hyper_parallel")
    if spec is None or not spec.submodule_search_locations:
        return []
    yaml_dir = Path(list(spec.submodule_search_locations)[0]) / "core" / "shard" / "ops" / "yaml"
    text = "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(yaml_dir.glob("*.yaml")))
    return [op for op in ops if f"{op}:" not in text]


def needs_version_counter_workaround(module: Any) -> bool:
    """True if ``module`` has hyper-parallel parameters whose ``_get_unsharded_param_data``
    does not itself use ``_unsafe_preserve_version_counter`` (read from its source, so a
    release that fixes it is left alone)."""
    import inspect

    for param in hsdp_params(module):
        method = getattr(type(param), "_get_unsharded_param_data", None)
        if method is None:
            return False
        try:
            return "_unsafe_preserve_version_counter" not in inspect.getsource(method)
        except (OSError, TypeError):
            return True
    return False


def _states(module: Any) -> List[Any]:
    """The hyper-parallel states (``TorchHSDPStateV2``) ``fully_shard`` left on ``module``'s submodules."""
    found = []
    for sub in module.modules():
        state = getattr(getattr(sub, "hsdp_scheduler", None), "hsdp_state", None)
        if state is not None and state not in found:
            found.append(state)
    return found


def param_names(module: Any) -> Any:
    """``{id(sharded parameter): name}`` of ``module``'s parameters (``named_parameters``;
    hyper-parallel keeps no name on its parameter objects: ``_param_fqn`` stays ``None``)."""
    return {id(p): n for n, p in module.named_parameters()}


def _name(hsdp_param: Any, names: Any) -> str:
    return names.get(id(getattr(hsdp_param, "sharded_param", None)), "?")


class HPLocalGrads:
    """hyper-parallel's local gradients before its reduction (``sweep.engines.collectives.LocalGrads``'
    contract: ``grads``, parameter name -> float32 tensor): while entered, each state's
    ``post_backward`` (an instance attribute, taken off on exit) first keeps every parameter's
    unsharded gradient as the state is about to reduce it (the accumulated one plus the last,
    as ``accumulate_unsharded_grad_if_needed`` sums them); a post-backward that does not reduce
    (sync off) keeps nothing."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.grads: dict = {}
        self._patched: List[Any] = []

    def __enter__(self) -> "HPLocalGrads":
        import torch

        self.grads = {}
        names = param_names(self.model)
        for state in _states(self.model):
            original = state.post_backward

            def post_backward(*unused: Any, state: Any = state, original: Any = original) -> Any:
                if getattr(state, "reduce_grads", True):
                    for hp in getattr(state, "hsdp_params", None) or []:
                        unsharded = getattr(hp, "_unsharded_param", None)
                        grad = getattr(unsharded, "grad", None)
                        acc = getattr(hp, "unsharded_accumulated_grad", None)
                        total = grad if acc is None else (acc if grad is None else acc + grad)
                        if total is not None:
                            self.grads[_name(hp, names)] = total.detach().to("cpu", torch.float32, copy=True)
                return original(*unused)

            state.post_backward = post_backward
            self._patched.append(state)
        return self

    def __exit__(self, *exc: Any) -> None:
        for state in self._patched:
            vars(state).pop("post_backward", None)
        self._patched = []


def carrying_patches(model: Any, ledger: Any) -> List[Any]:
    """Wrap, on ``model``'s hyper-parallel parameter objects (instance attributes), the two
    gradient reductions (``reduce_scatter_grad``, ``all_reduce_grad``) so that the ledger's
    entries made inside name the parameter they carry (``ledger.carrying``). Returns the
    objects patched (undo: :func:`undo_carrying`)."""
    names = param_names(model)
    patched = []
    for hp in hsdp_params(model):
        for attr in ("reduce_scatter_grad", "all_reduce_grad"):
            original = getattr(hp, attr, None)
            if original is None:
                continue

            def wrapper(*args: Any, original: Any = original, name: str = _name(hp, names), **kwargs: Any) -> Any:
                outer, ledger.carrying = ledger.carrying, [name]
                try:
                    return original(*args, **kwargs)
                finally:
                    ledger.carrying = outer

            setattr(hp, attr, wrapper)
        patched.append(hp)
    return patched


def undo_carrying(patched: List[Any]) -> None:
    for hp in patched:
        for attr in ("reduce_scatter_grad", "all_reduce_grad"):
            vars(hp).pop(attr, None)
