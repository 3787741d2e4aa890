"""PyTorch's native FSDP2: ``torch.distributed.fsdp.fully_shard`` on the root module,
over ``init_device_mesh(device_type, mesh_shape, mesh_dim_names)``. A 2-D mesh gives
HSDP (replicate over dim 0, shard over dim 1), per the ``fully_shard`` docs.

Also the standalone copy of ``baseline.precision=policy`` (:class:`StandaloneFSDP2`):
the same ``fully_shard`` calls on a mesh of one rank."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

from sweep.engines.base import StandaloneTorch, TorchEngine, dtype_name
from sweep.errors import ConfigError


def torch_mp_policy(mp_cfg: Any) -> Any:
    """``MixedPrecisionPolicy`` from the ``mp_policy`` config section (dtype names -> torch dtypes)."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    def to_dtype(value: Any) -> Any:
        name = dtype_name(value)
        return None if name is None else getattr(torch, name)

    return MixedPrecisionPolicy(
        param_dtype=to_dtype(mp_cfg.param_dtype),
        reduce_dtype=to_dtype(mp_cfg.reduce_dtype),
        output_dtype=to_dtype(mp_cfg.output_dtype),
        cast_forward_inputs=bool(mp_cfg.cast_forward_inputs),
    )


def shard_on(model: Any, cfg: Any, mesh: Any, notes: Optional[List[str]] = None) -> tuple:
    """``fully_shard`` every unit of ``sweep.engines.wrapping`` (``wrap``,
    ``mp_policy.overrides``), then the root, over ``mesh``, with ``reshard_after_forward``
    and each unit's ``MixedPrecisionPolicy``. Returns ``(model, units record)``: what
    :class:`TorchFSDP2` and :class:`StandaloneFSDP2` both run, so the two copies are
    sharded by the same calls and differ in the mesh only."""
    from torch.distributed.fsdp import fully_shard

    from sweep.engines import wrapping

    reshard = reshard_after_forward(cfg, mesh)
    offload = offload_policy(cfg)

    def shard(module: Any, policy: Any) -> Any:
        return fully_shard(module, mesh=mesh, reshard_after_forward=reshard, mp_policy=torch_mp_policy(policy),
                           offload_policy=offload)

    return wrapping.shard(model, cfg, shard, cfg.mp_policy, notes)


def reshard_after_forward(cfg: Any, mesh: Any) -> Any:
    """``fully_shard``'s ``reshard_after_forward``: ``true``/``false``, or an int (reshard to
    groups of that many ranks after forward; FSDP2 docs). On a mesh of one rank (the
    standalone copy of ``baseline.precision=policy``) an int is ``True``: there is no
    smaller group, and resharding moves no value."""
    value = cfg.reshard_after_forward
    if isinstance(value, bool) or not isinstance(value, int):
        return bool(value)
    return True if mesh.size() == 1 else int(value)


def offload_policy(cfg: Any) -> Any:
    """``offload_policy=cpu``: ``CPUOffloadPolicy`` (pinned host memory only with an
    accelerator); ``none``: FSDP2's default ``OffloadPolicy()`` (no offload)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy

    from sweep.config.enums import as_str

    if as_str(cfg.get("offload_policy", "none")) == "cpu":
        return CPUOffloadPolicy(pin_memory=as_str(cfg.device) != "cpu")
    return OffloadPolicy()


class TorchFSDP2(TorchEngine):
    policy_baseline = True
    supports = frozenset({"reshard_int", "offload_policy", "meta_init"})

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        """The mesh has one dim (FSDP) or two (HSDP: replicate, shard), as ``fully_shard``
        takes; an int ``reshard_after_forward`` is a divisor of the shard dim's size other than
        1 and the size itself (FSDP2's ``fully_shard`` docs).

        Raises:
            ConfigError: either is not so.
        """
        shape = list(cfg.mesh.mesh_shape)
        if not 1 <= len(shape) <= 2:
            raise ConfigError(f"mesh.mesh_shape={shape}: fully_shard takes a 1-D mesh (FSDP) or a 2-D one (HSDP: "
                              f"replicate, shard), not {len(shape)}-D; e.g. mesh=dp4 or mesh=hsdp2x2")
        value = cfg.reshard_after_forward
        if isinstance(value, int) and not isinstance(value, bool):
            shard = int(list(cfg.mesh.mesh_shape)[-1])
            if value <= 1 or value >= shard or shard % value:
                raise ConfigError(f"reshard_after_forward={value}: an int must divide the shard dim "
                                  f"({cfg.mesh.mesh_dim_names[-1]}={shard}) and lie strictly between 1 and {shard}; "
                                  "or true/false")

    def parallelize(self, model: Any) -> Any:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(
            self.device.type,
            tuple(int(n) for n in self.cfg.mesh.mesh_shape),
            mesh_dim_names=tuple(self.cfg.mesh.mesh_dim_names),
        )
        model, units = shard_on(model, self.cfg, mesh, self.notes)
        self.units = units
        return model

    collectives_unchecked = None

    def collectives(self) -> Any:
        """The ledger with FSDP2's gradient divide factors (``sweep.engines.collectives.FSDP2Ledger``)."""
        from sweep.engines.collectives import FSDP2Ledger

        return FSDP2Ledger()

    def grad_capture(self, model: Any) -> Any:
        """The unsharded local gradients ``foreach_reduce`` receives (``FSDP2LocalGrads``)."""
        from sweep.engines.collectives import FSDP2LocalGrads

        return FSDP2LocalGrads(model)

    def expected_collectives(self) -> Optional[Dict[str, Any]]:
        """FSDP2's contract on this config (``fully_shard`` docs and
        ``_fsdp_collectives.foreach_reduce``): parameters all-gathered in ``param_dtype``
        (else the master dtype, ``model.init_dtype``) over the mesh's last dim (shard);
        gradients reduce-scattered in ``reduce_dtype`` (else the gradient's dtype:
        ``param_dtype`` or the master dtype) over it and, on a 2-D mesh (HSDP),
        all-reduced over dim 0 (replicate); divided in all by the data-parallel degree
        (the mesh's size: a mean); one reduction per ``fully_shard`` unit (the root
        included) per optimizer step; with ``train.clip_grad_norm``, the norm all-reduced over
        the shard dim (DTensor's ``Partial`` norm: each replica holds the same shards, so a
        sum over the replicate dim too would count every shard again)."""
        shape = [int(n) for n in self.cfg.mesh.mesh_shape]
        dims = [str(d) for d in self.cfg.mesh.mesh_dim_names]
        reshard = self.cfg.reshard_after_forward
        master = dtype_name(self.cfg.model.get("init_dtype")) or "float32"
        policies = [self.cfg.mp_policy] + list((getattr(self, "units", None) or {}).values())
        gather = sorted({dtype_name(p["param_dtype"]) or master for p in policies})
        reduce = sorted({dtype_name(p["reduce_dtype"]) or dtype_name(p["param_dtype"]) or master for p in policies})
        why_reduce = ("mp_policy.reduce_dtype, else param_dtype, else model.init_dtype: "
                      f"reduce_dtype={dtype_name(self.cfg.mp_policy.reduce_dtype)}, "
                      f"param_dtype={dtype_name(self.cfg.mp_policy.param_dtype)}")
        why_gather = f"mp_policy.param_dtype={dtype_name(self.cfg.mp_policy.param_dtype)}, else model.init_dtype"
        return {
            "mesh_shape": shape, "mesh_dim_names": dims,
            "all_gather": {"dim": dims[-1], "size": shape[-1], "dtypes": gather, "why": why_gather,
                           "sizes": [shape[-1], reshard] if isinstance(reshard, int) and not isinstance(reshard, bool)
                           else [shape[-1]]},
            "reduce_scatter": {"dim": dims[-1], "size": shape[-1], "dtypes": reduce, "why": why_reduce},
            "all_reduce": {"dim": dims[0], "size": shape[0], "dtypes": reduce, "why": why_reduce}
            if len(shape) == 2 else None,
            "divide": int(math.prod(shape)), "units": len(getattr(self, "units", None) or {}) + 1,
            "grad_accum_steps": int(self.cfg.train.grad_accum_steps),
            "clip": {"groups": [dims[-1]], "size": shape[-1],
                     "why": "torch.nn.utils.get_total_norm of DTensor gradients is Partial over the shard dim "
                            "only, full_tensor() all-reduces it there"}
            if self.cfg.train.clip_grad_norm is not None else None,
        }

    def grad_scaler(self, scaler_cfg: Any) -> Any:
        """``ShardedGradScaler`` (torch.distributed.fsdp.sharded_grad_scaler): each rank
        holds a shard of the gradients, so the inf/NaN check is all-reduced over the ranks
        and they all skip the same steps."""
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        from sweep.engines.base import _scaler_kwargs

        return ShardedGradScaler(device=self.device.type, **_scaler_kwargs(scaler_cfg))

    def info(self) -> Dict[str, Any]:
        out = super().info()
        if getattr(self, "units", None):
            out["units"] = self.units
        return out


ONE_RANK_DIMS = ("standalone_ranks", "standalone")  # the one-rank mesh's 2-D parent: (world, 1)


def one_rank_mesh(device_type: str) -> Any:
    """A 1-D ``DeviceMesh`` of size 1 holding only this rank, in the initialised default
    process group of ``N`` ranks: ``init_device_mesh(device_type, (N, 1),
    mesh_dim_names=ONE_RANK_DIMS)["standalone"]``. Collective (``init_device_mesh``
    creates the groups of both dims through the default group): every rank of the group
    calls it at the same point. The standalone-only process of ``order=separate`` calls
    it in a default group of one rank (``N = 1``).

    Raises:
        RuntimeError: no default process group is initialised.
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if not dist.is_initialized():
        raise RuntimeError("one_rank_mesh needs an initialised default process group (torch.distributed)")
    mesh = init_device_mesh(device_type, (dist.get_world_size(), 1), mesh_dim_names=ONE_RANK_DIMS)
    return mesh[ONE_RANK_DIMS[1]]


class StandaloneFSDP2(StandaloneTorch):
    """The standalone copy in the policy's precision (``baseline.precision=policy``):
    the distributed copy's ``fully_shard`` calls (:func:`shard_on`: the same units,
    ``MixedPrecisionPolicy`` per unit and ``reshard_after_forward``) on a mesh of one
    rank (:func:`one_rank_mesh`), so only the mesh, i.e. the engine, differs.

    Why that is "the policy on one device": ``fully_shard`` keeps the sharded parameter
    (here the whole parameter, ``Shard(0)`` over one rank) in its own dtype
    (``model.init_dtype``: the master weights, which the optimizer steps and keeps its
    state in). Before each unit's forward it casts that parameter to ``param_dtype`` (the
    all-gather input; on one rank torch 2.13's ``FSDPParamGroup.unshard`` skips the
    collective and copies the cast input, "consistent with the world_size > 1 path"; an
    all-gather of one shard would give the same values), casts
    floating inputs to ``param_dtype`` (``cast_forward_inputs``) and outputs to
    ``output_dtype``; backward runs in ``param_dtype``; the gradient is cast to
    ``reduce_dtype`` (default ``param_dtype``), reduced, and cast to the master dtype.
    That is PyTorch's own reference for FSDP2 mixed precision
    (``test/distributed/_composable/fsdp/test_fully_shard_mixed_precision.py``,
    ``_test_reduce_dtype_fp32_reduce``: a ``param_dtype`` copy runs forward and backward,
    its gradients are cast to float32, an fp32 optimizer steps the fp32 weights, which are
    copied back into the low-precision copy), with FSDP2's own code doing each cast.

    ``reduce_dtype`` on one rank: it applies as on any mesh, and only the reduction
    itself is trivial. ``foreach_reduce`` casts the gradient to ``reduce_dtype`` and, on a
    group of one, copies it instead of calling ``reduce_scatter`` (a reduction of one
    operand is exact in any dtype; the divide factor is 1). So bf16 gradients under
    ``reduce_dtype=float32`` are widened exactly; under ``reduce_dtype=bfloat16`` they stay
    bf16 until cast to the master dtype; and under gradient accumulation with sync off
    the unsharded gradients accumulate in ``reduce_dtype`` (the ``MixedPrecisionPolicy``
    docs), here as in the distributed copy. No reduction runs, so
    ``dtypes.observed_standalone.reduce`` is ``None``.

    A gradient scaler is ``ShardedGradScaler`` over the one-rank group (its inf check
    all-reduces over that group only)."""

    def __init__(self, cfg: Any, *, device: Any = None, world_size: int = 1) -> None:
        super().__init__(cfg, device=device, world_size=world_size)
        self.mesh: Any = None
        self.units: Dict[str, Any] = {}

    def parallelize(self, model: Any) -> Any:
        """``model`` ``fully_shard``-ed on :func:`one_rank_mesh` (collective: every rank of
        the process's default group calls it at the same point)."""
        self.mesh = one_rank_mesh(self.device.type)
        model, self.units = shard_on(model, self.cfg, self.mesh, self.notes)
        return model

    def grad_capture(self, model: Any) -> Any:
        """``None``: on one rank the reduction copies the gradient."""
        return None

    def grad_scaler(self, scaler_cfg: Any) -> Any:
        """``ShardedGradScaler`` whose inf/NaN check all-reduces over the one-rank group."""
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        from sweep.engines.base import _scaler_kwargs

        return ShardedGradScaler(device=self.device.type, process_group=self.mesh.get_group(),
                                 **_scaler_kwargs(scaler_cfg))

    def info(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"api": {"name": "fully_shard", "mesh": "one rank",
                                       "reshard_after_forward": reshard_after_forward(self.cfg, self.mesh)}}
        if self.units:
            out["units"] = self.units
        return out
