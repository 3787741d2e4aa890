"""Replica digests (``RankResult.replica["digests"]``): after each step, a sha1 of this
rank's local weights (``sweep.train.torch_step.local_digest``), so the job can hold the
ranks that hold the same shards (an HSDP mesh's replicate dim, DDP's ranks) against each
other (``sweep.run.judge``)."""

from __future__ import annotations

from typing import List

from sweep.train.observers.base import Observer, Step


class ReplicaDigests(Observer):
    """``after_step``: appends the digest of the weights after the step to :attr:`digests`
    (one hex string a step)."""

    def __init__(self) -> None:
        self.digests: List[str] = []

    def after_step(self, step: Step) -> None:
        from sweep.train.torch_step import local_digest

        self.digests.append(local_digest(step.copy.model))
