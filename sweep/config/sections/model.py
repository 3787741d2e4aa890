"""The ``model`` section (``conf/model/``): the model both copies train, its sizes,
initialisation (:class:`ModelInit`), frozen and tied parameters."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Dict, List

from sweep.config.roles import ALL_NUMERIC, WORKLOAD, affects
from sweep.config.sections._checks import _positive
from sweep.config.sections.mp_policy import DType
from sweep.errors import ConfigError


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

    name: str = affects(*ALL_NUMERIC, WORKLOAD, default="mlp", doc="Labels the model (the preset's name, or yours).")
    _target_: str = affects(*ALL_NUMERIC, WORKLOAD, default="sweep.models.mlp",
                            doc="Dotted path of the model factory, called through ``hydra.utils.instantiate`` "
                                "once per copy with ``framework=`` and the keyword arguments its signature names.")
    in_size: int = affects(*ALL_NUMERIC, WORKLOAD, default=32, doc="Input features (>= 1).")
    hidden_size: int = affects(*ALL_NUMERIC, WORKLOAD, default=64, doc="Hidden width (>= 1).")
    out_size: int = affects(*ALL_NUMERIC, WORKLOAD, default=24, doc="Output features (>= 1).")
    init_std: float = affects(*ALL_NUMERIC, WORKLOAD, default=0.01,
                              doc="Weights ~ N(0, init_std^2), biases zero; 0.01 is MindSpore's "
                                  "``weight_init=\"normal\"``.")
    init_dtype: DType = affects(*ALL_NUMERIC, WORKLOAD, default=DType.float32,
                                doc="The dtype the parameters are created in, in both copies: the master "
                                    "weights' and the optimizer state's (not ``mp_policy.param_dtype``).")
    args: Dict[str, Any] = affects(*ALL_NUMERIC, WORKLOAD, default_factory=dict,
                                   doc="More keyword arguments of the factory (e.g. the transformer's "
                                       "``num_layers``).")
    init: ModelInit = affects(*ALL_NUMERIC, default=ModelInit.eager,
                              doc="``eager``, or ``meta``: the distributed copy is built on the meta device, "
                                  "sharded, materialised (``to_empty``) and initialised "
                                  "(``reset_parameters`` under ``seed``); the standalone copy gets its initial "
                                  "weights per ``weights.transfer`` (torch, FSDP2 engines).")
    frozen: List[str] = affects(*ALL_NUMERIC, WORKLOAD, default_factory=list,
                                doc="Parameter name patterns (``fnmatch``, e.g. ``layer0.*``) trained with "
                                    "``requires_grad=False`` in both copies.")
    tie: List[List[str]] = affects(*ALL_NUMERIC, WORKLOAD, default_factory=list,
                                   doc="Pairs ``[a, b]`` of parameter names: ``b`` becomes ``a`` (one Parameter) "
                                       "in both copies, before sharding; shapes must match.")

    @staticmethod
    def check(model: Any) -> None:
        """Raises: ConfigError: a size < 1 or a non-positive ``init_std``."""
        for key in ("in_size", "hidden_size", "out_size"):
            if model[key] < 1:
                raise ConfigError(f"model.{key}={model[key]}: must be >= 1")
        _positive("model", model, "init_std")
