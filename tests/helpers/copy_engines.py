"""Test-only engines that break the promise that the two copies differ in the engine and
nothing else, or that stress the observer (``engine.impl.torch=tests.helpers.copy_engines.X``).
Real FSDP2 on real ranks; each changes one thing, named in its docstring."""

from sweep.engines.torch_fsdp2 import TorchFSDP2


def _mesh(engine):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(engine.device.type, tuple(int(n) for n in engine.cfg.mesh.mesh_shape),
                            mesh_dim_names=tuple(engine.cfg.mesh.mesh_dim_names))


class UnshardedRootFSDP2(TorchFSDP2):
    """FSDP2 on the root only with ``reshard_after_forward=False``, and one forward (no
    gradient) inside ``parallelize``, before the optimizer exists: the model is left
    unsharded, its parameters plain tensors over FSDP2's unsharded storage, until the
    first backward reshards it (frees that storage by resizing it to 0). A snapshot that
    views that storage from numpy makes the resize raise "Trying to resize storage that
    is not resizable"; a correct one copies out of it. The optimizer, built after that
    forward, holds those unsharded parameters rather than the sharded ones FSDP2 updates
    after the first backward: the job runs, and fails at step 0's update (the tracing
    rerun names it), a deterministic fault to trace."""

    def parallelize(self, model):
        import torch
        from torch.distributed.fsdp import fully_shard

        from sweep.engines.torch_fsdp2 import torch_mp_policy

        fully_shard(model, mesh=_mesh(self), reshard_after_forward=False, mp_policy=torch_mp_policy(self.cfg.mp_policy))
        with torch.no_grad():
            model(torch.zeros(1, int(self.cfg.model.in_size), device=self.device))
        return model


class BufferShiftFSDP2(TorchFSDP2):
    """FSDP2 that adds ``SHIFT`` to every floating buffer of the distributed copy on rank 1
    after ``fully_shard`` (a rank that loaded stale running statistics). In training mode
    BatchNorm normalises by the batch, so the losses need not show it: the step-0 check
    must (``model=mlp_norm``: ``norm1.running_mean``, ``norm1.running_var``)."""

    SHIFT = 0.5

    def parallelize(self, model):
        import torch
        import torch.distributed as dist

        model = super().parallelize(model)
        if dist.get_rank() == 1:
            with torch.no_grad():
                for buffer in model.buffers():
                    if buffer.is_floating_point():
                        buffer.add_(self.SHIFT)
        return model


class ShardShiftFSDP2(TorchFSDP2):
    """FSDP2 that adds ``SHIFT`` to the last element of rank 1's shard of ``layer1.weight`` after
    ``fully_shard``: the copies start apart in one row that only rank 1 holds, which the
    initial check's shard-by-shard test must see (``sweep.train.torch_rank.initial_equal``) and
    its gathers then name."""

    SHIFT = 1e-3

    def parallelize(self, model):
        import torch
        import torch.distributed as dist

        model = super().parallelize(model)
        if dist.get_rank() == 1:
            with torch.no_grad():
                model.layer1.weight._local_tensor.view(-1)[-1] += self.SHIFT
        return model


class ExtraParamFSDP2(TorchFSDP2):
    """FSDP2 whose distributed copy gets one parameter more, ``extra`` (4 zeros, unused by
    the forward, so the losses stay equal): a copy that holds what the other lacks."""

    def parallelize(self, model):
        import torch

        model.register_parameter("extra", torch.nn.Parameter(torch.zeros(4, device=self.device)))
        return super().parallelize(model)


class NoReplicaReduceHSDP(TorchFSDP2):
    """HSDP without the reduction across replicas: ``fully_shard`` given only the shard
    sub-mesh (``mesh["dp_shard"]`` of ``mesh=hsdp2x2``), so each replicate group trains on
    its own rows (``data.split=sharded``) and the replicas of a shard part from step 0."""

    def parallelize(self, model):
        from torch.distributed.fsdp import fully_shard

        from sweep.engines import wrapping
        from sweep.engines.torch_fsdp2 import torch_mp_policy

        shard_mesh = _mesh(self)[self.cfg.mesh.mesh_dim_names[-1]]

        def shard(module, policy):
            return fully_shard(module, mesh=shard_mesh, reshard_after_forward=bool(self.cfg.reshard_after_forward),
                               mp_policy=torch_mp_policy(policy))

        model, self.units = wrapping.shard(model, self.cfg, shard, self.cfg.mp_policy)
        return model


class CheckpointWrappedFSDP2(TorchFSDP2):
    """A correct engine whose wrapper renames every parameter: each direct child of the
    root that holds parameters goes through torch's (non-reentrant) ``checkpoint_wrapper``
    before ``fully_shard``, so the distributed copy's names gain
    ``_checkpoint_wrapped_module.``; recomputing the forward changes no loss, but a
    BatchNorm's running statistics are updated again by the recomputation (torch's
    checkpoint reruns the forward in training mode) in this copy only."""

    def parallelize(self, model):
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

        for name, child in list(model.named_children()):
            if any(True for _ in child.parameters()):
                setattr(model, name, checkpoint_wrapper(child))
        return super().parallelize(model)


class Replica1GradScaleHSDP(TorchFSDP2):
    """HSDP (``mesh=hsdp2x2``): the ranks of replica 1 (global ranks 2 and 3) scale their
    local gradient shards by 1.01 before the step, replica 0 is correct. With sharded data
    rank 0's first difference is summation-order rounding; ranks 2 and 3 part for real."""

    def optimizer_step(self, optimizer, grads=None, **kwargs):
        import torch.distributed as dist

        if dist.get_rank() >= 2:
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if param.grad is not None:
                        param.grad.to_local().mul_(1.01)
        super().optimizer_step(optimizer, grads, **kwargs)
