"""Faults that only what *ran* shows, on MindSpore (issue 51): test-only engines, each
changing one thing the config does not say, on real msrun jobs:
``engine.impl.mindspore=tests.helpers.ms_ran_faults.<Name>``. Each fault stays inside its
engine's own net and optimizer (a shared launch runs other jobs in the same process after it).

Data parallel (``nn.DistributedGradReducer``, which reduces inside a compiled graph):
``DoubleDegreeDP`` (its mean divides by twice the ranks), ``ClipFirstDP`` (each rank clips its
own gradients by their norm before the all-reduce), ``HalfHeadDP`` (the last layer computes in
float16), ``ScaledLossDP`` (its optimizer divides the gradients by a loss scale of 64),
``NoDecayWeightDP`` (``decay_flags`` off for ``layer0.weight``), ``HalvedReadDP`` (the gradients
halved in the optimizer step from step 2: code that touches them on the way),
``HalfMasterDP`` (the weights rounded to float16 after each update from step 2),
``SkewedStatsDP`` (rank 1's BatchNorm keeps its statistics with another momentum),
``PortedMomentumDP`` (the BatchNorm's momentum ported wrong, for a job against torch),
``PortedEpsDP`` (the LayerNorm's epsilon ported wrong, for a job against torch).
hyper-parallel (``hsdp``): ``NoReplicaReduceHP`` (the all-reduce across the replicate dim a
no-op, on an HSDP mesh), ``SkewedReplicaHP`` (the second replica row steps ``layer0.weight``
with a larger gradient).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sweep.engines.data_parallel import MindSporeGradReducer
from sweep.engines.hyper_parallel import MindSporeHyperParallel


class DoubleDegreeDP(MindSporeGradReducer):
    """Data parallel whose reducer divides the sum by twice the ranks
    (``DistributedGradReducer(degree=2 * world_size)``): every gradient x0.5 the mean."""

    def reduce_grads(self, optimizer: Any, grads: Any) -> Any:
        if self._reducer is None:
            from mindspore import nn
            from mindspore.communication import GlobalComm

            self._reducer = nn.DistributedGradReducer(optimizer.parameters, mean=True, degree=2 * self.world_size,
                                                      group=GlobalComm.WORLD_COMM_GROUP)
        return self._reducer(grads)


class ClipFirstDP(MindSporeGradReducer):
    """Data parallel that clips each rank's gradients by their own global norm
    (``ops.clip_by_global_norm`` at ``train.clip_grad_norm``) before its all-reduce."""

    def reduce_grads(self, optimizer: Any, grads: Any) -> Any:
        from mindspore import ops

        return super().reduce_grads(optimizer, ops.clip_by_global_norm(grads, float(self.cfg.train.clip_grad_norm)))


class HalfHeadDP(MindSporeGradReducer):
    """Data parallel whose last layer (``layer1``) computes in float16 (its input and weights
    cast, its output left float16): a module running below the (float32) precision."""

    def parallelize(self, net: Any) -> Any:
        import mindspore as ms
        from mindspore import ops

        head = net.layer1

        def construct(x: Any) -> Any:
            out = ops.matmul(ops.cast(x, ms.float16), ops.cast(head.weight, ms.float16).T)
            return out + ops.cast(head.bias, ms.float16)

        head.construct = construct
        return net


class _Steps:
    def step_index(self) -> int:
        self._steps = getattr(self, "_steps", -1) + 1
        return self._steps


class ScaledLossDP(_Steps, MindSporeGradReducer):
    """Data parallel whose optimizer divides the gradients by a loss scale of 64 before its
    update (``need_scale``, ``reciprocal_scale``), where no loss was scaled."""

    def optimizer_step(self, optimizer: Any, grads: Any = None) -> None:
        import mindspore as ms

        if self.step_index() == 0:  # before its construct is compiled
            optimizer.need_scale = True
            optimizer.loss_scale = 64.0
            optimizer.reciprocal_scale = ms.Tensor(1.0 / 64.0, ms.float32)
        super().optimizer_step(optimizer, grads)


class NoDecayWeightDP(_Steps, MindSporeGradReducer):
    """Data parallel whose optimizer leaves ``layer0.weight`` out of weight decay (its
    ``decay_flags`` entry off), where the standalone copy decays it."""

    def optimizer_step(self, optimizer: Any, grads: Any = None) -> None:
        if self.step_index() == 0:
            names = [p.name for p in optimizer.parameters]
            optimizer.decay_flags = tuple(False if n == "layer0.weight" else f
                                          for n, f in zip(names, optimizer.decay_flags))
        super().optimizer_step(optimizer, grads)


class HalvedReadDP(_Steps, MindSporeGradReducer):
    """Data parallel whose optimizer step halves the gradients from step 2 on before applying
    them (code on the way, a "normalisation for the log"), after the reduction."""

    def optimizer_step(self, optimizer: Any, grads: Any = None) -> None:
        if self.step_index() >= 2:
            grads = tuple(g * 0.5 for g in grads)
        super().optimizer_step(optimizer, grads)


class HalfMasterDP(_Steps, MindSporeGradReducer):
    """Data parallel whose float32 weights are rounded to float16 after each update from step 2
    (a half-precision copy written back into the master weights)."""

    def optimizer_step(self, optimizer: Any, grads: Any = None) -> None:
        from mindspore import Tensor

        step = self.step_index()
        super().optimizer_step(optimizer, grads)
        if step >= 2:
            for p in optimizer.parameters:
                p.set_data(Tensor(p.asnumpy().astype(np.float16).astype(np.float32)))


def _batchnorm_momentum(net: Any, momentum: float) -> None:
    """Rebuild every BatchNorm's training op with ``momentum`` (the op's share of the batch
    statistic; the Cell's is baked into the op when it is built)."""
    from mindspore import nn, ops

    for _, cell in net.cells_and_names():
        if isinstance(cell, (nn.BatchNorm1d, nn.BatchNorm2d)):
            cell.bn_train = ops.BatchNorm(is_training=True, epsilon=cell.eps, momentum=momentum,
                                          data_format=cell.format)


class SkewedStatsDP(MindSporeGradReducer):
    """Data parallel whose rank 1 keeps its BatchNorm statistics with another momentum: the
    buffers every rank holds part, while every loss agrees."""

    def parallelize(self, net: Any) -> Any:
        from mindspore.communication import get_rank

        if get_rank() == 1:
            _batchnorm_momentum(net, 0.5)
        return net


class PortedMomentumDP(MindSporeGradReducer):
    """Data parallel whose BatchNorm keeps its statistics with momentum 0.5 (a port that got
    the other framework's convention wrong): they end apart from torch's, every loss agrees."""

    def parallelize(self, net: Any) -> Any:
        _batchnorm_momentum(net, 0.5)
        return net


class PortedEpsDP(MindSporeGradReducer):
    """Data parallel whose LayerNorm (``norm0``) normalises with epsilon 0.05 (a port that took
    another default): its forward output parts from torch's, every module before it agrees."""

    def parallelize(self, net: Any) -> Any:
        from mindspore import ops

        norm = net.norm0
        norm.layer_norm = ops.LayerNorm(begin_norm_axis=norm.begin_norm_axis, begin_params_axis=norm.begin_params_axis,
                                        epsilon=0.05)
        return net


class NoReplicaReduceHP(MindSporeHyperParallel):
    """hyper-parallel ``hsdp`` on an HSDP mesh whose all-reduce across the replicate dim does
    nothing (its platform's ``all_reduce`` returns the data as it came, for this net's hooks
    only): each replica row keeps the mean over its own shard group."""

    def parallelize(self, net: Any) -> Any:
        net = super().parallelize(net)
        scheduler = getattr(net, "hsdp_scheduler", None)
        hooks = getattr(scheduler, "grad_hook", None)
        if hooks is not None:
            platform = hooks.platform

            class NoAllReduce:
                def __getattr__(self, name: str) -> Any:
                    return getattr(platform, name)

                @staticmethod
                def all_reduce(data: Any, group_info: Any, async_op: bool = False) -> Any:
                    return data, None

            hooks.platform = NoAllReduce()
        return net


class SkewedReplicaHP(_Steps, MindSporeHyperParallel):
    """hyper-parallel ``hsdp`` on an HSDP mesh whose second replica row (ranks 2, 3) steps
    ``layer0.weight`` with its gradient x1.01 from step 1: the replicas of its shards part."""

    def optimizer_step(self, optimizer: Any, grads: Any = None) -> None:
        from mindspore.communication import get_rank

        if self.step_index() >= 1 and get_rank() >= 2:
            names = [p.name for p in optimizer.parameters]
            grads = tuple(g * 1.01 if n == "layer0.weight" else g for n, g in zip(names, grads))
        super().optimizer_step(optimizer, grads)
