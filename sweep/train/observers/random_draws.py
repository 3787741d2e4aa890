"""Whether a copy's training drew random numbers (``RankResult.random_draws``): a forward
with dropout draws; a plain MLP does not. Each copy trains in a random stream of its own,
seeded alike (``sweep.train.torch_rank.copy_random_stream``), so draws are no fault; the
job says so where both copies drew (``sweep.run.judge``)."""

from __future__ import annotations

from typing import Any, List, Optional

import numpy as np

from sweep.train.observers.base import Observer, Step


def rng_states(device: Any) -> List[Any]:
    """The generator states a training step could advance: torch's CPU generator, the
    accelerator's (``device``'s, a ``torch.device``, unless CPU) and numpy's global one."""
    import torch

    states = [torch.get_rng_state()]
    if device.type != "cpu":
        states.append(getattr(torch, device.type).get_rng_state(device))
    kind, keys, pos, gauss, cached = np.random.get_state()
    return states + [np.asarray(keys).copy(), (kind, pos, gauss, cached)]


def same_states(a: List[Any], b: List[Any]) -> bool:
    """Whether two :func:`rng_states` lists are equal, generator by generator."""
    import torch

    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor):
            if not torch.equal(x, y):
                return False
        elif isinstance(x, np.ndarray):
            if not np.array_equal(x, y):
                return False
        elif x != y:
            return False
    return True


class RandomDraws(Observer):
    """``begin_step`` of step 0: the generators' states (:func:`rng_states`); ``end``:
    :attr:`drew`, whether the training advanced any of them (torch)."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.drew: Optional[bool] = None
        self._before: Optional[List[Any]] = None

    def begin_step(self, step: Step) -> None:
        if step.index == 0:
            self._before = rng_states(self.device)

    def end(self, steps: int) -> None:
        self.drew = self._before is not None and not same_states(self._before, rng_states(self.device))
