"""hyper-parallel's ``fully_shard`` on either platform (MindSpore or torch).

hyper-parallel is not on PyPI; it is imported only here, lazily, after
``HYPER_PARALLEL_PLATFORM`` is set (it picks its platform at first import). Two API
generations exist (shared/notes/environment.md): early 2026 releases export
``fully_shard`` from ``hyper_parallel.core.fully_shard`` and ``MixedPrecisionPolicy``
from ``hyper_parallel.platform.torch.fully_shard.utils``; later ones export
``fully_shard`` at the top level and ``MixedPrecisionPolicy`` from
``hyper_parallel.core.fully_shard.utils``. :func:`import_api` accepts both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import inspect
import os
from types import SimpleNamespace
from typing import Any

from sweep.engines.base import Engine, MindSporeEngine, TorchEngine, dtype_name
from sweep.errors import ConfigError

MISSING_MESSAGE = (
    "engine=hyper_parallel needs hyper-parallel, which is not installed and not on PyPI: "
    "install it from its source repository (mindspore/hyper-parallel) with `pip install -e .` in a checkout"
)


@dataclasses.dataclass
class HyperParallelOptions:
    """``engine.options`` of the hyper_parallel engines."""

    # Run the optimizer step inside SkipDTensorDispatch(), as hyper-parallel's own tests
    # do (the report does not).
    skip_dtensor_dispatch: bool = False


def _check_installed(cfg: Any) -> None:
    """Raises: ConfigError: hyper-parallel is not importable (it is not on PyPI)."""
    if importlib.util.find_spec("hyper_parallel") is None:
        raise ConfigError(MISSING_MESSAGE)


def import_api(platform: str) -> SimpleNamespace:
    """Import hyper-parallel for ``platform`` ("mindspore" or "torch").

    Returns a namespace with ``init_device_mesh``, ``fully_shard``,
    ``MixedPrecisionPolicy`` and ``SkipDTensorDispatch`` (``None`` if absent).

    Raises:
        ImportError: hyper-parallel is missing (message says what to install), or it was
            already imported for another platform.
    """
    current = os.environ.setdefault("HYPER_PARALLEL_PLATFORM", platform)
    if current != platform:
        raise ImportError(f"HYPER_PARALLEL_PLATFORM={current} but the job runs framework={platform}")
    try:
        import hyper_parallel
    except ImportError as exc:
        raise ImportError(MISSING_MESSAGE) from exc
    try:
        from hyper_parallel import fully_shard
    except ImportError:
        from hyper_parallel.core.fully_shard import fully_shard
    try:
        from hyper_parallel.core.fully_shard.utils import MixedPrecisionPolicy
    except ImportError:
        from hyper_parallel.platform.torch.fully_shard.utils import MixedPrecisionPolicy
    skip = None
    for where in ("hyper_parallel", "hyper_parallel.core.dtensor", "hyper_parallel.core.dtensor.dtensor"):
        try:
            skip = getattr(__import__(where, fromlist=["SkipDTensorDispatch"]), "SkipDTensorDispatch")
            break
        except (ImportError, AttributeError):
            continue
    return SimpleNamespace(
        init_device_mesh=hyper_parallel.init_device_mesh,
        fully_shard=fully_shard,
        MixedPrecisionPolicy=MixedPrecisionPolicy,
        SkipDTensorDispatch=skip,
    )


def _fully_shard(api: SimpleNamespace, model: Any, cfg: Any, mp_policy: Any, mesh: Any, **extra: Any) -> Any:
    kwargs = dict(mesh=mesh, reshard_after_forward=bool(cfg.reshard_after_forward), mp_policy=mp_policy)
    params = inspect.signature(api.fully_shard).parameters
    kwargs.update({k: v for k, v in extra.items() if k in params})
    out = api.fully_shard(model, **kwargs)
    return model if out is None else out


def _skip_dispatch(engine: Engine) -> contextlib.AbstractContextManager:
    """``SkipDTensorDispatch()`` when ``engine.skip_dtensor_dispatch`` is true, else a no-op.

    Raises:
        ImportError: asked for, but the installed hyper-parallel has no ``SkipDTensorDispatch``.
    """
    if not engine.options.skip_dtensor_dispatch:
        return contextlib.nullcontext()
    if engine.api.SkipDTensorDispatch is None:
        raise ImportError("engine.skip_dtensor_dispatch=true but this hyper-parallel has no SkipDTensorDispatch")
    return engine.api.SkipDTensorDispatch()


class MindSporeHyperParallel(MindSporeEngine):
    """``fully_shard`` on MindSpore, as the report uses it. Needs ReduceScatter, which
    MindSpore has on Ascend NPUs but not on CPU."""

    Options = HyperParallelOptions
    check_config = staticmethod(_check_installed)

    def parallelize(self, net: Any) -> Any:
        import mindspore as ms

        self.api = api = import_api("mindspore")
        device_type = {"npu": "npu", "cpu": "cpu", "cuda": "gpu"}[str(getattr(self.cfg.device, "value", self.cfg.device))]
        mesh = api.init_device_mesh(
            device_type=device_type,
            mesh_shape=tuple(int(n) for n in self.cfg.mesh.mesh_shape),
            mesh_dim_names=tuple(self.cfg.mesh.mesh_dim_names),
        )
        p = self.cfg.mp_policy

        def to_dtype(value: Any) -> Any:
            name = dtype_name(value)
            return None if name is None else getattr(ms, name)

        policy = api.MixedPrecisionPolicy(
            param_dtype=to_dtype(p.param_dtype),
            reduce_dtype=to_dtype(p.reduce_dtype),
            output_dtype=to_dtype(p.output_dtype),
            cast_forward_inputs=bool(p.cast_forward_inputs),
        )
        return _fully_shard(api, net, self.cfg, policy, mesh)

    def optimizer_step(self, optimizer: Any, grads: Any = None) -> None:
        with _skip_dispatch(self):
            optimizer(grads)


class TorchHyperParallel(TorchEngine):
    """``fully_shard`` on hyper-parallel's torch platform (gloo on CPU works with the
    early-2026 release: the process group is initialised by the rank before this)."""

    Options = HyperParallelOptions
    check_config = staticmethod(_check_installed)

    def parallelize(self, model: Any) -> Any:
        from sweep.engines.torch_fsdp2 import torch_mp_policy

        self.api = import_api("torch")
        mesh = self.api.init_device_mesh(
            device_type=self.device.type,
            mesh_shape=tuple(int(n) for n in self.cfg.mesh.mesh_shape),
            mesh_dim_names=tuple(self.cfg.mesh.mesh_dim_names),
        )
        fsdp = torch_mp_policy(self.cfg.mp_policy)
        policy = self.api.MixedPrecisionPolicy(
            param_dtype=fsdp.param_dtype,
            reduce_dtype=fsdp.reduce_dtype,
            output_dtype=fsdp.output_dtype,
            cast_forward_inputs=fsdp.cast_forward_inputs,
        )
        return _fully_shard(self.api, model, self.cfg, policy, mesh, device=self.device)

    def optimizer_step(self, optimizer: Any, grads: Any = None) -> None:
        with _skip_dispatch(self):
            optimizer.step()
