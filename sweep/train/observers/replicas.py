"""Replica digests (``RankResult.replica["digests"]``): after each step, a sha1 of this
rank's local weights (``sweep.train.torch_tensors.local_digest``), so the job can hold the
ranks that hold the same shards (an HSDP mesh's replicate dim, DDP's ranks) against each
other (``sweep.run.judge``)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from sweep.train.observers.base import Observer, Step


class ReplicaDigests(Observer):
    """``after_step``: appends the digest of the weights after the step to :attr:`digests`
    (one hex string a step)."""

    def __init__(self) -> None:
        self.digests: List[str] = []

    def after_step(self, step: Step) -> None:
        from sweep.train.torch_tensors import local_digest

        self.digests.append(local_digest(step.copy.model))


def mindspore_digest(net: Any) -> str:
    """sha1 (hex) of this rank's local parameter values of a MindSpore ``net``
    (``trainable_params`` order, float32 bytes; a sharding engine's local shards)."""
    import hashlib

    import numpy as np

    digest = hashlib.sha1()
    for param in net.trainable_params():
        digest.update(np.ascontiguousarray(param.asnumpy().astype(np.float32)).tobytes())
    return digest.hexdigest()


def mindspore_shard_key(net: Any, full_shapes: Dict[str, Sequence[int]], rank: int) -> Optional[str]:
    """Which shards of the weights this rank holds (``RankResult.replica["key"]``, as torch's
    ``sweep.train.torch_tensors.shard_key``): per trainable parameter its name and local shape,
    and where the local tensor is a dim-0 slice of the full one (``full_shapes``: the
    standalone net's shapes by name), the slice's index ``rank % k`` (``k = full / local``
    rows: shard groups of consecutive ranks, as ``sweep.analysis.trace.to_shards`` reads
    them). ``None`` where a shape fits no such slice: nothing compared."""
    parts = []
    for param in net.trainable_params():
        local, full = tuple(param.shape), tuple(full_shapes.get(param.name, param.shape))
        entry = f"{param.name}{local}"
        if local != full:
            if not local or not local[0] or full[0] % local[0] or local[1:] != full[1:]:
                return None
            entry += f"@0:{rank % (full[0] // local[0])}/{full[0] // local[0]}"
        parts.append(entry)
    return ";".join(parts)


class MindSporeReplicaDigests(ReplicaDigests):
    """``after_step``: appends :func:`mindspore_digest` of the weights after the step."""

    def after_step(self, step: Step) -> None:
        self.digests.append(mindspore_digest(step.copy.model))
