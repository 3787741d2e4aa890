"""Test-only engines with a bug in their part of the training step (issue 14's check:
a planted accumulation or clipping bug fails, and the sweep names the factor that
turns it on). Plugged in with ``engine.impl.torch=tests.helpers.planted_step_faults.X``."""

import contextlib

from sweep.engines.data_parallel import TorchDDP
from sweep.engines.torch_fsdp2 import TorchFSDP2


class SyncNeverRestoredFSDP2(TorchFSDP2):
    """Turns gradient sync off for accumulation and never turns it back on: the last
    micro-step does not reduce-scatter either, so the sharded gradients stay empty and
    the optimizer moves nothing (``grad_accum_steps > 1`` only)."""

    def no_sync(self, model):
        model.set_requires_gradient_sync(False)
        return contextlib.nullcontext()


class LocalNormClipFSDP2(TorchFSDP2):
    """Clips with the norm of this rank's shard only (``to_local()``), the classic
    sharded-clipping bug: each rank scales its shard by a different factor."""

    def clip_grad_norm(self, model, max_norm):
        import torch

        grads = [p.grad.to_local() for p in model.parameters() if p.grad is not None]
        total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for p in model.parameters():
            if p.grad is not None:
                p.grad.to_local().mul_(coef)
        return float(total)


class WorldNormClipFSDP2(TorchFSDP2):
    """Clips with a norm whose squares are summed over every rank (``dist.all_reduce`` on
    the default group) where the shards only span the shard dim: on an HSDP mesh each
    replica's shard is counted again, the norm runs x sqrt(replicate degree) and the
    gradients are clipped harder than the standalone copy's. On a 1-D mesh the world is
    the shard group and the norm is right."""

    def clip_grad_norm(self, model, max_norm):
        import torch
        import torch.distributed as dist

        grads = [p.grad.to_local() for p in model.parameters() if p.grad is not None]
        squares = torch.stack([g.float().pow(2).sum() for g in grads]).sum()
        dist.all_reduce(squares)
        total = squares.sqrt()
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype))
        return float(total)


class LateHalvedLrFSDP2(TorchFSDP2):
    """From its 4th optimizer step on, the distributed copy steps with half the lr (a
    schedule stepped otherwise in one copy, right at step 0): the lr as it ran names the
    step and both values."""

    calls = 0

    def optimizer_step(self, optimizer, grads=None, *, scaler=None):
        self.calls += 1
        if self.calls == 4:
            for group in optimizer.param_groups:
                group["lr"] *= 0.5
        super().optimizer_step(optimizer, grads, scaler=scaler)


class ClipBeforeReduceDDP(TorchDDP):
    """Clips each rank's local gradient bucket to ``train.clip_grad_norm`` before DDP
    all-reduces it (a communication hook), then the step clips again as configured: the
    clip-before-reduce bug. On replicated data every rank's local gradient is the
    standalone one, so the reduced gradient is already the clipped one and the copies agree
    to float rounding; on sharded data the ranks' norms differ and the mean of clipped
    gradients is not the clipped mean."""

    def parallelize(self, model):
        import torch
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp = super().parallelize(model)
        max_norm = float(self.cfg.train.clip_grad_norm)

        def clip_then_reduce(state, bucket):
            buf = bucket.buffer()
            buf.mul_(torch.clamp(max_norm / (torch.linalg.vector_norm(buf) + 1e-6), max=1.0))
            return default_hooks.allreduce_hook(state, bucket)

        ddp.register_comm_hook(None, clip_then_reduce)
        return ddp


class OverridesIgnoredFSDP2(TorchFSDP2):
    """Shards as configured but drops ``mp_policy.overrides``: a module the config keeps in
    another dtype runs under its parent unit's policy (a wrapping that never reads the
    per-module policies). Its own record of units says nothing of them."""

    def parallelize(self, model):
        from omegaconf import OmegaConf, open_dict

        cfg = self.cfg
        self.cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
        with open_dict(self.cfg):
            self.cfg.mp_policy.overrides = {}
        try:
            return super().parallelize(model)
        finally:
            self.cfg = cfg


class ReplicaSumFSDP2(TorchFSDP2):
    """On a 2-D (HSDP) mesh the gradients reach the optimizer summed over the replicas
    where a mean was expected: x the replicate degree (a reducer that sums, on one mesh
    only). Adam is nearly invariant to a constant scale and hides it below tolerance; SGD
    shows it. A 1-D mesh is untouched."""

    def optimizer_step(self, optimizer, grads=None, *, scaler=None):
        shape = [int(n) for n in self.cfg.mesh.mesh_shape]
        if len(shape) == 2:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        (p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad).mul_(shape[0])
        super().optimizer_step(optimizer, grads, scaler=scaler)


class EarlyLrScaleFSDP2(TorchFSDP2):
    """The distributed copy's first two optimizer steps run at 1.3x the lr (a warmup
    stepped once too early), the rest at the right lr: a one-signed fault that fades. Under
    Adam it stays below the default tolerance on the default MLP, with update errors of 0.3
    against the correct jobs' 2e-6 (rounding grown is measured on those, not assumed)."""

    calls = 0

    def optimizer_step(self, optimizer, grads=None, *, scaler=None):
        self.calls += 1
        saved = [group["lr"] for group in optimizer.param_groups]
        if self.calls <= 2:
            for group in optimizer.param_groups:
                group["lr"] *= 1.3
        try:
            super().optimizer_step(optimizer, grads, scaler=scaler)
        finally:
            for group, lr in zip(optimizer.param_groups, saved):
                group["lr"] = lr


class SyncOnDecayFSDP2(TorchFSDP2):
    """Gradient sync left on between micro-batches (one reduce-scatter each, numerically the
    same accumulation on FSDP2), and a fault after the optimizer step: its first parameter
    decayed x0.99. The gradients before the reduction are each micro-batch's: their sum is
    this rank's gradient (a new user's: the norm before the reduction was read off the last
    micro-batch alone and blamed the forward)."""

    def no_sync(self, model):
        return contextlib.nullcontext()

    def optimizer_step(self, optimizer, grads=None, **kwargs):
        import torch

        super().optimizer_step(optimizer, grads, **kwargs)
        with torch.no_grad():
            optimizer.param_groups[0]["params"][0].mul_(0.99)


class SyncOnDroppedMicroFSDP2(TorchFSDP2):
    """Gradient sync left on between micro-batches, and every gradient dropped after each
    micro-batch but the last (a ``zero_grad`` inside the accumulation loop): only the last
    micro-batch's reduced gradient reaches the optimizer."""

    def no_sync(self, model):
        @contextlib.contextmanager
        def drop():
            yield
            for param in model.parameters():
                param.grad = None
        return drop()


class DropLastParamFSDP2(TorchFSDP2):
    """The distributed copy's optimizer never steps the model's last parameter: it is taken
    out of its param group before the first step (an optimizer built from a filtered list)."""

    def optimizer_step(self, optimizer, grads=None, **kwargs):
        group = optimizer.param_groups[-1]
        if not getattr(self, "_dropped", False):
            group["params"] = group["params"][:-1]
            self._dropped = True
        super().optimizer_step(optimizer, grads, **kwargs)
