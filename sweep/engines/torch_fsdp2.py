"""PyTorch's native FSDP2: ``torch.distributed.fsdp.fully_shard`` on the root module,
over ``init_device_mesh(device_type, mesh_shape, mesh_dim_names)``. A 2-D mesh gives
HSDP (replicate over dim 0, shard over dim 1), per the ``fully_shard`` docs."""

from __future__ import annotations

from typing import Any, Dict

from sweep.engines.base import TorchEngine, dtype_name


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


class TorchFSDP2(TorchEngine):
    def parallelize(self, model: Any) -> Any:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        from sweep.engines import wrapping

        mesh = init_device_mesh(
            self.device.type,
            tuple(int(n) for n in self.cfg.mesh.mesh_shape),
            mesh_dim_names=tuple(self.cfg.mesh.mesh_dim_names),
        )

        def shard(module: Any, policy: Any) -> Any:
            return fully_shard(module, mesh=mesh, reshard_after_forward=bool(self.cfg.reshard_after_forward),
                               mp_policy=torch_mp_policy(policy))

        model, units = wrapping.shard(model, self.cfg, shard, self.cfg.mp_policy)
        self.units = units
        return model

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
