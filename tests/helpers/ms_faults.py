"""MindSpore faults planted in the distributed copy through test-only engines (subclasses of
``sweep.engines.data_parallel.MindSporeGradReducer``), each modelled on a class of real bug:
``engine.impl.mindspore=tests.helpers.ms_faults.<Name>``.

- ``LaterLayerForwardDP``: the second Dense's output scaled by 1.5 (a forward fault in a
  later layer).
- ``SumReduceDP``: the gradient reduction sums over the ranks instead of averaging.
- ``EpsOverrideDP``: the distributed copy's Adam steps with ``eps=1e-3`` (an optimizer
  hyper-parameter changed in one copy).
- ``RankWeightDP``: rank 1 weighs its gradients 1 + 1e-4 before the reduction (a per-rank
  token count off by one in ten thousand: far beyond float32's rounding envelope, yet the
  losses stay close to it).
- ``FrozenStatsDP``: the distributed copy's BatchNorm never updates its moving statistics and
  normalises with them (``use_batch_statistics=False``: a frozen BatchNorm statistic).
- ``HangRankDP``: rank 1 sleeps instead of joining the gradient all-reduce at its fourth step.
"""

from __future__ import annotations

from typing import Any

from sweep.engines.data_parallel import MindSporeGradReducer

SCALE = 1.5
EPS = 1e-3


class LaterLayerForwardDP(MindSporeGradReducer):
    def parallelize(self, net: Any) -> Any:
        layer = net.layer1
        inner = layer.construct

        def construct(x: Any) -> Any:
            return inner(x) * SCALE

        layer.construct = construct
        return net


class SumReduceDP(MindSporeGradReducer):
    def reduce_grads(self, optimizer: Any, grads: Any) -> Any:
        return tuple(g * self.world_size for g in super().reduce_grads(optimizer, grads))


class EpsOverrideDP(MindSporeGradReducer):
    def optimizer_step(self, optimizer: Any, grads: Any = None) -> None:
        import mindspore as ms

        if hasattr(optimizer, "eps"):
            optimizer.eps = ms.Tensor(EPS, ms.float32)
        super().optimizer_step(optimizer, grads)


class RankWeightDP(MindSporeGradReducer):
    WEIGHT = 1.0 + 1e-4

    def reduce_grads(self, optimizer: Any, grads: Any) -> Any:
        from mindspore.communication import get_rank

        if get_rank() == 1:
            grads = tuple(g * self.WEIGHT for g in grads)
        return super().reduce_grads(optimizer, grads)


class FrozenStatsDP(MindSporeGradReducer):
    def parallelize(self, net: Any) -> Any:
        from mindspore import nn

        for _, cell in net.cells_and_names():
            if isinstance(cell, nn.BatchNorm1d):
                cell.use_batch_statistics = False
        return net


class HangRankDP(MindSporeGradReducer):
    """Rank 1 stops joining the gradient all-reduce at its fourth step (sleeps): a rank that
    hangs outside any collective while rank 0's collective gives up on it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls = 0

    def reduce_grads(self, optimizer: Any, grads: Any) -> Any:
        from mindspore.communication import get_rank

        self.calls += 1
        if self.calls == 4 and get_rank() == 1:
            import time

            time.sleep(600)
        return super().reduce_grads(optimizer, grads)
