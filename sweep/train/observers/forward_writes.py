"""Which parameters a copy's forward changes in place (``RankResult.features["forward_writes"]``):
``nn.Embedding(max_norm=...)`` renorms the rows it looks up, a hand-written weight
normalisation assigns to its weight. In a plain module that change stays; under a sharding
engine (FSDP2's ``fully_shard``) the forward runs on an all-gathered copy of the parameter that
resharding frees, so the change is lost and the copies part at step 0's weights with their
gradients equal (``sweep.findings.places`` says so where the first differing weight is one of
these; note ``N192``). Read on the standalone copy, whose forward is the model's own.

Cost: a digest (``sweep.train.digests``) of every parameter before step 0 and after its first
micro-batch's forward, nothing after."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from sweep.train.observers.base import Observer, Step


CHUNK = 1 << 20  # elements copied out at a time: a 100M-parameter embedding adds 4 MB to the peak, not 400


def _digests(model: Any) -> Dict[str, Tuple[str, str, Tuple[int, ...]]]:
    """``{canonical name: (digest, dtype, shape)}`` of ``model``'s parameters (their local values,
    copied out of live storage :data:`CHUNK` elements at a time,
    ``sweep.train.torch_tensors.host_copy``)."""
    from sweep.train.digests import hasher
    from sweep.train.torch_tensors import host_copy, iter_state, local_part

    out = {}
    for name, param in iter_state(model, "weight", gather=False):
        digest, local = hasher(), local_part(param).detach()
        for chunk in local.reshape(-1).split(CHUNK):
            digest.update(np.ascontiguousarray(host_copy(chunk)))
        out[name] = (digest.hexdigest(), str(local.dtype), tuple(local.shape))
    return out


def _written(before: Tuple[str, str, Tuple[int, ...]], after: Tuple[str, str, Tuple[int, ...]]) -> bool:
    """Whether a parameter's values changed: the same dtype and shape, another digest. Another
    dtype or shape is the engine's view of it, not a write (a standalone copy under the job's
    policy, ``baseline.precision=policy``, on a one-rank FSDP2 mesh: with
    ``reshard_after_forward=false`` its forward leaves the unsharded ``param_dtype`` parameters
    registered, bf16 copies of the float32 shards)."""
    return before[1:] == after[1:] and before[0] != after[0]


class ForwardWrites(Observer):
    """``begin_step`` of step 0: each parameter's digest; ``after_forward`` of its first
    micro-batch: :attr:`changed`, the names whose digest the forward changed (``[]``: none;
    ``None``: not read, no step ran)."""

    def __init__(self) -> None:
        self.changed: Optional[List[str]] = None
        self._before: Optional[Dict[str, Tuple[str, str, Tuple[int, ...]]]] = None

    def begin_step(self, step: Step) -> None:
        if step.index == 0:
            self._before = _digests(step.copy.model)

    def after_forward(self, step: Step, output: Any) -> None:
        if self._before is None:
            return
        after = _digests(step.copy.model)
        self.changed = sorted(name for name, got in after.items() if name in self._before
                              and _written(self._before[name], got))
        self._before = None
