"""Faults that only what *ran* shows, on PyTorch (issue 51): each test-only engine changes one
thing the config does not say, through real FSDP2, DDP or hyper-parallel on real ranks,
plugged in with ``engine.impl.torch=tests.helpers.ran_faults.<Name>``. Every fault is scoped
to the engine's own model (no process-wide patch: a shared launch runs other jobs after it).

Collectives: ``BackendMaxFSDP2`` (a reduce-scatter called with AVG that computes the max, below
the call the ledger sees), ``ReplicateOffHSDP`` (FSDP2's replicate all-reduce switched off),
``UnreducedBiasFSDP2 (one parameter kept out of ``fully_shard``:
replicated on every rank, its gradient never reduced), ``IgnoredWeightDDP`` (DDP told to
ignore a parameter), ``SumOpHPTorch`` (hyper-parallel's reduce op set to sum).
Hand-made reductions: ``HandReplicateHSDP`` (correct: ``fully_shard`` over the ``dp_shard``
sub-mesh only, the gradients' mean over ``dp_replicate`` all-reduced by hand before stepping),
``HandReplicateTwiceHSDP`` (the same, the sum all-reduced twice: x2 the mean),
``HandReplicateFlatHSDP`` (correct: the same mean, of one flat buffer of every gradient),
``HandReplicateInClipHSDP`` (correct: the mean taken in ``clip_grad_norm``, before clipping).
Replicas: ``SkewedReplicaHSDP`` (the second replica row steps one parameter with a larger
gradient), ``SkewedStatsFSDP2`` (one rank's BatchNorm momentum differs: its buffers part),
``FrozenStatsFSDP2`` (every rank's BatchNorm momentum 0: the statistics never move).
Precision: ``AutocastHeadFSDP2`` (an autocast region left around the last layer),
``HalfMasterFSDP2`` (the master weights rounded to float16 after each update from step 2).
Optimizer and step: ``NoDecayBiasFSDP2`` (biases moved to a param group without weight
decay), ``StuckGradsFSDP2`` (``zero_grad`` does nothing from step 2), ``FrozenLrFSDP2`` (the lr
held at step 2's from then on), ``LoggingClipFSDP2`` (the gradient norm "logged" with
``clip_grad_norm_`` from step 3, which clips). Across frameworks: ``PortedMomentumFSDP2`` (a
BatchNorm whose momentum was ported wrong: 0.5 where the other framework's is 0.1).
"""

from __future__ import annotations

from typing import Any

from sweep.engines.data_parallel import TorchDDP
from sweep.engines.hyper_parallel import TorchHyperParallel
from sweep.engines.torch_fsdp2 import TorchFSDP2


def _param_groups(model: Any) -> list:
    """The FSDP2 parameter groups of ``model``'s ``fully_shard`` units."""
    from torch.distributed.fsdp import FSDPModule

    found = []
    for module in model.modules():
        if isinstance(module, FSDPModule):
            group = module._get_fsdp_state()._fsdp_param_group
            if group is not None:
                found.append(group)
    return found


class BackendMaxFSDP2(TorchFSDP2):
    """FSDP2 whose reduce-scatter is called with the op FSDP2 chose (AVG: the ledger sees it),
    but whose backend returns the max over the ranks instead: a backend that does not implement
    an op and computes another (the class of gloo's AVG that sums), hidden below the call."""

    def parallelize(self, model):
        import torch.distributed as dist
        from torch.distributed import distributed_c10d
        from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter

        class MaxBackend(DefaultReduceScatter):
            def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
                work = super().__call__(output_tensor, input_tensor, group, op, async_op)
                if work is not None:
                    work.wait()
                # what the backend actually computed: the max (the module's own function, not dist's)
                distributed_c10d.reduce_scatter_single(output=output_tensor, input=input_tensor, group=group,
                                                       op=dist.ReduceOp.MAX)
                return None

        model = super().parallelize(model)
        for group in _param_groups(model):
            group._reduce_scatter_comm = MaxBackend()
        return model


class ReplicateOffHSDP(TorchFSDP2):
    """FSDP2 on an HSDP mesh with every unit's replicate all-reduce switched off
    (``set_requires_all_reduce(False)``, a knob meant for gradient accumulation, left off): on a
    mesh whose shard dim has one rank nothing else reduces the gradients."""

    def parallelize(self, model):
        from torch.distributed.fsdp import FSDPModule

        model = super().parallelize(model)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_requires_all_reduce(False)
        return model


class UnreducedBiasFSDP2(TorchFSDP2):
    """FSDP2 with ``layer1.bias`` in ``ignored_params``: that parameter stays a plain tensor,
    whole on every rank, and no reduction carries its gradient (a parameter left out of the
    sharding: each rank keeps its own gradient, which differs with sharded data)."""

    def parallelize(self, model):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        from sweep.engines.torch_fsdp2 import torch_mp_policy

        mesh = init_device_mesh(self.device.type, tuple(int(n) for n in self.cfg.mesh.mesh_shape),
                                mesh_dim_names=tuple(self.cfg.mesh.mesh_dim_names))
        return fully_shard(model, mesh=mesh, reshard_after_forward=bool(self.cfg.reshard_after_forward),
                           mp_policy=torch_mp_policy(self.cfg.mp_policy), ignored_params={model.layer1.bias})


class IgnoredWeightDDP(TorchDDP):
    """DDP told to leave ``layer0.weight`` out of its reducer
    (``_set_params_and_buffers_to_ignore_for_model``): its gradient is never all-reduced."""

    def parallelize(self, model):
        from torch.nn.parallel import DistributedDataParallel

        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ["layer0.weight"])
        return super().parallelize(model)


class SumOpHPTorch(TorchHyperParallel):
    """hyper-parallel's ``fully_shard`` with its reduce op set to ``sum``
    (``set_reduce_op_type("sum")``) where FSDP semantics owe a mean."""

    def parallelize(self, model):
        model = super().parallelize(model)
        for module in model.modules():
            state = getattr(getattr(module, "hsdp_scheduler", None), "hsdp_state", None)
            if state is not None and hasattr(state, "set_reduce_op_type"):
                state.set_reduce_op_type("sum")
        return model


class _Steps:
    """Counts this engine's optimizer steps (its ``optimizer_step`` calls)."""

    def step_index(self) -> int:
        self._steps = getattr(self, "_steps", -1) + 1
        return self._steps


class SkewedReplicaHSDP(_Steps, TorchFSDP2):
    """FSDP2 on an HSDP mesh whose second replica row (mesh row 1) steps ``layer0.weight`` with
    its gradient x1.01 from step 1: the replicas of a shard part (a rank-dependent step)."""

    def optimizer_step(self, optimizer, grads=None, *, scaler=None):
        import torch.distributed as dist

        shape = [int(n) for n in self.cfg.mesh.mesh_shape]
        if self.step_index() >= 1 and dist.get_rank() // shape[-1] == 1:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None and tuple(p.shape) == (64, 32):  # layer0.weight
                        local = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                        local.mul_(1.01)
        super().optimizer_step(optimizer, grads, scaler=scaler)


class SkewedStatsFSDP2(TorchFSDP2):
    """FSDP2 whose rank 1 keeps its BatchNorm's running statistics with momentum 0.3 (the
    others 0.1): buffers every rank holds whole part, while every loss agrees."""

    def parallelize(self, model):
        import torch
        import torch.distributed as dist

        model = super().parallelize(model)
        if dist.get_rank() == 1:
            for module in model.modules():
                if isinstance(module, torch.nn.BatchNorm1d):
                    module.momentum = 0.3
        return model


class FrozenStatsFSDP2(TorchFSDP2):
    """FSDP2 whose BatchNorms keep their running statistics with momentum 0 on every rank: the
    distributed copy's statistics never move from their initial values while every loss agrees
    (the training forward normalises by the batch's own statistics)."""

    def parallelize(self, model):
        import torch

        model = super().parallelize(model)
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm1d):
                module.momentum = 0.0
        return model


class AutocastHeadFSDP2(TorchFSDP2):
    """FSDP2 under an fp32 policy whose last layer (``layer1``) runs under
    ``torch.autocast(dtype=bfloat16)`` (a region left on around the head): its output, and the
    model's, are bfloat16."""

    def parallelize(self, model):
        import torch

        model = super().parallelize(model)
        head = model.layer1
        inner = head.forward
        device = self.device.type

        def forward(*args, **kwargs):
            with torch.autocast(device, dtype=torch.bfloat16):
                return inner(*args, **kwargs)

        head.forward = forward
        return model


class HalfMasterFSDP2(_Steps, TorchFSDP2):
    """FSDP2 whose float32 master weights (the sharded parameters the optimizer steps) are
    rounded to float16 after each update from step 2 (a half-precision copy written back)."""

    def optimizer_step(self, optimizer, grads=None, *, scaler=None):
        import torch

        step = self.step_index()
        super().optimizer_step(optimizer, grads, scaler=scaler)
        if step >= 2:
            with torch.no_grad():
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        local = p.to_local() if hasattr(p, "to_local") else p
                        local.copy_(local.to(torch.float16).to(local.dtype))


class NoDecayBiasFSDP2(_Steps, TorchFSDP2):
    """FSDP2 whose optimizer steps the biases in a param group of their own with no weight
    decay (a recipe's grouping), whatever ``optimizer.weight_decay`` says."""

    def optimizer_step(self, optimizer, grads=None, *, scaler=None):
        if self.step_index() == 0:
            group = optimizer.param_groups[0]
            biases = [p for p in group["params"] if p.dim() == 1]
            group["params"] = [p for p in group["params"] if p.dim() != 1]
            optimizer.add_param_group({"params": biases, "weight_decay": 0.0})
        super().optimizer_step(optimizer, grads, scaler=scaler)


class StuckGradsFSDP2(_Steps, TorchFSDP2):
    """FSDP2 whose optimizer's ``zero_grad`` does nothing from step 2 on (a wrapper that
    swallows it): the gradients of each step are added to the last's."""

    def optimizer_step(self, optimizer, grads=None, *, scaler=None):
        if self.step_index() == 2:
            optimizer.zero_grad = lambda *args, **kwargs: None
        super().optimizer_step(optimizer, grads, scaler=scaler)


class FrozenLrFSDP2(_Steps, TorchFSDP2):
    """FSDP2 whose optimizer keeps step 2's lr from then on (the scheduler's value overwritten
    before every later update): the lr stops following the schedule in one copy."""

    def optimizer_step(self, optimizer, grads=None, *, scaler=None):
        step = self.step_index()
        if step == 2:
            self._held = [g["lr"] for g in optimizer.param_groups]
        if step > 2:
            for group, lr in zip(optimizer.param_groups, self._held):
                group["lr"] = lr
        super().optimizer_step(optimizer, grads, scaler=scaler)


class LoggingClipFSDP2(_Steps, TorchFSDP2):
    """FSDP2 whose optimizer step "logs" the gradient norm from step 3 on with
    ``clip_grad_norm_(..., max_norm=0.05)`` (meant to read the norm, it clips): the gradients
    the optimizer reads are scaled, before the losses show anything."""

    def optimizer_step(self, optimizer, grads=None, *, scaler=None):
        import torch

        if self.step_index() >= 3:
            params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
            total = torch.nn.utils.get_total_norm([p.grad for p in params])
            if hasattr(total, "full_tensor"):
                total = total.full_tensor()
            torch.nn.utils.clip_grads_with_norm_(params, 0.05, total)
        super().optimizer_step(optimizer, grads, scaler=scaler)


class PortedMomentumFSDP2(TorchFSDP2):
    """FSDP2 whose BatchNorm keeps its running statistics with momentum 0.5 (a port that
    carried MindSpore's 0.5 where torch's convention wants 1 - 0.9 = 0.1): the statistics
    end apart from the other framework's, while every training loss agrees."""

    def parallelize(self, model):
        import torch

        model = super().parallelize(model)
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm1d):
                module.momentum = 0.5
        return model


class HandReplicateHSDP(TorchFSDP2):
    """HSDP by hand: ``fully_shard`` over the ``dp_shard`` sub-mesh of the 2-D mesh only (FSDP2
    then all-reduces nothing across replicas), and the gradients' mean over ``dp_replicate``
    taken before the optimizer steps, one ``all_reduce`` of each local gradient shard (then
    divided by the replicate degree). Correct: every gradient crosses both dims once."""

    passes = 1

    def parallelize(self, model):
        from torch.distributed.device_mesh import init_device_mesh

        from sweep.engines.torch_fsdp2 import shard_on

        self.mesh2 = init_device_mesh(self.device.type, tuple(int(n) for n in self.cfg.mesh.mesh_shape),
                                      mesh_dim_names=tuple(self.cfg.mesh.mesh_dim_names))
        model, self.units = shard_on(model, self.cfg, self.mesh2["dp_shard"], self.notes)
        return model

    def optimizer_step(self, optimizer, grads=None, *, scaler=None):
        import torch.distributed as dist

        group = self.mesh2.get_group("dp_replicate")
        for param_group in optimizer.param_groups:
            for p in param_group["params"]:
                if p.grad is not None:
                    local = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                    for _ in range(self.passes):
                        dist.all_reduce(local, group=group)
                    local.div_(dist.get_world_size(group))
        super().optimizer_step(optimizer, grads, scaler=scaler)


class HandReplicateTwiceHSDP(HandReplicateHSDP):
    """:class:`HandReplicateHSDP` whose sum over ``dp_replicate`` runs twice before the divide:
    the gradients are x2 their mean (the replicate degree)."""

    passes = 2


class HandReplicateFlatHSDP(HandReplicateHSDP):
    """:class:`HandReplicateHSDP` whose mean over ``dp_replicate`` is of one flat buffer of every
    local gradient, copied back: correct, and its call names no parameter."""

    def optimizer_step(self, optimizer, grads=None, *, scaler=None):
        import torch
        import torch.distributed as dist

        group = self.mesh2.get_group("dp_replicate")
        grads = [p.grad.to_local() for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        flat = torch.cat([t.reshape(-1) for t in grads])
        dist.all_reduce(flat, group=group)
        flat.div_(dist.get_world_size(group))
        start = 0
        for t in grads:
            t.copy_(flat[start:start + t.numel()].view_as(t))
            start += t.numel()
        TorchFSDP2.optimizer_step(self, optimizer, grads=None, scaler=scaler)


class HandReplicateInClipHSDP(HandReplicateHSDP):
    """:class:`HandReplicateHSDP` with ``train.clip_grad_norm``: the mean over ``dp_replicate``
    taken in ``clip_grad_norm``, before the norm (correct: clipping reads reduced gradients)."""

    def clip_grad_norm(self, model, max_norm):
        import torch.distributed as dist

        group = self.mesh2.get_group("dp_replicate")
        for p in model.parameters():
            if p.grad is not None:
                local = p.grad.to_local()
                dist.all_reduce(local, group=group)
                local.div_(dist.get_world_size(group))
        return super().clip_grad_norm(model, max_norm)

    def optimizer_step(self, optimizer, grads=None, *, scaler=None):
        TorchFSDP2.optimizer_step(self, optimizer, grads, scaler=scaler)
