"""Control arm without sharding: every rank holds the full model and gradients are
averaged over all ``world_size`` ranks (the mesh only sets ``world_size``).

torch: ``DistributedDataParallel`` (all-reduce of gradients during backward).
MindSpore: ``nn.DistributedGradReducer(mean=True, degree=world_size)``: AllReduce
(sum) then division, which runs on CPU too (shared/notes/environment.md).
"""

from __future__ import annotations

from typing import Any

from sweep.engines.base import MindSporeEngine, TorchEngine


class TorchDDP(TorchEngine):
    def parallelize(self, model: Any) -> Any:
        from torch.nn.parallel import DistributedDataParallel

        device_ids = None if self.device.type == "cpu" else [self.device.index]
        return DistributedDataParallel(model, device_ids=device_ids)


class MindSporeGradReducer(MindSporeEngine):
    def __init__(self, cfg: Any, *, world_size: int) -> None:
        super().__init__(cfg, world_size=world_size)
        self._reducer = None

    def parallelize(self, net: Any) -> Any:
        return net

    def optimizer_step(self, optimizer: Any, grads: Any) -> None:
        if self._reducer is None:
            from mindspore import nn
            from mindspore.communication import GlobalComm

            self._reducer = nn.DistributedGradReducer(
                optimizer.parameters, mean=True, degree=self.world_size, group=GlobalComm.WORLD_COMM_GROUP
            )
        optimizer(self._reducer(grads))
