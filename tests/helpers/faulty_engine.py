"""A deliberately wrong engine, plugged in through the config in tests:
``engine.impl.torch=tests.helpers.faulty_engine.GradScaleFSDP2``.

FSDP2 whose optimizer step first multiplies every gradient by ``SCALE`` (a classic
bug: a missing or doubled averaging factor). Adam is nearly invariant to a constant
gradient scale; SGD is not, so the loss must drift from step 1 on.
"""

from sweep.engines.torch_fsdp2 import TorchFSDP2

SCALE = 2.0


class GradScaleFSDP2(TorchFSDP2):
    def optimizer_step(self, optimizer):
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    param.grad.mul_(SCALE)
        optimizer.step()
