"""A model with running statistics, and engines that freeze them in the distributed copy:
``model._target_=tests.helpers.batchnorm_model.bn_mlp``.

``layer0`` Linear/Dense(in_size, hidden_size) -> ``bn`` BatchNorm1d(hidden_size) -> ReLU ->
``layer1`` Linear/Dense(hidden_size, out_size). Input ``(rows, in_size)`` float32. In
training the forward normalises with the batch's statistics and updates the running ones
(torch ``running_mean``/``running_var``, MindSpore ``moving_mean``/``moving_variance``),
which no training loss reads: a statistic frozen in one copy leaves every loss equal.
"""

from __future__ import annotations

from sweep.engines.data_parallel import MindSporeGradReducer
from sweep.engines.torch_fsdp2 import TorchFSDP2


def bn_mlp(*, framework: str, in_size: int, hidden_size: int, out_size: int, init_std: float):
    if framework == "mindspore":
        return _mindspore_mlp(in_size, hidden_size, out_size, init_std)
    import torch
    from torch import nn

    class BatchNormMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer0 = nn.Linear(in_size, hidden_size)
            self.bn = nn.BatchNorm1d(hidden_size)
            self.layer1 = nn.Linear(hidden_size, out_size)
            for layer in (self.layer0, self.layer1):
                nn.init.normal_(layer.weight, std=init_std)
                nn.init.zeros_(layer.bias)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer1(torch.relu(self.bn(self.layer0(x))))

    return BatchNormMLP()


def _mindspore_mlp(in_size: int, hidden_size: int, out_size: int, init_std: float):
    from mindspore import mint, nn
    from mindspore.common.initializer import Normal

    class BatchNormMLP(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.layer0 = nn.Dense(in_size, hidden_size, weight_init=Normal(sigma=init_std), bias_init="zeros")
            self.bn = nn.BatchNorm1d(hidden_size)
            self.layer1 = nn.Dense(hidden_size, out_size, weight_init=Normal(sigma=init_std), bias_init="zeros")

        def construct(self, x):
            return self.layer1(mint.nn.ReLU()(self.bn(self.layer0(x))))

    return BatchNormMLP()


bn_mlp.frameworks = ("torch", "mindspore")


class FrozenStatsFSDP2(TorchFSDP2):
    """``fully_shard`` as configured, then every BatchNorm's ``momentum`` set to 0 in the
    distributed copy: its running statistics never move (an eval-mode switch or a frozen
    norm applied to one copy only)."""

    def parallelize(self, model):
        from torch import nn

        out = super().parallelize(model)
        for module in out.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.momentum = 0.0
        return out


class FrozenStatsGradReducer(MindSporeGradReducer):
    """MindSpore data parallel, then every BatchNorm's moving statistics frozen in the
    distributed copy: its training op rebuilt with ``momentum=0`` (``ops.BatchNorm``'s share
    of the batch statistic; the Cell's ``momentum`` is baked into the op when it is built)."""

    def parallelize(self, model):
        from mindspore import nn, ops

        out = super().parallelize(model)
        for _, cell in out.cells_and_names():
            if isinstance(cell, (nn.BatchNorm1d, nn.BatchNorm2d)):
                cell.bn_train = ops.BatchNorm(is_training=True, epsilon=cell.eps, momentum=0.0,
                                              data_format=cell.format)
        return out
