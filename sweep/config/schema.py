"""Structured config of one sweep job: every section's schema, its own checks, and the
role of every field.

Every YAML file under ``sweep/config/conf/`` merges into one of these dataclasses, so OmegaConf
rejects an unknown key (also one added with ``+``), a wrong type or a value outside an
``Enum`` when the job's config is composed, before any process starts. What a type
cannot say, each section checks itself (its ``check`` classmethod: the mesh owns
``world_size``, the tolerance owns its range); the framework and the engine check
their own rules (``sweep.frameworks``, ``sweep.engines``, ``sweep.models``);
``sweep.run.checks.check`` runs them all, in the job process, before it launches ranks.
This module imports no framework, engine or model: validation flows down, from the job
to each component.

**Field roles.** Every field declares what it affects (:func:`affects`, stored in the
dataclass field's metadata): ``baseline`` (the standalone loss sequence depends on it),
``distributed`` (the distributed sequence does), ``verdict`` (the judgement of the
two), ``launch`` (jobs that differ in it cannot share one distributed launch),
``policy_baseline`` (the standalone sequence depends on it when
``baseline.precision=policy``: the policy and the wrapping the standalone copy then
runs; :func:`baseline_fields`). A field with none of them changes no number (time
limits, reuse switches). Baseline reuse
(``sweep.run.baseline``), shared launches (``sweep.run.pool``) and resume (``sweep.run.job``) derive
their field lists from these roles (:func:`fields_with`); ``tests/unit/test_schema.py``
fails when a field has no declared role.

Names follow PyTorch FSDP2 (``MixedPrecisionPolicy``: ``param_dtype``,
``reduce_dtype``, ``output_dtype``, ``cast_forward_inputs``;
``reshard_after_forward``) and ``DeviceMesh`` (``mesh_shape``, ``mesh_dim_names``).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf, open_dict

from sweep.errors import ConfigError

__all__ = ["ConfigError", "SweepConfig", "check_fields", "world_size", "fields_with", "to_container"]

BASELINE, DISTRIBUTED, VERDICT, LAUNCH = "baseline", "distributed", "verdict", "launch"
POLICY_BASELINE = "policy_baseline"  # baseline too, when baseline.precision=policy
ROLES = (BASELINE, DISTRIBUTED, VERDICT, LAUNCH, POLICY_BASELINE)
NUMERIC = (BASELINE, DISTRIBUTED, VERDICT)  # what a result depends on: must match on resume


def affects(*roles: str, doc: Optional[str] = None, **kwargs: Any) -> Any:
    """A dataclass ``field`` whose metadata declares the roles of the field (see the
    module docstring); ``affects()`` with no role: the field changes no number.

    ``doc`` is the field's help text (its docstring), kept in the metadata as ``"doc"``
    with its whitespace folded to single spaces; the config reference
    (``docs/config-reference.md``, rendered by ``sweep.config.reference``) shows it, and
    ``tests/unit/test_config_reference.py`` fails when a field has none."""
    unknown = set(roles) - set(ROLES)
    if unknown:
        raise ValueError(f"unknown roles {sorted(unknown)}; allowed: {', '.join(ROLES)}")
    metadata: Dict[str, Any] = {"affects": frozenset(roles)}
    if doc is not None:
        metadata["doc"] = " ".join(doc.split())
    return field(metadata=metadata, **kwargs)


ALL_NUMERIC = (BASELINE, DISTRIBUTED)


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


class WeightTransfer(str, enum.Enum):
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


def _value(x: Any) -> Any:
    return x.value if isinstance(x, enum.Enum) else x


def _positive(section: str, cfg: Any, *keys: str, allow_none: bool = False) -> None:
    """Each of ``keys`` is a finite number > 0 (or ``None`` with ``allow_none``)."""
    for key in keys:
        value = cfg[key]
        if value is None and allow_none:
            continue
        if value is None or not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{section}.{key}={value}: must be a finite number > 0")


@dataclass
class FrameworkConfig:
    """The framework the ranks run, and how they are started.

    ``impl`` is the dotted path of the framework's class (``sweep.frameworks``), which
    owns its launchers, checks and rank entry point. ``launcher`` starts a job's own
    ranks (torchrun, msrun); ``pool_launcher`` a multirun's shared launch
    (``sweep.run.pool``; torch's ``elastic_fork``: ``sweep.launch.fork_launch``).
    ``device_map`` maps ``device`` to the framework's own name for it (torch: the
    process-group backend, gloo on CPU; MindSpore: ``device_target``). ``env`` is added
    to every rank's environment (e.g. ``GLOG_v=3``); ``device_env[device]`` too, on that
    device only (MindSpore's ``MS_DEV_HOST_BLOCKING_RUN=1`` and a 1 s
    ``MS_RETRY_INTERVAL_LOWER``/``UPPER``, measured to help on CPU).
    """

    name: str = affects(BASELINE, DISTRIBUTED, LAUNCH, default=MISSING,
                        doc="The framework of the ranks, as the preset names it (``torch``, ``mindspore``).")
    impl: str = affects(BASELINE, DISTRIBUTED, LAUNCH, default=MISSING,
                        doc="Dotted path of the framework's class (a ``sweep.frameworks.base.Framework`` "
                            "subclass): its launchers, checks and rank entry point.")
    launcher: str = affects(default=MISSING,
                            doc="The launcher of a job's own launch (``torchrun``, ``msrun``).")
    pool_launcher: str = affects(LAUNCH, default=MISSING,
                                 doc="How a multirun's shared launch starts (``execution.reuse_processes``): "
                                     "torch ``elastic_fork`` (torchrun's engine forking the ranks from a "
                                     "process that imported torch once) or ``torchrun``; MindSpore ``msrun``.")
    grad_api: GradApi = affects(BASELINE, DISTRIBUTED, default=GradApi.backward,
                                doc="How a step takes gradients: ``backward`` (torch; MindSpore only where "
                                    "its ``Tensor`` has one) or ``value_and_grad`` (MindSpore, the report's).")
    device_map: Dict[str, str] = affects(BASELINE, DISTRIBUTED, LAUNCH, default_factory=dict,
                                         doc="``device`` -> the framework's name for it: torch's process-group "
                                             "backend (gloo on CPU, nccl, hccl), MindSpore's ``device_target``.")
    env: Dict[str, str] = affects(BASELINE, DISTRIBUTED, LAUNCH, default_factory=dict,
                                  doc="Added to every rank's environment (MindSpore: ``GLOG_v=3``).")
    device_env: Dict[str, Dict[str, str]] = affects(
        BASELINE, DISTRIBUTED, LAUNCH, default_factory=dict,
        doc="``device`` -> more environment for the ranks on that device only (MindSpore on CPU: "
            "``MS_DEV_HOST_BLOCKING_RUN=1``, ``MS_RETRY_INTERVAL_LOWER/UPPER=1``, measured to help there).")


@dataclass
class EngineConfig:
    """How the distributed copy is parallelised.

    ``impl`` maps a framework name to the dotted path of an engine class
    (``sweep.engines``); an engine exists for a framework iff it has an entry. A test
    or a user plugs in another engine by overriding one entry. ``options`` are the
    engine's own settings, checked against the loaded class's ``Options`` dataclass.
    """

    name: str = affects(DISTRIBUTED, default=MISSING,
                        doc="The engine preset's name (``torch_fsdp2``, ``hyper_parallel``, ``data_parallel``).")
    impl: Dict[str, str] = affects(DISTRIBUTED, default_factory=dict,
                                   doc="Framework name -> dotted path of the engine class; the engine exists "
                                       "for a framework iff it has an entry. Override one entry to plug in "
                                       "an engine of your own (``engine.impl.torch=my_pkg.MyEngine``).")
    options: Dict[str, Any] = affects(DISTRIBUTED, default_factory=dict,
                                      doc="The engine's own settings, checked against its class's ``Options`` "
                                          "dataclass (hyper_parallel: ``skip_dtensor_dispatch``).")


@dataclass
class MixedPrecisionPolicyConfig:
    """Fields and defaults of ``torch.distributed.fsdp.MixedPrecisionPolicy`` (and
    hyper-parallel's class of the same name): ``None`` keeps the parameter dtype.
    Inputs are cast only when ``param_dtype`` is set. The distributed copy runs the
    policy; the standalone copy runs it too with ``baseline.precision=policy``
    (:class:`BaselineConfig`), so its dtype fields then affect the baseline (role
    ``policy_baseline``); ``name`` only labels the preset."""

    name: str = affects(DISTRIBUTED, default=MISSING, doc="Labels the preset (``fp32``, ``bf16``, ...).")
    param_dtype: Optional[DType] = affects(DISTRIBUTED, POLICY_BASELINE, default=None,
                                           doc="The dtype the unsharded parameters compute in "
                                               "(forward and backward); ``null``: the parameters' own.")
    reduce_dtype: Optional[DType] = affects(DISTRIBUTED, POLICY_BASELINE, default=None,
                                            doc="The dtype of the gradient reduction; ``null``: ``param_dtype``'s.")
    output_dtype: Optional[DType] = affects(DISTRIBUTED, POLICY_BASELINE, default=None,
                                            doc="The dtype the module's floating outputs are cast to; "
                                                "``null``: no cast.")
    cast_forward_inputs: bool = affects(DISTRIBUTED, POLICY_BASELINE, default=True,
                                        doc="Cast the floating forward inputs to ``param_dtype`` (nothing to "
                                            "cast without ``param_dtype``).")
    overrides: Dict[str, Any] = affects(
        DISTRIBUTED, POLICY_BASELINE, default_factory=dict,
        doc="Per-module policies: {module name or class: {param_dtype: ..., reduce_dtype: ..., ...}}, each "
            "merged over this policy for that module, which becomes a ``fully_shard`` unit of its own, e.g. "
            "``+mp_policy.overrides.layer1.param_dtype=float32`` under ``mp_policy=bf16``.")

    @staticmethod
    def check(policy: Any) -> None:
        """Raises: ConfigError: an override that is not a mapping of policy keys to
        allowed values."""
        allowed = {"param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs"}
        for module, override in (policy.get("overrides") or {}).items():
            if not isinstance(override, (dict, DictConfig)):
                raise ConfigError(f"mp_policy.overrides.{module}={override}: a mapping of {', '.join(sorted(allowed))}")
            for key, value in override.items():
                if key not in allowed:
                    raise ConfigError(f"mp_policy.overrides.{module}.{key}: unknown; allowed: "
                                      f"{', '.join(sorted(allowed))}")
                if key == "cast_forward_inputs":
                    if not isinstance(value, bool):
                        raise ConfigError(f"mp_policy.overrides.{module}.{key}={value}: true or false")
                elif value is not None and str(value) not in {d.value for d in DType}:
                    raise ConfigError(f"mp_policy.overrides.{module}.{key}={value}: allowed: "
                                      f"{', '.join(d.value for d in DType)} or null")

    @staticmethod
    def sets_dtypes(policy: Any) -> bool:
        """Whether the policy names any dtype (``param_dtype``/``reduce_dtype``/``output_dtype``)."""
        return any(policy[k] is not None for k in ("param_dtype", "reduce_dtype", "output_dtype"))


@dataclass
class MeshConfig:
    """A ``DeviceMesh``: ``world_size`` = product of ``mesh_shape``.

    A 2-D mesh is HSDP: replicate over the first dim, shard over the second
    (``fully_shard`` semantics in PyTorch and hyper-parallel).
    """

    name: str = affects(DISTRIBUTED, default=MISSING, doc="Labels the preset (``dp2``, ``dp4``, ``hsdp2x2``).")
    mesh_shape: List[int] = affects(DISTRIBUTED, default=MISSING,
                                    doc="Ranks per mesh dim; their product is ``world_size``.")
    mesh_dim_names: List[str] = affects(DISTRIBUTED, default=MISSING,
                                        doc="One name per dim of ``mesh_shape`` (e.g. ``[dp]``, "
                                            "``[replicate, shard]``).")

    @staticmethod
    def check(mesh: Any, world_size: Optional[int] = None) -> int:
        """The mesh's ``world_size``; it must equal ``world_size`` when that is set.

        Raises:
            ConfigError: a dim < 1, names and dims of different counts, or a mismatch.
        """
        shape, names = list(mesh.mesh_shape), list(mesh.mesh_dim_names)
        if not shape or any(int(n) < 1 for n in shape):
            raise ConfigError(f"mesh.mesh_shape={shape}: every dim must be a positive integer")
        if len(names) != len(shape):
            raise ConfigError(
                f"mesh.mesh_dim_names={names} has {len(names)} names but mesh.mesh_shape={shape} has {len(shape)} dims"
            )
        product = math.prod(shape)
        if world_size is not None and int(world_size) != product:
            raise ConfigError(
                f"mesh.mesh_shape={shape} needs world_size={product} ranks "
                f"({' x '.join(map(str, shape))}), but world_size={world_size}"
            )
        return product


@dataclass
class OptimizerConfig:
    """Optimizer and its hyperparameters. ``lr`` is the learning rate; ``betas`` and
    ``eps`` apply to adam/adamw, ``momentum`` to sgd."""

    name: OptimizerName = affects(*ALL_NUMERIC, default=MISSING, doc="The optimizer.")
    lr: float = affects(*ALL_NUMERIC, default=1e-4, doc="Learning rate (finite, > 0).")
    betas: List[float] = affects(*ALL_NUMERIC, default_factory=lambda: [0.9, 0.999],
                                 doc="adam/adamw: the two moment decays, each in [0, 1).")
    eps: float = affects(*ALL_NUMERIC, default=1e-8, doc="adam/adamw: the denominator's epsilon (finite, > 0).")
    weight_decay: float = affects(*ALL_NUMERIC, default=0.0, doc="Weight decay (>= 0).")
    momentum: float = affects(*ALL_NUMERIC, default=0.0, doc="sgd: momentum (>= 0).")

    @staticmethod
    def check(opt: Any) -> None:
        """Raises: ConfigError: ``lr`` or ``eps`` not finite and > 0, a beta outside
        [0, 1), a negative ``weight_decay`` or ``momentum``."""
        _positive("optimizer", opt, "lr", "eps")
        betas = list(opt.betas)
        if len(betas) != 2 or any(not (0.0 <= b < 1.0) for b in betas):
            raise ConfigError(f"optimizer.betas={betas}: two values in [0, 1)")
        for key in ("weight_decay", "momentum"):
            if not math.isfinite(opt[key]) or opt[key] < 0:
                raise ConfigError(f"optimizer.{key}={opt[key]}: must be a finite number >= 0")


class CheckpointMode(str, enum.Enum):
    """``activation_checkpoint.mode`` (:class:`ActivationCheckpointConfig`)."""

    none = "none"
    full = "full"
    selective = "selective"


class LrScheduler(str, enum.Enum):
    """``train.lr_scheduler``: ``none``, ``linear_warmup`` (lr from ``lr / warmup_steps`` up to ``lr``
    over ``warmup_steps``, then constant), ``cosine`` (that warmup, then a cosine decay to 0 at
    the last step)."""

    none = "none"
    linear_warmup = "linear_warmup"
    cosine = "cosine"


class OffloadPolicy(str, enum.Enum):
    """``offload_policy``: ``none``, or ``cpu`` (FSDP2's ``CPUOffloadPolicy``: sharded parameters,
    gradients and the optimizer step on the CPU)."""

    none = "none"
    cpu = "cpu"


class ModelInit(str, enum.Enum):
    """``model.init``: ``eager`` (built with storage), or ``meta`` (built on the meta device,
    sharded, materialised with ``to_empty`` and initialised; ``sweep.train.model_init``)."""

    eager = "eager"
    meta = "meta"


@dataclass
class ModelConfig:
    """The model both copies train: a factory named by ``_target_`` (``sweep.models``).

    The presets (``conf/model/``): ``mlp``, the report's Dense(in, hidden) -> ReLU ->
    Dense(hidden, out) (the default); ``mlp_norm`` (Linear, LayerNorm, ReLU, Linear,
    BatchNorm1d); ``transformer`` (a tiny causal decoder; torch only). A user's model:
    ``model._target_=my_pkg.build_model`` (see ``docs/own-model.md``: the factory
    is called through ``hydra.utils.instantiate`` with ``framework=`` and those of the
    sizes, ``init_std`` and ``args`` entries it names).

    Weights ~ N(0, ``init_std``^2), biases zero. ``init_std`` = 0.01 is MindSpore's
    ``weight_init="normal"`` (``mindspore.common.initializer.Normal(sigma=0.01)``).
    ``init_dtype``: the dtype the parameters are created in (``module.to(dtype)`` after
    the factory), in both copies: it sets the master-weight and optimizer-state dtype,
    unlike ``mp_policy.param_dtype``, which only casts the compute (of the distributed
    copy; of both with ``baseline.precision=policy``).
    """

    name: str = affects(*ALL_NUMERIC, default="mlp", doc="Labels the model (the preset's name, or yours).")
    _target_: str = affects(*ALL_NUMERIC, default="sweep.models.mlp",
                            doc="Dotted path of the model factory, called through ``hydra.utils.instantiate`` "
                                "once per copy with ``framework=`` and the keyword arguments its signature names.")
    in_size: int = affects(*ALL_NUMERIC, default=32, doc="Input features (>= 1).")
    hidden_size: int = affects(*ALL_NUMERIC, default=64, doc="Hidden width (>= 1).")
    out_size: int = affects(*ALL_NUMERIC, default=24, doc="Output features (>= 1).")
    init_std: float = affects(*ALL_NUMERIC, default=0.01,
                              doc="Weights ~ N(0, init_std^2), biases zero; 0.01 is MindSpore's "
                                  "``weight_init=\"normal\"``.")
    init_dtype: DType = affects(*ALL_NUMERIC, default=DType.float32,
                                doc="The dtype the parameters are created in, in both copies: the master "
                                    "weights' and the optimizer state's (not ``mp_policy.param_dtype``).")
    args: Dict[str, Any] = affects(*ALL_NUMERIC, default_factory=dict,
                                   doc="More keyword arguments of the factory (e.g. the transformer's "
                                       "``num_layers``).")
    init: ModelInit = affects(*ALL_NUMERIC, default=ModelInit.eager,
                              doc="``eager``, or ``meta``: the distributed copy is built on the meta device, "
                                  "sharded, materialised (``to_empty``) and initialised "
                                  "(``reset_parameters`` under ``seed``); the standalone copy gets its initial "
                                  "weights per ``weights.transfer`` (torch, FSDP2 engines).")
    frozen: List[str] = affects(*ALL_NUMERIC, default_factory=list,
                                doc="Parameter name patterns (``fnmatch``, e.g. ``layer0.*``) trained with "
                                    "``requires_grad=False`` in both copies.")
    tie: List[List[str]] = affects(*ALL_NUMERIC, default_factory=list,
                                   doc="Pairs ``[a, b]`` of parameter names: ``b`` becomes ``a`` (one Parameter) "
                                       "in both copies, before sharding; shapes must match.")

    @staticmethod
    def check(model: Any) -> None:
        """Raises: ConfigError: a size < 1 or a non-positive ``init_std``."""
        for key in ("in_size", "hidden_size", "out_size"):
            if model[key] < 1:
                raise ConfigError(f"model.{key}={model[key]}: must be >= 1")
        _positive("model", model, "init_std")


@dataclass
class DataConfig:
    """The samples, from a factory named by ``_target_`` (``sweep.models.data``), the same on
    every rank. ``sweep.models.data.regression`` (the default, the report's): sample ``i`` is
    ``x = RandomState(seed_offset + i).randn(rows, in_size)`` and
    ``y = RandomState(seed_offset + i).randn(rows, out_size)``, float32.
    ``sweep.models.data.tokens``: random token ids and their next tokens (the transformer's).
    ``split`` says how a step's rows reach the ranks (:class:`DataSplit`).
    ``batch_size`` is the old name of ``train.batch_size`` (deprecated; :func:`normalize`).
    """

    _target_: str = affects(*ALL_NUMERIC, default="sweep.models.data.regression",
                            doc="Dotted path of the data factory: ``sweep.models.data.regression`` (the "
                                "report's), ``sweep.models.data.tokens``, or yours; it returns ``steps`` "
                                "pairs ``(inputs, targets)`` of numpy arrays.")
    seed_offset: int = affects(*ALL_NUMERIC, default=44,
                               doc="Sample ``i`` is drawn from ``RandomState(seed_offset + i)`` "
                                   "(in [0, 2**32)).")
    split: DataSplit = affects(*ALL_NUMERIC, default=DataSplit.replicated,
                               doc="``replicated``: the same sample on every rank (the report); ``sharded``: "
                                   "each rank its shard of a global batch, which the standalone copy trains on.")
    args: Dict[str, Any] = affects(*ALL_NUMERIC, default_factory=dict,
                                   doc="More keyword arguments of the data factory.")
    batch_size: Optional[int] = affects(default=None,
                                        doc="Deprecated: the old name of ``train.batch_size`` "
                                            "(moved there with a warning).")

    @staticmethod
    def check(data: Any) -> None:
        """Raises: ConfigError: ``seed_offset`` outside numpy's seeds."""
        if not 0 <= data.seed_offset < 2**32:
            raise ConfigError(f"data.seed_offset={data.seed_offset}: must be in [0, 2**32) (numpy's seeds)")


# train.loss's built-in names (train.loss is a str: it may also be a dotted path)
LOSSES = {
    "mse": "mean squared error (torch.nn.functional.mse_loss, mindspore.nn.MSELoss)",
    "cross_entropy": "mean over all targets of the logits' cross-entropy (F.cross_entropy on "
                     "(rows * positions, vocab) logits)",
}


class Wrap(str, enum.Enum):
    """Which modules become ``fully_shard`` units. ``root``: the whole model, one unit
    (the report). ``per_layer``: each layer first (the model's ``layers`` if it has them,
    torchtitan's convention, else each direct child with parameters), then the root:
    FSDP2's usual pattern."""

    root = "root"
    per_layer = "per_layer"


@dataclass
class ActivationCheckpointConfig:
    """Activation checkpointing, applied to both copies alike (``sweep.train.activations``):
    ``full`` wraps every ``layers`` unit, else each direct child with parameters (the units
    of ``wrap=per_layer``), in torch's non-reentrant ``checkpoint_wrapper``; ``selective``
    wraps the same modules with a policy (``create_selective_checkpoint_contexts``) that
    saves the outputs of ``save_ops``, recomputes ``recompute_ops`` and prefers to
    recompute the rest (torchtitan's selective AC). MindSpore: ``full`` is
    ``Cell.recompute()`` on those cells; ``selective`` is refused."""

    mode: CheckpointMode = affects(*ALL_NUMERIC, default=CheckpointMode.none,
                                   doc="``none``, ``full`` (recompute each wrapped module's forward in "
                                       "backward) or ``selective`` (recompute only ``recompute_ops``).")
    preserve_rng_state: bool = affects(*ALL_NUMERIC, default=True,
                                       doc="Replay the forward's random draws in the recompute (dropout masks "
                                           "equal); torch ``checkpoint(preserve_rng_state=)``.")
    save_ops: List[str] = affects(
        *ALL_NUMERIC, default_factory=lambda: ["aten.mm.default", "aten.addmm.default", "aten.bmm.default",
                                               "aten._scaled_dot_product_efficient_attention.default",
                                               "aten._scaled_dot_product_flash_attention.default",
                                               "aten._scaled_dot_product_flash_attention_for_cpu.default"],
        doc="``selective``: the aten ops whose outputs are saved (``CheckpointPolicy.MUST_SAVE``; "
            "torchtitan's default keeps the matmuls and attention).")
    recompute_ops: List[str] = affects(
        *ALL_NUMERIC, default_factory=list,
        doc="``selective``: aten ops always recomputed (``MUST_RECOMPUTE``, the report's ``policy_fn``); every "
            "op in neither list is recomputed by preference (``PREFER_RECOMPUTE``).")


@dataclass
class CompileConfig:
    """``torch.compile`` of both copies' models (after sharding), with ``backend``;
    ``compile=true`` on the command line is ``compile.enabled=true`` (``sweep.__main__``)."""

    enabled: bool = affects(*ALL_NUMERIC, default=False, doc="Compile both copies' models (torch only).")
    backend: str = affects(*ALL_NUMERIC, default="inductor",
                           doc="``torch.compile(backend=)``: ``inductor``, or ``aot_eager`` (no code generation: "
                               "fast on CPU), ``eager``.")


@dataclass
class GradScalerConfig:
    """Loss scaling for fp16 (``torch.amp.GradScaler``'s arguments; FSDP2 uses
    ``ShardedGradScaler``, whose inf check is all-reduced over the ranks)."""

    enabled: bool = affects(*ALL_NUMERIC, default=False,
                            doc="Scale the loss (fp16): the scaler's ``unscale_`` before clipping, its "
                                "``step`` and ``update``.")
    init_scale: float = affects(*ALL_NUMERIC, default=65536.0, doc="The initial scale (> 0).")
    growth_factor: float = affects(*ALL_NUMERIC, default=2.0,
                                   doc="The scale's factor after ``growth_interval`` steps without inf/NaN.")
    backoff_factor: float = affects(*ALL_NUMERIC, default=0.5, doc="The scale's factor after a step with inf/NaN.")
    growth_interval: int = affects(*ALL_NUMERIC, default=2000,
                                   doc="Steps without inf/NaN before the scale grows (>= 1).")


@dataclass
class TrainConfig:
    """The training step, the same in both copies (``sweep.train``): per optimizer step,
    ``grad_accum_steps`` micro-batches of ``batch_size / grad_accum_steps`` rows each, the
    loss of each divided by ``grad_accum_steps``; gradient sync is off on all but the last
    (FSDP2's ``set_requires_gradient_sync(False)``, DDP's ``no_sync``). Then, if set,
    gradient-norm clipping to ``clip_grad_norm`` (the global 2-norm; over sharded
    gradients the norm of the full tensors, ``torch.nn.utils.get_total_norm`` and
    ``DTensor.full_tensor``), the optimizer step (through ``grad_scaler`` if enabled).

    ``batch_size``: rows per step on each rank (``data.split=replicated``) or per rank
    of a global batch of ``batch_size * world_size`` (``sharded``)."""

    batch_size: int = affects(*ALL_NUMERIC, default=1,
                              doc="Rows per step on each rank (``data.split=replicated``), or per rank of "
                                  "a global batch of ``batch_size * world_size`` rows (``sharded``).")
    grad_accum_steps: int = affects(*ALL_NUMERIC, default=1,
                                    doc="Micro-batches per optimizer step (must divide ``batch_size``); "
                                        "gradient sync off on all but the last.")
    clip_grad_norm: Optional[float] = affects(*ALL_NUMERIC, default=None,
                                              doc="Max global gradient 2-norm (over sharded gradients: the "
                                                  "full tensors'); ``null``: no clipping.")
    loss: str = affects(*ALL_NUMERIC, default="mse",
                        doc="``mse``, ``cross_entropy``, or a dotted path to "
                            "``loss(output, target) -> scalar tensor``.")
    grad_scaler: GradScalerConfig = field(default_factory=GradScalerConfig)
    lr_scheduler: LrScheduler = affects(*ALL_NUMERIC, default=LrScheduler.none,
                                        doc="``none``, ``linear_warmup`` or ``cosine`` (after ``warmup_steps``), "
                                            "stepped once per optimizer step in both copies; the lr of each "
                                            "step is recorded.")
    warmup_steps: int = affects(*ALL_NUMERIC, default=0,
                                doc="Steps of linear warmup from ``lr / warmup_steps`` to ``lr`` (>= 0).")

    @staticmethod
    def check(train: Any) -> None:
        """Raises: ConfigError: a batch size < 1, a ``batch_size`` that ``grad_accum_steps``
        does not divide, a non-positive ``clip_grad_norm``, an unknown ``loss``, or a
        scaler setting out of range."""
        if train.batch_size < 1:
            raise ConfigError(f"train.batch_size={train.batch_size}: must be >= 1")
        if train.grad_accum_steps < 1:
            raise ConfigError(f"train.grad_accum_steps={train.grad_accum_steps}: must be >= 1")
        if train.batch_size % train.grad_accum_steps:
            raise ConfigError(
                f"train.batch_size={train.batch_size} is not a multiple of train.grad_accum_steps="
                f"{train.grad_accum_steps}: every micro-batch must have the same number of rows"
            )
        _positive("train", train, "clip_grad_norm", allow_none=True)
        loss = str(train.loss)
        if loss not in LOSSES and "." not in loss:
            raise ConfigError(
                f"train.loss={loss}: allowed: {', '.join(LOSSES)}, or a dotted path to "
                "a function loss(output, target) -> scalar tensor"
            )
        if train.get("warmup_steps", 0) < 0:
            raise ConfigError(f"train.warmup_steps={train.warmup_steps}: must be >= 0")
        scaler = train.grad_scaler
        _positive("train.grad_scaler", scaler, "init_scale", "growth_factor", "backoff_factor")
        if scaler.growth_interval < 1:
            raise ConfigError(f"train.grad_scaler.growth_interval={scaler.growth_interval}: must be >= 1")


@dataclass
class WeightsConfig:
    """How the two copies start from the same weights (see :class:`WeightTransfer`).
    ``copy`` is the old name of ``transfer`` (deprecated: it collides with
    ``DictConfig.copy``); :func:`normalize` moves it to ``transfer`` with a warning."""

    transfer: WeightTransfer = affects(*ALL_NUMERIC, default=WeightTransfer.independent,
                                       doc="How the standalone copy gets the distributed copy's initial "
                                           "weights: ``independent`` (a copy of the values), ``shared`` (shared "
                                           "storage: MindSpore ``set_data(param)`` as in the report, torch "
                                           "``.data =``), ``checkpoint`` (a checkpoint round trip).")
    copy: Optional[WeightTransfer] = affects(default=None,
                                             doc="Deprecated: the old name of ``weights.transfer`` (moved "
                                                 "there with a warning).")


@dataclass
class CompareConfig:
    """Tolerance of the per-step comparison, ``numpy.isclose`` semantics:
    ``|distributed - standalone| <= atol + rtol * |standalone|``."""

    rtol: float = affects(VERDICT, default=1e-4, doc="Relative tolerance (finite, >= 0).")
    atol: float = affects(VERDICT, default=1e-4, doc="Absolute tolerance (finite, >= 0).")
    noise_floor: float = affects(
        VERDICT, default=0.0,
        doc="Differences up to this size (loss units) do not count as the two runs parting "
            "(``first_diff_step``); 0.0: any difference counts (deterministic CPU runs are exact).")
    trace_after: int = affects(
        default=3,
        doc="A job whose copies differ is rerun up to this many steps past its first differing step with "
            "every gradient and weight recorded, to name the first tensor that differs "
            "(``sweep.analysis.trace``); 0: no tracing rerun.")
    onset_steps: int = affects(
        default=24,
        doc="The tracing rerun also records the weights this many steps past the first differing step, to "
            "classify the onset from the update differences (``sweep.analysis.trace.update_onset``: a period "
            "up to a third of it shows); 0: the onset from the losses only. Memory: two copies' weights per "
            "step, in the rank's host memory.")
    module_trace: bool = affects(
        default=True,
        doc="The tracing rerun also records every module's forward input and output and each output's "
            "gradient (summaries, ``sweep.train.torch_observe``) to name the first module that differs "
            "(``sweep.analysis.modules``); false: tensors only.")
    trace_until: Optional[int] = affects(
        default=None,
        doc="Set by the job in its tracing rerun only: record gradients and weights up to this step.")
    onset_until: Optional[int] = affects(
        default=None, doc="Set by the job in its tracing rerun only: record weights up to this step.")

    @staticmethod
    def check(compare: Any) -> None:
        """Raises: ConfigError: a tolerance that is negative or not finite (NaN would fail every step)."""
        for key in ("trace_after", "onset_steps"):
            if compare[key] < 0:
                raise ConfigError(f"compare.{key}={compare[key]}: must be >= 0 steps")
        for key in ("rtol", "atol", "noise_floor"):
            if not math.isfinite(compare[key]) or compare[key] < 0:
                raise ConfigError(f"compare.{key}={compare[key]}: must be a finite number >= 0")


class BaselinePrecision(str, enum.Enum):
    """The precision the standalone copy computes in (:class:`BaselineConfig`)."""

    float32 = "float32"
    policy = "policy"


@dataclass
class BaselineConfig:
    """What the distributed copy is compared with: the standalone copy's precision.

    ``precision=float32`` (the default, the report's setup): the standalone copy is a
    plain module, no mixed precision: it computes in the dtype its parameters were created
    in (``model.init_dtype``, float32 unless set), so a job whose ``mp_policy`` sets
    ``param_dtype`` differs from it by the precision itself.

    ``precision=policy``: the standalone copy computes forward and backward in the
    policy's ``param_dtype``, keeps ``model.init_dtype`` master weights and optimizer
    state, and applies ``output_dtype``, ``cast_forward_inputs``, ``reduce_dtype`` and
    the ``mp_policy.overrides`` as ``fully_shard`` does: it is itself ``fully_shard``-ed,
    with the same policy, wrapping (``wrap``) and ``reshard_after_forward``, on a mesh of
    one rank (``sweep.engines.torch_fsdp2.StandaloneFSDP2``, where the docstring says why
    that is "the policy on one device" and how ``reduce_dtype`` applies on one rank).
    Then the fields of role ``policy_baseline`` (the policy, ``wrap``,
    ``reshard_after_forward``) affect the baseline too (:func:`baseline_fields`). torch
    only; engines that declare it (``Engine.policy_baseline``: ``torch_fsdp2``); refused
    before launch elsewhere, one line naming why.
    """

    precision: BaselinePrecision = affects(
        BASELINE, default=BaselinePrecision.float32,
        doc="``float32``: a plain standalone copy, no mixed precision; ``policy``: the standalone copy runs "
            "``mp_policy`` (``fully_shard`` on a one-rank mesh; torch, ``torch_fsdp2`` only).")
    file: Optional[str] = affects(
        BASELINE, default=None,
        doc="A golden file (``python -m sweep.report DIR --export-golden FILE``): its standalone losses are the "
            "baseline instead of running the standalone copy, for built-in and command jobs alike; refused when "
            "its steps or config keys differ from the job's (``sweep.golden``, ``sweep.run.baseline.from_file``).")
    ignore_keys: List[str] = affects(
        default_factory=lambda: ["device", "framework", "baseline", "execution", "runner.command",
                                 "runner.baseline_command", "runner.parse", "runner.cwd"],
        doc="Config keys (and sections) a golden file's may differ in from the job's: by default where and how "
            "it ran, so a run on one machine is compared with a golden run from another.")


@dataclass
class ExecutionConfig:
    """How a job's ranks are run and supervised (not how they compute).

    ``timeout_s``: wall-clock limit of the whole launch in seconds; ``None`` means
    ``base_timeout_s + per_step_s * steps * world_size``. ``reuse_processes`` and
    ``reuse_baselines`` switch the fast path (``sweep.run.pool``,
    ``sweep.run.baseline``; the same losses, bit for bit on CPU).
    """

    timeout_s: Optional[float] = affects(
        default=None,
        doc="Wall-clock limit of the job's launch in seconds; ``null``: "
            "``base_timeout_s + per_step_s * steps * world_size``.")
    base_timeout_s: float = affects(default=180.0, doc="The fixed part of the default time limit (s, > 0).")
    per_step_s: float = affects(default=0.1,
                                doc="The default time limit's seconds per step and rank (> 0).")
    omp_num_threads: int = affects(
        LAUNCH, default=1,
        doc="``OMP_NUM_THREADS`` of every rank (>= 1); MindSpore on CPU: its kernels' thread count too "
            "(its own pool does not read ``OMP_NUM_THREADS``).")
    reuse_processes: bool = affects(
        default=True,
        doc="Jobs of one framework, world size and device share one distributed launch (``sweep.run.pool``): "
            "a multirun's jobs; a single run's job and its tracing rerun (under its dir's ``.pools/``). "
            "``false``: every launch is its own (``framework.launcher``).")
    reuse_baselines: bool = affects(
        default=True,
        doc="Multirun: each distinct standalone sequence is computed once and reused (``sweep.run.baseline``; "
            "never with ``weights.transfer=shared``).")

    @staticmethod
    def check(execution: Any) -> None:
        """Raises: ConfigError: a time that is not > 0, or fewer than 1 thread."""
        _positive("execution", execution, "timeout_s", allow_none=True)
        _positive("execution", execution, "base_timeout_s", "per_step_s")
        if execution.omp_num_threads < 1:
            raise ConfigError(f"execution.omp_num_threads={execution.omp_num_threads}: must be >= 1")


class RunnerName(str, enum.Enum):
    """What a job runs (:class:`RunnerConfig`)."""

    builtin = "builtin"
    command = "command"


@dataclass
class ParseConfig:
    """Where a ``runner=command`` job finds its losses (``sweep.run.loss_lines``).

    First the JSON-lines file the command writes at ``$SWEEP_LOSS_FILE`` (through
    ``sweep.log_loss``); if it holds nothing, the regexes, matched (``re.search``) against
    every line of the command's output (``logs/command.log``) and of the ``files``. Each
    regex has the named groups ``step`` and ``loss`` and may have ``rank``; a line
    without a rank takes it from its file's path (``rank_from_path``), else it stands for
    every rank (equal values printed by several ranks count once). The preset
    ``runner/parse=report`` reads the report's own lines (``step: 0, standalone loss:
    ...``, ``step: 0, fully_shard loss: ...``, torchrun's ``[default0]:`` prefix and
    msrun's ``worker_<rank>.log`` files).
    """

    standalone: Optional[str] = affects(
        *ALL_NUMERIC, default=None,
        doc="A regex with the named groups ``step`` and ``loss`` (and optionally ``rank``) matching a line that "
            "reports the standalone copy's loss; ``null``: the command reports none (a ``baseline_command`` or "
            "``baseline.file`` gives it).")
    distributed: Optional[str] = affects(
        *ALL_NUMERIC, default=None,
        doc="The same for the distributed copy's loss lines.")
    files: List[str] = affects(
        *ALL_NUMERIC, default_factory=list,
        doc="Glob patterns of further files the regexes read (relative to the job's dir, or absolute), e.g. "
            "msrun's ``msrun_log/worker_*.log`` under ``--log_dir=$SWEEP_JOB_DIR/msrun_log``; the command's own "
            "output is always read.")
    rank_from_path: Optional[str] = affects(
        *ALL_NUMERIC, default=None,
        doc="A regex with the named group ``rank``, searched in each file's path: the rank of the lines in it "
            "that name none (msrun: ``worker_(?P<rank>\\d+)\\.log``).")


@dataclass
class RunnerConfig:
    """What a job runs: the tool's own ranks (``builtin``), or the user's command.

    ``runner=command`` (``sweep.run.command``): the job runs ``command`` in a shell, in the
    directory ``sweep`` was started from, with the job's config interpolated (``${...}``,
    ``${world_size}`` included) and also given as the JSON file ``$SWEEP_JOB_CONFIG`` and
    as ``SWEEP_*`` environment variables (``SWEEP_MP_POLICY_NAME``,
    ``SWEEP_RUNNER_ARGS_<KEY>``, ...), and reads the losses back (:class:`ParseConfig`).
    The script's own factors are free keys under ``args`` (``+runner.args.reduce=mean,sum``):
    swept, isolated and attributed like the built-in ones. The comparison, the verdict, the
    repeats, the gate and the report are the built-in jobs'; what cannot be seen from
    outside (tensors, dtypes, modules, collectives) is recorded as not observed.
    """

    name: RunnerName = affects(*ALL_NUMERIC, default=RunnerName.builtin,
                               doc="``builtin``: the tool's ranks train both copies; ``command``: the user's "
                                   "command does (``sweep.run.command``).")
    command: Optional[str] = affects(
        *ALL_NUMERIC, default=None,
        doc="``runner=command``: the shell command of one job, with ``${...}`` interpolations of the job config, "
            "e.g. ``torchrun --standalone --nproc-per-node=${world_size} --tee 3 repro.py --steps ${steps}``.")
    baseline_command: Optional[str] = affects(
        BASELINE, default=None,
        doc="The standalone run, if the command does not report the standalone copy itself; run once per "
            "distinct resolved command and ``baseline_keys`` values in a multirun and reused.")
    baseline_keys: List[str] = affects(
        BASELINE, default_factory=list,
        doc="Dotted config keys the ``baseline_command``'s losses depend on besides what its command line "
            "interpolates (read from ``$SWEEP_JOB_CONFIG`` or the environment): its cache key, and what a "
            "golden file must match (``baseline.file``).")
    args: Dict[str, Any] = affects(
        *ALL_NUMERIC, default_factory=dict,
        doc="The script's own factors, free keys (``+runner.args.reduce=sum``): interpolate them in the command "
            "(``${runner.args.reduce}``) or read ``SWEEP_RUNNER_ARGS_REDUCE``.")
    parse: ParseConfig = field(default_factory=ParseConfig)
    cwd: Optional[str] = affects(
        default=None, doc="The command's working directory; ``null``: the directory ``sweep`` was started from.")

    @staticmethod
    def check(runner: Any) -> None:
        """Raises: ConfigError: ``runner=command`` without a ``command``; a ``parse`` regex
        that does not compile or lacks its named groups (``step`` and ``loss``;
        ``rank_from_path``: ``rank``)."""
        import re

        if _value(runner.name) != RunnerName.command.value:
            return
        if not runner.command or not str(runner.command).strip():
            raise ConfigError("runner=command needs runner.command: the shell command of one job, e.g. "
                              "runner.command='torchrun --nproc-per-node=${world_size} repro.py'")
        for key, groups in (("standalone", ("step", "loss")), ("distributed", ("step", "loss")),
                            ("rank_from_path", ("rank",))):
            pattern = runner.parse[key]
            if pattern is None:
                continue
            try:
                compiled = re.compile(str(pattern))
            except re.error as exc:
                raise ConfigError(f"runner.parse.{key}={pattern!r}: not a regex ({exc})") from None
            lacking = [g for g in groups if g not in compiled.groupindex]
            if lacking:
                raise ConfigError(f"runner.parse.{key}={pattern!r}: needs the named group"
                                  f"{'s' if len(lacking) > 1 else ''} {', '.join(f'(?P<{g}>...)' for g in lacking)}")


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
    train: TrainConfig = field(default_factory=TrainConfig)
    compare: CompareConfig = field(default_factory=CompareConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    weights: WeightsConfig = field(default_factory=WeightsConfig)
    order: Order = affects(DISTRIBUTED, default=Order.standalone_first,
                           doc="Which copy trains first in a rank, or ``separate``: the standalone copy in a "
                               "process of its own.")
    zero_grad: bool = affects(DISTRIBUTED, default=True,
                              doc="Clear the distributed copy's gradients every step (a no-op for MindSpore's "
                                  "functional gradients).")
    reshard_after_forward: Union[bool, int] = affects(
        DISTRIBUTED, POLICY_BASELINE, default=True,
        doc="``fully_shard``'s: free the unsharded parameters after forward and gather them again for "
            "backward (``true``), keep them (``false``), or an int: reshard to groups of that many ranks "
            "(FSDP2; a divisor of the shard dim other than 1 and itself).")
    activation_checkpoint: ActivationCheckpointConfig = field(default_factory=ActivationCheckpointConfig)
    activation_offload: bool = affects(*ALL_NUMERIC, default=False,
                                       doc="Keep the activations saved for backward on the CPU in both copies "
                                           "(``torch.autograd.graph.save_on_cpu``; torch only).")
    offload_policy: OffloadPolicy = affects(DISTRIBUTED, POLICY_BASELINE, default=OffloadPolicy.none,
                                            doc="``fully_shard``'s ``offload_policy``: ``none`` or ``cpu`` "
                                                "(``CPUOffloadPolicy``; FSDP2 only).")
    compile: CompileConfig = field(default_factory=CompileConfig)
    wrap: Wrap = affects(DISTRIBUTED, POLICY_BASELINE, default=Wrap.root,
                         doc="``fully_shard`` units: ``root`` (the whole model) or ``per_layer`` (each layer, "
                             "then the root).")
    baseline: BaselineConfig = field(default_factory=BaselineConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    deterministic: bool = affects(*ALL_NUMERIC, default=True,
                                  doc="Deterministic algorithms in the ranks (torch "
                                      "``use_deterministic_algorithms``, MindSpore ``set_deterministic``).")
    seed: int = affects(*ALL_NUMERIC, default=42,
                        doc="The ranks' seed (``torch.manual_seed`` / ``mindspore.set_seed``, and numpy's): "
                            "the model's initialisation and each copy's random stream (in [0, 2**32)).")
    steps: int = affects(*ALL_NUMERIC, default=1000, doc="Optimizer steps each copy trains (> 0).")
    device: Device = affects(*ALL_NUMERIC, LAUNCH, default=Device.cpu,
                             doc="Where the ranks compute; rank ``r`` uses local device ``r``.")
    world_size: Optional[int] = affects(DISTRIBUTED, default=None,
                                        doc="Number of ranks; ``null``: the product of ``mesh.mesh_shape`` "
                                            "(which it must equal when set).")
    repeat: int = affects(
        VERDICT, default=1,
        doc="Run each job this many times (different launches, same seeds; ``sweep.run.job``): repeats that "
            "disagree mark the job nondeterministic. No number of one run depends on it, the verdict does "
            "(and a resumed record must have as many repeats).")
    resume: bool = affects(
        default=False,
        doc="Re-running a sweep into the same ``hydra.sweep.dir``: skip jobs whose ``result.json`` is complete "
            "(ok/fail) for the same config, run the rest.")
    replace_grid: bool = affects(
        default=False,
        doc="Running another grid into a sweep dir that holds one: move the old jobs aside "
            "(``SWEEP_DIR/.replaced/<time>/``) instead of refusing (``sweep.run.sweep_dir``).")
    gate: bool = affects(
        default=False,
        doc="CI gate: a multirun exits 1 when any job fails, errors, times out or is missing, or the verdict "
            "names a culprit (default: 0 once every job has a result).")

    @staticmethod
    def check(cfg: Any) -> None:
        """The top-level scalars. Raises: ConfigError: ``steps`` < 1, or a ``seed`` outside
        [0, 2**32) (numpy's and MindSpore's seeds)."""
        if cfg.steps <= 0:
            raise ConfigError(f"steps={cfg.steps}: must be > 0")
        if cfg.get("repeat", 1) < 1:
            raise ConfigError(f"repeat={cfg.repeat}: must be >= 1 (runs of each job)")
        if not 0 <= cfg.seed < 2**32:
            raise ConfigError(f"seed={cfg.seed}: must be in [0, 2**32) (numpy's, torch's and MindSpore's seeds)")
        if _value((cfg.get("model") or {}).get("init", "eager")) == "meta":
            if _value(cfg.weights.transfer) == "shared":
                raise ConfigError("model.init=meta with weights.transfer=shared: the distributed copy's weights are "
                                  "sharded, there is no storage to share; use independent or checkpoint")
            if _value(cfg.order) == "separate":
                raise ConfigError("model.init=meta with order=separate: the standalone process has no distributed "
                                  "copy to take its initial weights from; use standalone_first or distributed_first")


SECTION_CHECKS = {
    "mp_policy": MixedPrecisionPolicyConfig.check,
    "optimizer": OptimizerConfig.check,
    "model": ModelConfig.check,
    "data": DataConfig.check,
    "train": TrainConfig.check,
    "compare": CompareConfig.check,
    "execution": ExecutionConfig.check,
    "runner": RunnerConfig.check,
}


def register_configs() -> None:
    """Store the schema as ``base_config`` for ``conf/config.yaml``'s defaults list, and
    the launcher configs the tool registers over a plugin's (``sweep.config.launchers``)."""
    from sweep.config import launchers

    ConfigStore.instance().store(name="base_config", node=SweepConfig)
    launchers.register()


def fields_with(role: str, schema: type = SweepConfig, prefix: str = "") -> List[str]:
    """Dotted paths of the fields that declare ``role`` (see the module docstring), in
    schema order. A section field without a declaration of its own takes its fields'.

    Raises:
        ValueError: an unknown role, or a field with no declaration at all.
    """
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; allowed: {', '.join(ROLES)}")
    paths = []
    for f in dataclasses.fields(schema):
        path = prefix + f.name
        if "affects" in f.metadata:
            if role in f.metadata["affects"]:
                paths.append(path)
        elif dataclasses.is_dataclass(f.type) or (isinstance(f.type, str) and f.type in _SECTIONS):
            paths.extend(fields_with(role, _SECTIONS.get(f.type, f.type), path + "."))
        else:
            raise ValueError(f"{path} declares no role (sweep.config.schema.affects)")
    return paths


def baseline_fields(config: Dict[str, Any]) -> List[str]:
    """Dotted paths of the fields a job's standalone sequence depends on, for this
    ``config`` (a plain dict, :func:`to_container`): those of role ``baseline``, and with
    ``baseline.precision=policy`` those of role ``policy_baseline`` too (the policy and
    the wrapping its standalone copy runs), and with ``model.init=meta`` those of role
    ``distributed`` too (its initial weights are the distributed copy's, drawn on the
    shards), in schema order."""
    paths = fields_with(BASELINE)
    if (config.get("baseline") or {}).get("precision") == BaselinePrecision.policy.value:
        paths += [p for p in fields_with(POLICY_BASELINE) if p not in paths]
    if (config.get("model") or {}).get("init") == ModelInit.meta.value:
        # the standalone copy starts from the distributed copy's initial weights, drawn on its
        # sharded parameters: they may depend on everything that shapes the shards
        paths += [p for p in fields_with(DISTRIBUTED) if p not in paths]
    return paths


_SECTIONS = {
    cls.__name__: cls
    for cls in (FrameworkConfig, EngineConfig, MixedPrecisionPolicyConfig, MeshConfig, OptimizerConfig, ModelConfig,
                DataConfig, TrainConfig, GradScalerConfig, WeightsConfig, CompareConfig, BaselineConfig,
                ExecutionConfig, ActivationCheckpointConfig, CompileConfig, RunnerConfig, ParseConfig)
}


def select(config: Dict[str, Any], paths: List[str]) -> Dict[str, Any]:
    """``{path: value}`` of a plain config dict (``to_container``) for dotted ``paths``."""
    out = {}
    for path in paths:
        node: Any = config
        for part in path.split("."):
            node = node[part]
        out[path] = node
    return out


def world_size(cfg: DictConfig | SweepConfig) -> int:
    """Number of ranks of the job: ``world_size`` if set, else ``prod(mesh.mesh_shape)``."""
    if cfg.world_size is not None:
        return int(cfg.world_size)
    return math.prod(int(n) for n in cfg.mesh.mesh_shape)


def normalize(cfg: DictConfig) -> None:
    """Fold deprecated keys into their new names, in place, each with a ``FutureWarning``:
    ``weights.copy`` -> ``weights.transfer``, ``data.batch_size`` -> ``train.batch_size``;
    and with ``runner=command`` set ``world_size`` from the mesh when it is ``null``, so
    that a command's ``${world_size}`` is the number of ranks."""
    runner = cfg.get("runner")
    if runner is not None and _value(runner.name) == RunnerName.command.value and cfg.world_size is None:
        cfg.world_size = world_size(cfg)
    for section, old_key, new_section, new_key in (("weights", "copy", "weights", "transfer"),
                                                   ("data", "batch_size", "train", "batch_size")):
        old = cfg[section][old_key]
        if old is None:
            continue
        warnings.warn(f"{section}.{old_key} is deprecated: use {new_section}.{new_key} (same values)",
                      FutureWarning, stacklevel=2)
        with open_dict(cfg):
            cfg[new_section][new_key] = old
            cfg[section][old_key] = None


def unknown_keys(cfg: Any, schema: type = SweepConfig, prefix: str = "") -> List[str]:
    """Dotted keys of ``cfg`` that no schema field defines. Hydra's ``+key=value``
    adds a key even to a structured config, so this is checked explicitly; the values
    of ``Dict`` fields (``framework.env``, ``engine.options``, ...) are free here and
    checked by their owner."""
    names = {f.name: f for f in dataclasses.fields(schema)}
    found = []
    for key in cfg.keys():
        path = prefix + str(key)
        f = names.get(str(key))
        if f is None:
            found.append(path)
            continue
        section = _SECTIONS.get(f.type) if isinstance(f.type, str) else None
        if section is not None and isinstance(cfg[key], DictConfig):
            found.extend(unknown_keys(cfg[key], section, path + "."))
    return found


def check_fields(cfg: DictConfig) -> int:
    """The checks that need nothing but the config: no key that no schema defines, the
    top-level scalars (:meth:`SweepConfig.check`), each section's own
    (``SECTION_CHECKS``) and the mesh against ``world_size`` (:meth:`MeshConfig.check`).
    The components' own checks (framework, engine, model, data) run after these, in
    ``sweep.run.checks``; this module imports none of them.

    Returns:
        The job's number of ranks.

    Raises:
        ConfigError: one line naming the field, the value and what is allowed.
    """
    unknown = unknown_keys(cfg)
    if unknown:
        raise ConfigError(
            f"{', '.join(unknown)}: no schema defines {'these keys' if len(unknown) > 1 else 'this key'} "
            "(added with +? see sweep/config/schema.py for the fields)"
        )
    SweepConfig.check(cfg)
    for name, check in SECTION_CHECKS.items():
        check(cfg[name])
    return MeshConfig.check(cfg.mesh, cfg.world_size)


def to_container(cfg: DictConfig) -> dict:
    """The resolved job config as plain Python (enums as their string values). Enums
    become strings before interpolations resolve, so ``${mp_policy.param_dtype}`` inside a
    string gives ``bfloat16``, not ``DType.bfloat16``; inside ``runner.command`` and
    ``runner.baseline_command`` booleans and ``null`` are spelled as typed (``true``,
    ``false``, ``null``), as a script's flags expect them."""
    plain = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)
    resolved = OmegaConf.to_container(OmegaConf.create(plain), resolve=True)
    runner = resolved.get("runner") if isinstance(resolved, dict) else None
    if isinstance(runner, dict) and any(isinstance(runner.get(k), str) for k in COMMAND_KEYS):
        # a command line spells values as they are typed: true, false, null (not True, None)
        spelled = OmegaConf.create(_spelled(plain))
        for key in COMMAND_KEYS:
            if isinstance(runner.get(key), str):
                runner[key] = str(spelled.runner[key])
    return resolved


COMMAND_KEYS = ("command", "baseline_command")  # runner's: shell commands with ${...} interpolations


def _spelled(node: Any) -> Any:
    """``node`` (plain) with booleans and ``None`` as the strings YAML spells them."""
    if isinstance(node, dict):
        return {k: _spelled(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_spelled(v) for v in node]
    if isinstance(node, bool):
        return "true" if node else "false"
    return "null" if node is None else node
