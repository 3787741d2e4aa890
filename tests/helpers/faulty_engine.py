"""A deliberately wrong engine, plugged in through the config in tests:
``engine.impl.torch=tests.helpers.faulty_engine.GradScaleFSDP2``.

FSDP2 whose optimizer step first multiplies every gradient by ``SCALE`` (a classic
bug: a missing or doubled averaging factor). Adam is nearly invariant to a constant
gradient scale; SGD is not, so the loss must drift from step 1 on.
"""

from sweep.engines.torch_fsdp2 import TorchFSDP2

SCALE = 2.0


class GradScaleFSDP2(TorchFSDP2):
    # (keyword arguments passed on: the step hands a gradient scaler in as ``scaler=`` where
    # ``train.grad_scaler.enabled=true``; an override that drops them breaks that)
    def optimizer_step(self, optimizer, grads=None, **kwargs):
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    param.grad.mul_(SCALE)
        super().optimizer_step(optimizer, grads, **kwargs)


class _StepCounter(TorchFSDP2):
    """FSDP2 that calls ``fault(step)`` before each optimizer step (0-based)."""

    def __init__(self, cfg, **kwargs):
        super().__init__(cfg, **kwargs)
        self.step = 0

    def optimizer_step(self, optimizer, grads=None, **kwargs):
        self.fault(self.step, optimizer)
        self.step += 1
        super().optimizer_step(optimizer, grads, **kwargs)

    def fault(self, step, optimizer):
        raise NotImplementedError


FAULT_STEP = 3


def _rank():
    import torch.distributed as dist

    return dist.get_rank()


class KillRankFSDP2(_StepCounter):
    """Rank 1 dies by SIGKILL at step FAULT_STEP (an OOM kill, a segfault)."""

    def fault(self, step, optimizer):
        import os
        import signal

        if step == FAULT_STEP and _rank() == 1:
            os.kill(os.getpid(), signal.SIGKILL)


class HangRankFSDP2(_StepCounter):
    """Rank 1 stops joining collectives at step FAULT_STEP: it sleeps for 10 minutes
    while rank 0 waits in the next all-gather."""

    def fault(self, step, optimizer):
        import time

        if step == FAULT_STEP and _rank() == 1:
            time.sleep(600)


class NaNAtStepFSDP2(_StepCounter):
    """Every rank's gradients become NaN at step FAULT_STEP, so the parameters and the
    loss of every later step are NaN."""

    def fault(self, step, optimizer):
        if step == FAULT_STEP:
            for group in optimizer.param_groups:
                for param in group["params"]:
                    param.grad.fill_(float("nan"))


class EnvGradScaleFSDP2(TorchFSDP2):
    """FSDP2 whose optimizer step multiplies every gradient by ``$SWEEP_TEST_GRAD_SCALE``
    (default 1: correct). The bug lives outside the config, as a library version would:
    the same sweep before and after the "fix" has the same configs."""

    def optimizer_step(self, optimizer, grads=None, **kwargs):
        import os

        scale = float(os.environ.get("SWEEP_TEST_GRAD_SCALE", "1"))
        if scale != 1.0:
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if param.grad is not None:
                        param.grad.mul_(scale)
        super().optimizer_step(optimizer, grads, **kwargs)
