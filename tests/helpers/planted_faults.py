"""Test-only engines whose fault depends on other config factors, for isolation tests
and benchmarks (``engine.impl.torch=tests.helpers.planted_faults.X``).

Each multiplies the gradients by ``SCALE`` before the optimizer step under some
condition on the job's config. Adam is nearly invariant to a constant gradient scale and
SGD is not (``tests/helpers/faulty_engine.py``), so a job fails only with
``optimizer=sgd`` and the condition: ``optimizer`` is always one of the deciding factors.
(``optimizer_step`` takes ``grads=None`` too, the signature of the engines on main.)
"""

from sweep.engines.torch_fsdp2 import TorchFSDP2

SCALE = 2.0


def _scale(optimizer) -> None:
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param.grad is not None:
                param.grad.mul_(SCALE)


class NoReshardGradScaleFSDP2(TorchFSDP2):
    """Scales gradients only with ``reshard_after_forward=false``: fails only with
    ``optimizer=sgd`` + ``reshard_after_forward=false`` (an interaction)."""

    def optimizer_step(self, optimizer, grads=None):
        if not self.cfg.reshard_after_forward:
            _scale(optimizer)
        optimizer.step()


class Bf16NondetGradScaleFSDP2(TorchFSDP2):
    """Scales gradients only with bf16 parameters and ``deterministic=false``: fails only
    with ``optimizer=sgd`` + ``mp_policy=bf16`` + ``deterministic=false`` (three factors
    that fail only together)."""

    def optimizer_step(self, optimizer, grads=None):
        if str(self.cfg.mp_policy.param_dtype).endswith("bfloat16") and not self.cfg.deterministic:
            _scale(optimizer)
        optimizer.step()


class Crash4RanksGradScaleFSDP2(TorchFSDP2):
    """Always scales gradients (fails with ``optimizer=sgd`` alone), and raises at set-up
    on 4 ranks with ``reshard_after_forward=true``: those jobs are ``error``, which an
    isolation must report and route around."""

    def parallelize(self, model):
        import torch.distributed as dist

        if dist.get_world_size() == 4 and self.cfg.reshard_after_forward:
            raise RuntimeError("planted crash: 4 ranks with reshard_after_forward")
        return super().parallelize(model)

    def optimizer_step(self, optimizer, grads=None):
        _scale(optimizer)
        optimizer.step()
