"""Test-only engines with faults at the edge of float rounding (issue 49: the rounding envelope),
plugged in with ``engine.impl.torch=tests.helpers.envelope_faults.X``. Real FSDP2 on real
ranks; each changes one thing, by a relative amount near a precision's unit roundoff, named
in its docstring. A correct engine's jobs must stay within their envelope; these must leave it.
"""

import torch.distributed as dist

from sweep.engines.torch_fsdp2 import TorchFSDP2


def _gradient_weight(model, weight):
    """A forward hook on ``model`` whose output keeps its value and whose gradient is
    ``weight`` times the true one: ``out + (weight - 1) (out - out.detach())``."""
    def hook(module, args, out):
        return out + (weight - 1.0) * (out - out.detach())

    return model.register_forward_hook(hook)


class RankWeightFSDP2(TorchFSDP2):
    """FSDP2 whose rank 1 weighs its loss's gradient ``WEIGHT`` times (1 + 1e-4): the loss it
    reports is its own, its contribution to every reduced gradient is 1e-4 too large (a
    per-rank token count off by one in ten thousand). On sharded data under Adam the
    update errors are a few times a correct job's, far beyond its rounding."""

    WEIGHT = 1.0 + 1e-4

    def parallelize(self, model):
        model = super().parallelize(model)
        if dist.get_rank() == 1:
            _gradient_weight(model, self.WEIGHT)
        return model


class RankWeight3FSDP2(RankWeightFSDP2):
    """:class:`RankWeightFSDP2` with rank 1's gradient 1e-3 too large."""

    WEIGHT = 1.0 + 1e-3


class LateRankWeightFSDP2(TorchFSDP2):
    """FSDP2 whose rank 1 weighs its loss's gradient (1 + 1e-3) from its 50th forward on (a
    per-rank count that goes wrong mid-run): on sharded data the copies first differ by step 0's
    rounding, and the losses leave their envelope only well after step 50."""

    WEIGHT, START = 1.0 + 1e-3, 50

    def parallelize(self, model):
        model = super().parallelize(model)
        if dist.get_rank() == 1:
            calls = [0]

            def hook(module, args, out):
                calls[0] += 1
                return out + (self.WEIGHT - 1.0) * (out - out.detach()) if calls[0] > self.START else None

            model.register_forward_hook(hook)
        return model


class LossNudgeFSDP2(TorchFSDP2):
    """FSDP2 whose distributed copy's output is ``x (1 + 3e-5)`` on every rank from step 0 (a
    rescaled activation, a cast that rounds one way): the step-0 loss parts by about 1e-4
    relative, a hundred float32 units."""

    SCALE = 1.0 + 3e-5

    def parallelize(self, model):
        model = super().parallelize(model)
        model.register_forward_hook(lambda mod, args, out: out * self.SCALE)
        return model


class LateLrFSDP2(TorchFSDP2):
    """FSDP2 whose optimizer steps with lr x (1 + 1e-3) from its 50th step on (a scheduler
    that rounds its lr otherwise from a later step)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps = 0

    def optimizer_step(self, optimizer, grads=None, *, scaler=None):
        self.steps += 1
        if self.steps == 50:
            for group in optimizer.param_groups:
                group["lr"] = group["lr"] * (1.0 + 1e-3)
        return super().optimizer_step(optimizer, grads, scaler=scaler)



class OneRankLateLrFSDP2(TorchFSDP2):
    """FSDP2 whose rank 1 steps with lr x (1 + 1e-3) from its 5th step on (a per-rank scheduler
    state gone wrong): only rank 1's shard of each parameter moves otherwise. On sharded data the
    copies first differ by step 0's rounding and the losses stay within their envelope; the
    weights leave theirs after update 5, past the first tracing pass's gradient-traced steps."""

    START = 5

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps = 0

    def optimizer_step(self, optimizer, grads=None, *, scaler=None):
        self.steps += 1
        if self.steps == self.START + 1 and dist.get_rank() == 1:
            for group in optimizer.param_groups:
                group["lr"] = group["lr"] * (1.0 + 1e-3)
        return super().optimizer_step(optimizer, grads, scaler=scaler)
