"""``sweep.train.observers.replicas.held_alone``: which parameters the replica digests leave out
(no other rank can hold their part alike, so their digest would be compared with nothing)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from sweep.train.observers.replicas import ReplicaDigests, held_alone


class Shard:
    dim = 0


class Replicate:
    pass


class _Mesh:
    def __init__(self, *sizes):
        self.sizes = sizes

    def size(self, dim=None):
        return int(np.prod(self.sizes)) if dim is None else self.sizes[dim]


def _param(mesh, *placements):
    return SimpleNamespace(device_mesh=mesh, placements=placements)


def test_a_shard_of_a_mesh_over_every_rank_is_held_alone():
    assert held_alone(_param(_Mesh(2), Shard()), 2)  # FSDP2, mesh dp2
    assert held_alone(_param(_Mesh(1, 4), Replicate(), Shard()), 4)  # a replicate dim of one rank


def test_replicas_sub_meshes_plain_tensors_and_unknown_worlds_are_digested():
    assert not held_alone(_param(_Mesh(2, 2), Replicate(), Shard()), 4)  # HSDP: replicas of each shard
    assert not held_alone(_param(_Mesh(2), Shard()), 4)  # a sub-mesh: another group's rank at each coordinate
    assert not held_alone(SimpleNamespace(), 2)  # a plain tensor (DDP, an unsharded parameter)
    assert not held_alone(_param(_Mesh(2), Shard()), None)
    assert not held_alone(_param(SimpleNamespace(size=None), Shard()), 2)  # another library's mesh


def test_a_model_whose_every_parameter_is_held_alone_records_empty_steps():
    """Every parameter left out is not "no list given": nothing is digested, a step still recorded."""
    import torch

    class Alone(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2))

    model = Alone()
    model.w.device_mesh, model.w.placements = _Mesh(2), (Shard(),)
    digests = ReplicaDigests(world=2)
    digests.after_step(SimpleNamespace(copy=SimpleNamespace(model=model)))
    assert digests.digests == [{}]
    everything = ReplicaDigests()
    everything.after_step(SimpleNamespace(copy=SimpleNamespace(model=model)))
    assert list(everything.digests[0]) == ["w"]
