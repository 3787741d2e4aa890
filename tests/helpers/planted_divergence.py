"""Test-only engines, each with one kind of fault the report must explain (issue 15:
where the two runs part, which tensor first, which rank, whether it repeats). Plugged in
with ``engine.impl.torch=tests.helpers.planted_divergence.X``.

Every fault acts in ``optimizer_step`` on the gradients the step is about to apply, so
the first tensor that differs is a weight after the step (the gradients the trace
records before the step are still equal), at the step the fault starts.
"""

import os

from sweep.engines.data_parallel import TorchDDP
from sweep.engines.torch_fsdp2 import TorchFSDP2

FAULT_STEP = 8  # LateGradScaleFSDP2: the first step it scales
PERIOD = 4  # PeriodicGradScaleFSDP2: the steps it scales (3, 7, 11, ...)
SCALE = 2.0
NOISE = 0.05  # NondetNoiseFSDP2: standard deviation of the added gradient noise
MOMENTUM_PERIOD = 5  # MomentumResetSGDFSDP2: clears the momentum buffers before steps 4, 9, 14, ...


def _scale(optimizer, factor):
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param.grad is not None:
                param.grad.mul_(factor)


def _rank():
    import torch.distributed as dist

    return dist.get_rank()


class _Counting:
    """Calls ``fault(step, optimizer)`` before each optimizer step (0-based)."""

    step = 0

    def optimizer_step(self, optimizer, *args, **kwargs):
        self.fault(self.step, optimizer)
        self.step += 1
        super().optimizer_step(optimizer, *args, **kwargs)

    def fault(self, step, optimizer):
        raise NotImplementedError


class Rank1GradScaleDDP(_Counting, TorchDDP):
    """Replicated data parallel whose rank 1 scales its reduced gradients by ``SCALE``
    (rank 0 is correct): rank 1's weights, and so its losses, part from rank 0's."""

    def fault(self, step, optimizer):
        if _rank() == 1:
            _scale(optimizer, SCALE)


class Rank1ShardGradScaleFSDP2(_Counting, TorchFSDP2):
    """FSDP2 whose rank 1 scales its own dim-0 shard of each reduced gradient by ``SCALE``
    (rank 0's are right): after the step only rank 1's rows of each weight differ, and
    since every rank gathers the same full weights, every rank's losses part alike."""

    def fault(self, step, optimizer):
        if _rank() == 1:
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if param.grad is not None:
                        param.grad.to_local().mul_(SCALE)


class LateGradScaleFSDP2(_Counting, TorchFSDP2):
    """Scales the gradients by ``SCALE`` from step ``FAULT_STEP`` on (a schedule or a step
    counter gone wrong): bit-identical before, an abrupt onset at ``FAULT_STEP``."""

    def fault(self, step, optimizer):
        if step >= FAULT_STEP:
            _scale(optimizer, SCALE)


class PeriodicGradScaleFSDP2(_Counting, TorchFSDP2):
    """Scales the gradients by ``SCALE`` every ``PERIOD`` steps, starting at step
    ``PERIOD - 1`` (an event on a period: accumulation boundaries, a periodic sync)."""

    def fault(self, step, optimizer):
        if step % PERIOD == PERIOD - 1:
            _scale(optimizer, SCALE)


class GradScaleFSDP2(_Counting, TorchFSDP2):
    """Scales every gradient by ``SCALE`` (a doubled averaging factor) on every step. Adam
    is nearly invariant to a constant scale (only ``eps`` sees it), so Adam jobs differ
    from standalone below tolerance; SGD's do not."""

    def fault(self, step, optimizer):
        _scale(optimizer, SCALE)


class IgnorePolicyFSDP2(TorchFSDP2):
    """FSDP2 that drops the configured ``MixedPrecisionPolicy``: a bf16 policy runs in
    fp32 (a policy that does not apply)."""

    def parallelize(self, model):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(self.device.type, tuple(int(n) for n in self.cfg.mesh.mesh_shape),
                                mesh_dim_names=tuple(self.cfg.mesh.mesh_dim_names))
        return fully_shard(model, mesh=mesh, reshard_after_forward=bool(self.cfg.reshard_after_forward))


class MomentumResetSGDFSDP2(_Counting, TorchFSDP2):
    """Clears SGD's momentum buffers before every ``MOMENTUM_PERIOD``-th step (a state
    reset on a schedule, a checkpoint reload that drops the optimizer state): the error
    never goes away between clearings, it peaks at each and decays, on a rising trend."""

    def fault(self, step, optimizer):
        if step % MOMENTUM_PERIOD == MOMENTUM_PERIOD - 1:
            for state in optimizer.state.values():
                state.pop("momentum_buffer", None)


class NondetNoiseFSDP2(_Counting, TorchFSDP2):
    """Adds gradient noise from a generator seeded per launch (``os.urandom``) on every
    step: two launches of one config give different losses (a race, an unseeded
    kernel). Every step, so every launch, the tracing rerun's too, parts from standalone
    at step 0 and its update differences take both signs alike whatever the draw."""

    def fault(self, step, optimizer):
        import torch

        if not hasattr(self, "_gen"):
            self._gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is not None:  # this rank's shard (FSDP2 gradients are DTensors)
                    local = param.grad.to_local() if hasattr(param.grad, "to_local") else param.grad
                    local.add_(torch.randn(local.shape, generator=self._gen).to(local.dtype).mul_(NOISE))



class SumReduceFSDP2(TorchFSDP2):
    """Reduces gradients by a sum where FSDP2 takes a mean: FSDP2's own knobs,
    ``set_gradient_divide_factor(1.0)`` on every ``fully_shard`` unit (with
    ``set_force_sum_reduction_for_comms``: gloo has no ``PREMUL_SUM``). Every reduced
    gradient is ``world_size`` times the standalone one, from step 0's reduction on: the
    copies agree before any update, whatever the data split."""

    def parallelize(self, model):
        from torch.distributed.fsdp import FSDPModule

        model = super().parallelize(model)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_force_sum_reduction_for_comms(True)
                module.set_gradient_divide_factor(1.0)
        return model
