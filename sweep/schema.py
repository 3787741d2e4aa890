"""Structured config of one sweep job, and the checks Hydra cannot express.

Every YAML file under ``conf/`` merges into one of these dataclasses, so OmegaConf
rejects an unknown key, a wrong type or a value outside an ``Enum`` when the job's
config is composed, before any process starts. Cross-field rules (the mesh must
fit ``world_size``, the engine must exist for the framework, the framework must be
installed) live in :func:`validate`, which the job calls before it launches ranks.

Names follow PyTorch FSDP2 (``MixedPrecisionPolicy``: ``param_dtype``,
``reduce_dtype``, ``output_dtype``, ``cast_forward_inputs``;
``reshard_after_forward``) and ``DeviceMesh`` (``mesh_shape``, ``mesh_dim_names``).
"""

from __future__ import annotations

import enum
import importlib.util
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf


class ConfigError(ValueError):
    """A job config that cannot run; the message names the field and the allowed values."""


class Framework(str, enum.Enum):
    torch = "torch"
    mindspore = "mindspore"


class Device(str, enum.Enum):
    cpu = "cpu"
    npu = "npu"
    cuda = "cuda"


class DType(str, enum.Enum):
    """Floating dtypes a ``MixedPrecisionPolicy`` may name (``None`` = keep the parameter's)."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class OptimizerName(str, enum.Enum):
    adam = "adam"
    adamw = "adamw"
    sgd = "sgd"


class GradApi(str, enum.Enum):
    """How a step computes gradients: ``loss.backward()`` (torch; MindSpore only where
    its ``Tensor`` has ``backward``) or ``mindspore.value_and_grad`` (the report's)."""

    backward = "backward"
    value_and_grad = "value_and_grad"


class WeightCopy(str, enum.Enum):
    """How the standalone copy gets the distributed copy's initial weights.

    ``shared``: the report's ``standalone_param.set_data(distributed_param)`` (torch:
    ``standalone_param.data = distributed_param.data``): both share storage, so
    training one moves the other. ``independent``: a copy of the values.
    ``checkpoint``: a round-trip through a checkpoint file.
    """

    shared = "shared"
    independent = "independent"
    checkpoint = "checkpoint"


class Order(str, enum.Enum):
    """Which copy trains first in a rank, or ``separate``: the standalone copy trains
    in a process of its own (no launcher, no process group)."""

    standalone_first = "standalone_first"
    distributed_first = "distributed_first"
    separate = "separate"


class DataSplit(str, enum.Enum):
    """``replicated``: every rank sees the same ``batch_size`` sample (the report).
    ``sharded``: rank ``r`` sees rows ``[r*b, (r+1)*b)`` of a global batch of
    ``b * world_size`` rows, on which the standalone copy trains; the distributed loss
    of a step is then the mean of the ranks' losses."""

    replicated = "replicated"
    sharded = "sharded"


# The launchers that start each framework's ranks (sweep.launch.build_spec).
LAUNCHERS = {"torch": ("torchrun",), "mindspore": ("msrun",)}
POOL_LAUNCHERS = {"torch": ("elastic_fork", "torchrun"), "mindspore": ("msrun",)}


@dataclass
class FrameworkConfig:
    """The framework the ranks run, and how it is launched.

    ``backend`` maps a ``device`` to the collective backend (torch: ``gloo`` on CPU);
    ``device_target`` maps it to MindSpore's ``device_target``. ``env`` is added to
    every rank's environment (e.g. ``MS_DEV_HOST_BLOCKING_RUN=1``). ``launcher``
    starts a job's own ranks; ``pool_launcher`` a multirun's shared launch
    (``sweep.pool``; ``elastic_fork``: ``sweep.train.fork_launch``).
    """

    name: Framework = MISSING
    launcher: str = MISSING  # torchrun | msrun
    pool_launcher: str = MISSING  # shared launches (sweep.pool): elastic_fork | torchrun | msrun
    grad_api: GradApi = GradApi.backward
    backend: Dict[str, str] = field(default_factory=dict)
    device_target: Dict[str, str] = field(default_factory=dict)
    env: Dict[str, str] = field(default_factory=dict)


@dataclass
class EngineConfig:
    """How the distributed copy is parallelised.

    ``impl`` maps a framework name to the dotted path of an engine class
    (see ``sweep/engines``); an engine exists for a framework iff it has an entry.
    A test or a user can plug in another engine by overriding one entry.
    """

    name: str = MISSING
    impl: Dict[str, str] = field(default_factory=dict)
    # hyper_parallel only: run the optimizer step inside SkipDTensorDispatch(), as
    # hyper-parallel's own tests do (the report does not). None for other engines.
    skip_dtensor_dispatch: Optional[bool] = None


@dataclass
class MixedPrecisionPolicyConfig:
    """Fields and defaults of ``torch.distributed.fsdp.MixedPrecisionPolicy`` (and
    hyper-parallel's class of the same name): ``None`` keeps the parameter dtype.
    Inputs are cast only when ``param_dtype`` is set."""

    name: str = MISSING
    param_dtype: Optional[DType] = None
    reduce_dtype: Optional[DType] = None
    output_dtype: Optional[DType] = None
    cast_forward_inputs: bool = True


@dataclass
class MeshConfig:
    """A ``DeviceMesh``: ``world_size`` = product of ``mesh_shape``.

    A 2-D mesh is HSDP: replicate over the first dim, shard over the second
    (``fully_shard`` semantics in PyTorch and hyper-parallel).
    """

    name: str = MISSING
    mesh_shape: List[int] = MISSING
    mesh_dim_names: List[str] = MISSING


@dataclass
class OptimizerConfig:
    """Optimizer and its hyperparameters. ``lr`` is the learning rate; ``betas`` and
    ``eps`` apply to adam/adamw, ``momentum`` to sgd."""

    name: OptimizerName = MISSING
    lr: float = 1e-4
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.0


@dataclass
class ModelConfig:
    """The seed's MLP: Dense(in, hidden) -> ReLU -> Dense(hidden, out).

    Weights ~ N(0, ``init_std``^2), biases zero. ``init_std`` = 0.01 is MindSpore's
    ``weight_init="normal"`` (``mindspore.common.initializer.Normal(sigma=0.01)``).
    """

    in_size: int = 32
    hidden_size: int = 64
    out_size: int = 24
    init_std: float = 0.01


@dataclass
class DataConfig:
    """Sample ``i`` is ``x = RandomState(seed_offset + i).randn(batch_size, in_size)``
    and ``y = RandomState(seed_offset + i).randn(batch_size, out_size)`` (each from a
    fresh RandomState, as in the report), float32, the same on every rank."""

    batch_size: int = 1
    seed_offset: int = 44
    split: DataSplit = DataSplit.replicated


@dataclass
class WeightsConfig:
    """How the two copies start from the same weights (see :class:`WeightCopy`)."""

    copy: WeightCopy = WeightCopy.independent


@dataclass
class CompareConfig:
    """Tolerance of the per-step comparison, ``numpy.isclose`` semantics:
    ``|distributed - standalone| <= atol + rtol * |standalone|``."""

    rtol: float = 1e-4
    atol: float = 1e-4


@dataclass
class LauncherConfig:
    """How a job's ranks are started and supervised.

    ``timeout_s``: wall-clock limit of the whole launch in seconds; ``None`` means
    ``base_timeout_s + per_step_s * steps * world_size``.
    """

    timeout_s: Optional[float] = None
    base_timeout_s: float = 180.0
    per_step_s: float = 0.1
    omp_num_threads: int = 1
    # Multirun fast path (sweep.pool, sweep.baseline); same losses, bit for bit on CPU.
    reuse_processes: bool = True  # jobs of one framework and world size share one launch
    reuse_baselines: bool = True  # the standalone sequence is computed once per distinct baseline


@dataclass
class SweepConfig:
    """One job: the same model trained standalone and distributed, then compared."""

    framework: FrameworkConfig = MISSING
    engine: EngineConfig = MISSING
    mp_policy: MixedPrecisionPolicyConfig = MISSING
    mesh: MeshConfig = MISSING
    optimizer: OptimizerConfig = MISSING
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    compare: CompareConfig = field(default_factory=CompareConfig)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    weights: WeightsConfig = field(default_factory=WeightsConfig)
    order: Order = Order.standalone_first
    zero_grad: bool = True  # clear the distributed copy's gradients every step
    reshard_after_forward: bool = True
    deterministic: bool = True
    seed: int = 42
    steps: int = 1000
    device: Device = Device.cpu
    world_size: Optional[int] = None  # None: the product of mesh.mesh_shape
    # Re-running a sweep into the same hydra.sweep.dir: skip jobs whose result.json is
    # complete (ok/fail) for the same config, run the rest.
    resume: bool = False


def register_configs() -> None:
    """Store the schema as ``base_config`` for ``conf/config.yaml``'s defaults list."""
    ConfigStore.instance().store(name="base_config", node=SweepConfig)


def world_size(cfg: DictConfig | SweepConfig) -> int:
    """Number of ranks of the job: ``world_size`` if set, else ``prod(mesh.mesh_shape)``."""
    if cfg.world_size is not None:
        return int(cfg.world_size)
    return math.prod(int(n) for n in cfg.mesh.mesh_shape)


def validate(cfg: DictConfig) -> None:
    """Check the rules that span fields. Runs in the job process, before any rank.

    Raises:
        ConfigError: one line naming the field, the value and what is allowed.
    """
    shape = list(cfg.mesh.mesh_shape)
    names = list(cfg.mesh.mesh_dim_names)
    if not shape or any(int(n) < 1 for n in shape):
        raise ConfigError(f"mesh.mesh_shape={shape}: every dim must be a positive integer")
    if len(names) != len(shape):
        raise ConfigError(
            f"mesh.mesh_dim_names={names} has {len(names)} names but mesh.mesh_shape={shape} has {len(shape)} dims"
        )
    product = math.prod(shape)
    if cfg.world_size is not None and int(cfg.world_size) != product:
        raise ConfigError(
            f"mesh.mesh_shape={shape} needs world_size={product} ranks "
            f"({' x '.join(map(str, shape))}), but world_size={cfg.world_size}"
        )
    if cfg.steps <= 0:
        raise ConfigError(f"steps={cfg.steps}: must be > 0")
    if cfg.data.batch_size <= 0:
        raise ConfigError(f"data.batch_size={cfg.data.batch_size}: must be > 0")
    for key in ("rtol", "atol"):
        if cfg.compare[key] < 0:
            raise ConfigError(f"compare.{key}={cfg.compare[key]}: must be >= 0")
    if cfg.optimizer.lr <= 0:
        raise ConfigError(f"optimizer.lr={cfg.optimizer.lr}: must be > 0")
    for key in ("timeout_s", "base_timeout_s", "per_step_s"):
        value = cfg.launcher[key]
        if value is not None and value <= 0:
            raise ConfigError(f"launcher.{key}={value}: must be > 0 seconds")

    framework = str(_value(cfg.framework.name))
    for key, allowed in (("launcher", LAUNCHERS[framework]), ("pool_launcher", POOL_LAUNCHERS[framework])):
        if cfg.framework[key] not in allowed:
            raise ConfigError(
                f"framework.{key}={cfg.framework[key]} does not start framework={framework} ranks; "
                f"allowed: {', '.join(allowed)}"
            )
    impl = cfg.engine.impl
    if framework not in impl or not impl[framework]:
        have = ", ".join(sorted(k for k, v in impl.items() if v)) or "none"
        options = ", ".join(f"engine={name}" for name in engines_for(framework)) or "none"
        raise ConfigError(
            f"engine={cfg.engine.name} does not exist for framework={framework} (it exists for: {have}); "
            f"framework={framework} has: {options}"
        )
    device = str(_value(cfg.device))
    table = cfg.framework.backend if framework == "torch" else cfg.framework.device_target
    if device not in table:
        raise ConfigError(
            f"device={device} is not supported by framework={framework} (supported: {', '.join(table)})"
        )
    if cfg.engine.name == "data_parallel":
        policy = cfg.mp_policy
        if any(policy[k] is not None for k in ("param_dtype", "reduce_dtype", "output_dtype")):
            raise ConfigError(
                f"engine=data_parallel has no mixed-precision policy; mp_policy={policy.name} sets dtypes "
                "(use mp_policy=fp32 or cast_forward_inputs)"
            )
    grad_api = str(_value(cfg.framework.grad_api))
    if framework == "torch" and grad_api != "backward":
        raise ConfigError(f"framework.grad_api={grad_api} is MindSpore's; framework=torch allows: backward")
    if cfg.engine.skip_dtensor_dispatch is not None and cfg.engine.name != "hyper_parallel":
        raise ConfigError(
            f"engine.skip_dtensor_dispatch={cfg.engine.skip_dtensor_dispatch} applies to engine=hyper_parallel only "
            f"(engine={cfg.engine.name}); leave it null"
        )
    _check_device(framework, device, world_size(cfg))
    if importlib.util.find_spec(framework) is None:
        extra = "torch" if framework == "torch" else "mindspore"
        raise ConfigError(
            f"framework={framework} is not installed: pip install -e '.[{extra}]' "
            "(on CPU machines add -c constraints/cpu.txt)"
        )
    if framework == "mindspore" and grad_api == "backward":
        import mindspore  # only for this check: ~3 s

        if not hasattr(mindspore.Tensor, "backward"):
            raise ConfigError(
                f"framework.grad_api=backward: MindSpore {mindspore.__version__} has no Tensor.backward; "
                "allowed here: value_and_grad"
            )
    if cfg.engine.name == "hyper_parallel":  # installed? what its installed release cannot run or express
        from sweep.engines.hyper_parallel import check_config

        check_config(cfg, framework, world_size(cfg))


def engines_for(framework: str) -> List[str]:
    """Names of the ``conf/engine/`` presets that have an implementation for ``framework``."""
    engine_dir = Path(__file__).resolve().parent.parent / "conf" / "engine"
    names = []
    for path in sorted(engine_dir.glob("*.yaml")):
        if (OmegaConf.load(path).get("impl") or {}).get(framework):
            names.append(path.stem)
    return names


def _check_device(framework: str, device: str, ranks: int) -> None:
    """An accelerator the job asks for must be there: torch's ``cuda`` needs
    ``torch.cuda.device_count() >= ranks``; ``npu`` needs ``torch_npu`` (torch) or the
    Ascend toolkit's ``ASCEND_HOME_PATH``/``ASCEND_TOOLKIT_HOME`` (MindSpore).

    Raises:
        ConfigError: the device is missing, naming what was looked for.
    """
    if device == "cpu":
        return
    if device == "npu":
        if framework == "torch" and importlib.util.find_spec("torch_npu") is None:
            raise ConfigError("device=npu with framework=torch needs torch_npu (not installed on this host)")
        if framework == "mindspore" and not (os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME")):
            raise ConfigError(
                "device=npu with framework=mindspore needs the Ascend toolkit: source its set_env.sh "
                "(ASCEND_HOME_PATH is not set on this host)"
            )
    if device == "cuda" and framework == "torch" and importlib.util.find_spec("torch") is not None:
        import torch  # only for this check

        if torch.cuda.device_count() < ranks:
            raise ConfigError(
                f"device=cuda needs {ranks} GPUs for this mesh, this host has {torch.cuda.device_count()}"
            )


def _value(x: Any) -> Any:
    return x.value if isinstance(x, enum.Enum) else x


def to_container(cfg: DictConfig) -> dict:
    """The resolved job config as plain Python (enums as their string values)."""
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
