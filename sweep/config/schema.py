"""Structured config of one sweep job: the sections composed into :class:`SweepConfig`,
the top-level fields, the checks across sections, and the field lists derived from the
roles.

Every YAML file under ``sweep/config/conf/`` merges into one of these dataclasses, so OmegaConf
rejects an unknown key (also one added with ``+``), a wrong type or a value outside an
``Enum`` when the job's config is composed, before any process starts. Each section's
dataclass lives in a module named for it, as the ``conf/`` groups are
(``sweep.config.sections``: ``framework``, ``engine``, ``mp_policy``, ``mesh``, ...), with
what a type cannot say: its own checks (its ``check`` classmethod: the mesh owns
``world_size``, the tolerance owns its range). This module composes them into
:class:`SweepConfig`, checks the top-level scalars and the rules across sections
(:meth:`SweepConfig.check`) and runs each section's own (:func:`check_fields`); every
name of the sections and of the roles is importable from here too. The framework and the
engine check their own rules (``sweep.frameworks``, ``sweep.engines``, ``sweep.models``);
``sweep.run.checks.check`` runs them all, in the job process, before it launches ranks.
This module imports no framework, engine or model: validation flows down, from the job
to each component.

**Field roles.** Every field declares what it affects (``sweep.config.roles``:
:func:`affects`, stored in the dataclass field's metadata): ``baseline``,
``distributed``, ``verdict``, ``launch``, ``policy_baseline`` (:func:`baseline_fields`);
a field with none of them changes no number (time limits, reuse switches). Baseline reuse
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

# the roles, and every section's dataclass and enums, importable from here as before
from sweep.config.roles import (  # noqa: F401
    ALL_NUMERIC,
    BASELINE,
    DISTRIBUTED,
    LAUNCH,
    NUMERIC,
    POLICY_BASELINE,
    ROLES,
    VERDICT,
    WORKLOAD,
    affects,
)
from sweep.config.sections._checks import _value
from sweep.config.sections.activation_checkpoint import ActivationCheckpointConfig, CheckpointMode  # noqa: F401
from sweep.config.sections.baseline import BaselineConfig, BaselinePrecision, foreign_framework
from sweep.config.sections.compare import CompareConfig
from sweep.config.sections.compile import CompileConfig
from sweep.config.sections.data import DataConfig, DataSplit  # noqa: F401
from sweep.config.sections.engine import EngineConfig
from sweep.config.sections.execution import ExecutionConfig
from sweep.config.sections.framework import FrameworkConfig, GradApi  # noqa: F401
from sweep.config.sections.mesh import MeshConfig
from sweep.config.sections.model import ModelConfig, ModelInit
from sweep.config.sections.mp_policy import DType, MixedPrecisionPolicyConfig  # noqa: F401
from sweep.config.sections.optimizer import OptimizerConfig, OptimizerName  # noqa: F401
from sweep.config.sections.runner import COMMAND_KEYS, ParseConfig, RunnerConfig, RunnerName
from sweep.config.sections.train import LOSSES, GradScalerConfig, LrScheduler, TrainConfig  # noqa: F401
from sweep.config.sections.runtime import RuntimeConfig  # noqa: F401
from sweep.config.sections.weights import WeightsConfig, WeightTransfer  # noqa: F401
from sweep.errors import ConfigError

__all__ = ["ConfigError", "SweepConfig", "check_fields", "world_size", "fields_with", "to_container"]


class Device(str, enum.Enum):
    cpu = "cpu"
    npu = "npu"
    cuda = "cuda"


class Order(str, enum.Enum):
    """Which copy trains first in a rank, or ``separate``: the standalone copy trains
    in a process of its own (no launcher, no process group)."""

    standalone_first = "standalone_first"
    distributed_first = "distributed_first"
    separate = "separate"


class OffloadPolicy(str, enum.Enum):
    """``offload_policy``: ``none``, or ``cpu`` (FSDP2's ``CPUOffloadPolicy``: sharded parameters,
    gradients and the optimizer step on the CPU)."""

    none = "none"
    cpu = "cpu"


class Wrap(str, enum.Enum):
    """Which modules become ``fully_shard`` units. ``root``: the whole model, one unit
    (the report). ``per_layer``: each layer first (the model's ``layers`` if it has them,
    torchtitan's convention, else each direct child with parameters, a ``ModuleList``'s or
    ``ModuleDict``'s entries in its place), then the root:
    FSDP2's usual pattern."""

    root = "root"
    per_layer = "per_layer"


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
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    order: Order = affects(DISTRIBUTED, BASELINE, default=Order.standalone_first,
                           doc="Which copy trains first in a rank, or ``separate``: the standalone copy in a "
                               "process of its own. A baseline role: the standalone copy's losses can depend "
                               "on where it trains (a model that branches on the distributed state, a draw "
                               "left by the copy before it), so each order computes its own baseline.")
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
    seed: int = affects(*ALL_NUMERIC, WORKLOAD, default=42,
                        doc="The ranks' seed (``torch.manual_seed`` / ``mindspore.set_seed``, and numpy's): "
                            "the model's initialisation and each copy's random stream (in [0, 2**32)).")
    steps: int = affects(*ALL_NUMERIC, WORKLOAD, default=1000, doc="Optimizer steps each copy trains (> 0).")
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
        """The top-level scalars, and the settings that exclude each other across sections.

        Raises:
            ConfigError: ``steps`` < 1, a ``seed`` outside [0, 2**32) (numpy's and
                MindSpore's seeds), ``model.init=meta`` with ``weights.transfer=shared`` or
                ``order=separate``, or a ``baseline.framework`` other than the job's with a
                setting of :data:`CROSS_CLASHES` (one line naming both and why).
        """
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
        other = foreign_framework(cfg)
        if other is not None:
            clash = {"baseline.file": bool(cfg.baseline.get("file")),
                     "baseline.precision=policy": _value(cfg.baseline.get("precision")) == "policy",
                     "weights.transfer=shared": _value(cfg.weights.transfer) == "shared",
                     "runner=command": _value((cfg.get("runner") or {}).get("name")) == "command"}
            for setting, is_set in clash.items():
                if is_set:
                    raise ConfigError(f"baseline.framework={other} with {setting}: "
                                      + CROSS_CLASHES[setting.split("=")[0]])


# Why each setting cannot go with a standalone copy in another framework (SweepConfig.check).
CROSS_CLASHES = {
    "baseline.file": "the golden file's losses are the baseline, no standalone copy trains",
    "baseline.precision": "the policy baseline is fully_shard on one rank, a torch engine; the other framework's "
                          "standalone copy is a plain module",
    "weights.transfer": "two frameworks' copies cannot share storage; use independent",
    "runner": "the command trains its own copies; baseline.framework is for built-in jobs",
}

SECTION_CHECKS = {
    "mp_policy": MixedPrecisionPolicyConfig.check,
    "optimizer": OptimizerConfig.check,
    "model": ModelConfig.check,
    "data": DataConfig.check,
    "train": TrainConfig.check,
    "compare": CompareConfig.check,
    "execution": ExecutionConfig.check,
    "runner": RunnerConfig.check,
    "runtime": RuntimeConfig.check,
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


def field_default(path: str, schema: type = SweepConfig) -> Any:
    """The schema's default of the dotted field ``path`` (``mp_policy.cast_forward_inputs``:
    ``True``); ``dataclasses.MISSING`` where it has none or ``path`` names no field."""
    head, _, rest = path.partition(".")
    for f in dataclasses.fields(schema):
        if f.name != head:
            continue
        if rest:
            section = _SECTIONS.get(f.type, f.type) if isinstance(f.type, str) else f.type
            return field_default(rest, section) if dataclasses.is_dataclass(section) else dataclasses.MISSING
        return f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
    return dataclasses.MISSING


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
                DataConfig, TrainConfig, GradScalerConfig, WeightsConfig, RuntimeConfig, CompareConfig, BaselineConfig,
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
    that a command's ``${world_size}`` is the number of ranks; ``baseline.framework`` equal
    to ``framework.name`` becomes ``null`` (the same baseline: one cache key, and a non-null
    value always means another framework)."""
    baseline, framework = cfg.get("baseline"), cfg.get("framework")
    if baseline is not None and framework is not None and baseline.get("framework") is not None \
            and str(baseline.framework) == str(framework.get("name")):
        baseline.framework = None
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


def _closest(cfg: DictConfig, unknown: List[str]) -> str:
    """``did you mean compare.rtol? `` for the first of ``unknown`` (dotted keys) with a close
    sibling that a schema defines (``difflib``); ``""`` for none."""
    import difflib

    for path in unknown:
        parent, _, leaf = path.rpartition(".")
        node = OmegaConf.select(cfg, parent) if parent else cfg
        known = [str(k) for k in (node.keys() if hasattr(node, "keys") else []) if
                 (f"{parent}.{k}" if parent else str(k)) not in unknown]
        close = difflib.get_close_matches(leaf, known, n=1)
        if close:
            return f"did you mean {(parent + '.' if parent else '') + close[0]}? "
    return ""


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
            f"({_closest(cfg, unknown)}added with +? see sweep/config/schema.py and sweep/config/sections/ for the "
            "fields)"
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


def _spelled(node: Any) -> Any:
    """``node`` (plain) with booleans and ``None`` as the strings YAML spells them."""
    if isinstance(node, dict):
        return {k: _spelled(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_spelled(v) for v in node]
    if isinstance(node, bool):
        return "true" if node else "false"
    return "null" if node is None else node
