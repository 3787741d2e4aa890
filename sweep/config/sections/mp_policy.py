"""The ``mp_policy`` section (``conf/mp_policy/``): the mixed-precision policy, the
dtypes it may name (:class:`DType`), and the check of its per-module overrides."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Dict, Optional

from omegaconf import MISSING, DictConfig

from sweep.config.roles import DISTRIBUTED, POLICY_BASELINE, affects
from sweep.errors import ConfigError


class DType(str, enum.Enum):
    """Floating dtypes a ``MixedPrecisionPolicy`` may name (``None`` = keep the parameter's)."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


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
