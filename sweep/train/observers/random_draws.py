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


def drawing_cells(net: Any) -> List[str]:
    """The names of ``net``'s Cells that draw a random mask when trained: a ``Dropout`` of
    any kind (``nn.Dropout``, ``nn.Dropout1d/2d/3d``, ``mint.nn.Dropout``, ...) whose drop
    probability (``p``, else ``1 - keep_prob``) is above 0."""
    found = []
    for name, cell in net.cells_and_names():
        if "Dropout" not in type(cell).__name__:
            continue
        p = getattr(cell, "p", None)
        if p is None and getattr(cell, "keep_prob", None) is not None:
            p = 1.0 - float(cell.keep_prob)
        if p is None or float(p) > 0:
            found.append(name)
    return found


class MindSporeRandomDraws(Observer):
    """Whether a MindSpore copy's training drew random numbers, into :attr:`drew`.

    ``begin_step`` of step 0: the default generator's state (``mindspore.get_rng_state``,
    what ``mint``'s random ops draw from) and numpy's; ``end``: :attr:`drew` is true when
    either advanced, or when the net holds a Cell of :func:`drawing_cells` and trained in
    training mode (an ``nn.Dropout`` kernel keeps its own state, out of Python's sight, so
    such a Cell counts by what it is; :attr:`cells` names them)."""

    def __init__(self) -> None:
        self.drew: Optional[bool] = None
        self.cells: List[str] = []
        self._before: Optional[List[Any]] = None

    @staticmethod
    def _states() -> List[Any]:
        import mindspore as ms

        kind, keys, pos, gauss, cached = np.random.get_state()
        states: List[Any] = [np.asarray(keys).copy(), (kind, pos, gauss, cached)]
        if hasattr(ms, "get_rng_state"):
            state = ms.get_rng_state()
            for part in state if isinstance(state, (tuple, list)) else [state]:
                states.append(np.asarray(part.asnumpy()).copy() if hasattr(part, "asnumpy") else part)
        return states

    def begin_step(self, step: Step) -> None:
        if step.index == 0:
            self._before = self._states()
            net = step.copy.model
            self.cells = drawing_cells(net) if getattr(net, "training", True) else []

    def end(self, steps: int) -> None:
        if self._before is None:
            return
        after = self._states()
        moved = any(not (np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b)
                    for a, b in zip(self._before, after))
        self.drew = moved or bool(self.cells)
