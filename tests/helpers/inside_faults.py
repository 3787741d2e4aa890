"""Test-only engines with a fault inside the model, the collectives or the optimizer
(issue 25), plugged in with ``engine.impl.torch=tests.helpers.inside_faults.X``. Real
FSDP2 on real ranks; each changes one thing, named in its docstring."""

from sweep.engines.torch_fsdp2 import TorchFSDP2

FORWARD_SCALE = 1.01  # LaterLayerForwardFSDP2: the factor on the later layer's output
EPS = 1e-5  # EpsOverrideFSDP2: the eps its optimizer runs with (configured: 1e-8)


def later_layer(model):
    """The module the forward fault hits: the transformer's second block's ``up``
    projection, else the MLP's ``layer1``: a later layer, never the first."""
    modules = dict(model.named_modules())
    for name in ("layers.1.up", "layer1"):
        if name in modules:
            return name, modules[name]
    raise ValueError("no later layer to fault in this model")


class LaterLayerForwardFSDP2(TorchFSDP2):
    """FSDP2 whose distributed copy's later layer (:func:`later_layer`) returns its output
    times ``FORWARD_SCALE``, on every rank, from step 0: a forward fault (a wrong
    all-gather of that layer's weight, a bad kernel) downstream of equal inputs."""

    def parallelize(self, model):
        model = super().parallelize(model)
        _, module = later_layer(model)
        module.register_forward_hook(lambda mod, args, out: out * FORWARD_SCALE)
        return model


class Bf16ReduceFSDP2(TorchFSDP2):
    """FSDP2 that reduce-scatters the gradients in bfloat16 whatever the configured
    ``mp_policy`` (a recipe's policy overriding the config): ``reduce_dtype=bfloat16``,
    the other policy fields as configured."""

    def parallelize(self, model):
        import torch
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        from sweep.engines.torch_fsdp2 import torch_mp_policy

        mesh = init_device_mesh(self.device.type, tuple(int(n) for n in self.cfg.mesh.mesh_shape),
                                mesh_dim_names=tuple(self.cfg.mesh.mesh_dim_names))
        policy = torch_mp_policy(self.cfg.mp_policy)
        policy = MixedPrecisionPolicy(param_dtype=policy.param_dtype, reduce_dtype=torch.bfloat16,
                                      output_dtype=policy.output_dtype, cast_forward_inputs=policy.cast_forward_inputs)
        return fully_shard(model, mesh=mesh, reshard_after_forward=bool(self.cfg.reshard_after_forward),
                           mp_policy=policy)


class OwnConfigBf16ReduceFSDP2(TorchFSDP2):
    """FSDP2 that swaps in a config of its own with ``mp_policy.reduce_dtype=bfloat16`` (a recipe
    that rebuilds the config it was handed) and shards by it: the reduce-scatter runs in
    bfloat16 while the job asked for float32."""

    def parallelize(self, model):
        from omegaconf import OmegaConf

        self.cfg = OmegaConf.create(OmegaConf.to_container(self.cfg, resolve=True))
        self.cfg.mp_policy.reduce_dtype = "bfloat16"
        return super().parallelize(model)


class EpsOverrideFSDP2(TorchFSDP2):
    """FSDP2 whose optimizer steps with ``eps=EPS`` (set on every param group before the
    first step), whatever ``optimizer.eps`` says: a recipe default overriding the config."""

    def optimizer_step(self, optimizer, grads=None, *, scaler=None):
        for group in optimizer.param_groups:
            if "eps" in group:
                group["eps"] = EPS
        super().optimizer_step(optimizer, grads, scaler=scaler)
