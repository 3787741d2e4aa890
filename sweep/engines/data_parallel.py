"""Control arm without sharding: every rank holds the full model and gradients are
averaged over all ``world_size`` ranks (the mesh only sets ``world_size``). No
mixed-precision policy: a policy that sets dtypes is rejected before launch.

torch: ``DistributedDataParallel`` (all-reduce of gradients during backward).
MindSpore: ``nn.DistributedGradReducer(mean=True, degree=world_size)``: AllReduce
(sum) then division, which MindSpore has on CPU too.
"""

from __future__ import annotations

import contextlib
from typing import Any, ContextManager, Dict

from sweep.config.enums import as_str
from sweep.engines.base import MindSporeEngine, TorchEngine
from sweep.errors import ConfigError


def _no_policy(cfg: Any) -> None:
    """Raises: ConfigError: ``mp_policy`` sets a dtype or per-module overrides, or
    ``wrap`` is not ``root`` (data parallel has no policy and no sharding units)."""
    policy = cfg.mp_policy
    if any(policy[k] is not None for k in ("param_dtype", "reduce_dtype", "output_dtype")):
        raise ConfigError(
            f"engine={cfg.engine.name} has no mixed-precision policy; mp_policy={policy.name} sets dtypes "
            "(use mp_policy=fp32 or cast_forward_inputs)"
        )
    if policy.get("overrides"):
        raise ConfigError(f"engine={cfg.engine.name} has no mixed-precision policy, so no per-module one: "
                          f"mp_policy.overrides={dict(policy.overrides)}")
    if as_str(cfg.wrap) != "root":
        raise ConfigError(f"engine={cfg.engine.name} replicates the whole model: wrap={cfg.wrap.value if hasattr(cfg.wrap, 'value') else cfg.wrap} "
                          "has no meaning without sharding units (use wrap=root)")


def _no_policy_baseline(cfg: Any) -> None:
    """Raises: ConfigError: ``baseline.precision=policy``: with no policy, this copy computes
    in the parameters' dtype, which the default baseline already does; refused rather than
    run as a float32 baseline under another name."""
    if as_str((cfg.get("baseline") or {}).get("precision", "float32")) == "policy":
        raise ConfigError(f"baseline.precision=policy: engine={cfg.engine.name} has no mixed-precision policy (its copy "
                          "computes in the parameters' dtype, as the default baseline does); use baseline.precision=float32")


class TorchDDP(TorchEngine):
    check_config = staticmethod(_no_policy)
    check_baseline = staticmethod(_no_policy_baseline)
    unused_fields = ("reshard_after_forward", "mp_policy.cast_forward_inputs")
    collectives_unchecked = "DDP reduces its gradient buckets from C++, out of the ledger's sight"

    def parallelize(self, model: Any) -> Any:
        from torch.nn.parallel import DistributedDataParallel

        device_ids = None if self.device.type == "cpu" else [self.device.index]
        return DistributedDataParallel(model, device_ids=device_ids)

    def carried_params(self, model: Any) -> Any:
        """The trainable parameters DDP's reducer carries: every one but those of its
        ``parameters_to_ignore`` (``DistributedDataParallel._set_params_and_buffers_to_ignore_for_model``),
        whose gradients it never reduces; names as ``named_parameters`` gives them (DDP's
        ``module.`` prefix included; its ignore list names them without it)."""
        ignored = {str(n) for n in getattr(model, "parameters_to_ignore", None) or ()}
        return [n for n, p in model.named_parameters()
                if p.requires_grad and n not in ignored and n.partition(".")[2] not in ignored]


class MindSporeGradReducer(MindSporeEngine):
    check_config = staticmethod(_no_policy)
    check_baseline = staticmethod(_no_policy_baseline)
    unused_fields = ("reshard_after_forward", "mp_policy.cast_forward_inputs")

    collectives_unchecked = ("nn.DistributedGradReducer all-reduces inside a compiled graph (@jit), out of "
                             "Python's sight: no call recorded")

    def __init__(self, cfg: Any, **kwargs: Any) -> None:
        super().__init__(cfg, **kwargs)
        self._reducer = None

    def parallelize(self, net: Any) -> Any:
        return net

    def observe_reduce(self, observed: Dict[str, str]) -> ContextManager[None]:
        """Records ``float32``: ``nn.DistributedGradReducer`` casts every gradient to float32
        before its AllReduce and back after (its ``construct``, MindSpore 2.x:
        ``mindspore/nn/wrap/grad_reducer.py``). That ``construct`` is a compiled graph
        (``@jit``), so its AllReduce cannot be watched from Python: this is the reduction's
        dtype by the library's construction, not a watched call."""
        observed.setdefault("reduce", "float32")
        return contextlib.nullcontext()

    def reduce_grads(self, optimizer: Any, grads: Any) -> Any:
        """The mean of ``grads`` over the ranks (one AllReduce per gradient): applied once
        per optimizer step, after any accumulation, so the inner micro-steps never sync."""
        if self._reducer is None:
            from mindspore import nn
            from mindspore.communication import GlobalComm

            self._reducer = nn.DistributedGradReducer(
                optimizer.parameters, mean=True, degree=self.world_size, group=GlobalComm.WORLD_COMM_GROUP
            )
        return self._reducer(grads)
