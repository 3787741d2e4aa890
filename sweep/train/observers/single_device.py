"""The standalone copy (and its twin) trains as on a single device (torch): inside its steps
``torch.distributed.is_initialized()`` reads ``False``, and any ``torch.distributed`` collective
its model still calls is counted (``RankResult.features["stray_collectives"]``, note ``N193``).

Why: a rank process has a process group, and the standalone copy trains in it, beside the
ranks (``order=standalone_first``: rank 0's standalone copy while the last rank trains the
twin). A model written for both single-device and distributed training asks
``torch.distributed.is_initialized()`` before it synchronises (``nn.SyncBatchNorm``, a
hand-written centring that all-reduces its statistics); asked in a rank process it answered
``True``, so the standalone copy's forward all-reduced with whatever another rank called at
that moment (the twin's forward on the last rank), and its losses were not a single device's.
``order=separate`` trains it in a process whose default group has one rank, where such a call
is the identity; both now give the same losses. A model that calls a collective without asking
is not changed (the call runs as it did), only counted: the note says so.

The patch covers the ``grads``, ``clip`` and ``update`` spans of the step
(``sweep.train.torch_step``), the model's forward, backward and optimizer step; the
framework's own code reads ``torch.distributed.distributed_c10d``'s binding and is unaffected.
"""

from __future__ import annotations

import contextlib
from typing import Any, ContextManager, Dict, Iterator, Optional

from sweep.train.observers.base import Observer, Step

SPANS = ("grads", "clip", "update")


class SingleDevice(Observer):
    """Patches ``torch.distributed.is_initialized`` to return ``False`` inside the step's
    :data:`SPANS`, and counts the ``torch.distributed`` collectives called there
    (``sweep.engines.collectives.WATCHED``, by the name the model called) in :attr:`called`
    (``{op: calls}``; empty: none)."""

    def __init__(self) -> None:
        self.called: Dict[str, int] = {}

    def span(self, step: Step, name: str) -> Optional[ContextManager[Any]]:
        return self._alone() if name in SPANS else None

    @contextlib.contextmanager
    def _alone(self) -> Iterator[None]:
        import torch.distributed as dist

        from sweep.engines.collectives import WATCHED

        saved = {name: getattr(dist, name) for name in ("is_initialized", *WATCHED) if hasattr(dist, name)}
        try:
            dist.is_initialized = lambda: False
            for name in WATCHED:
                if name in saved:
                    setattr(dist, name, self._counted(name, saved[name]))
            yield
        finally:
            for name, original in saved.items():
                setattr(dist, name, original)

    def _counted(self, name: str, original: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if not _alone_in(_group_of(original, args, kwargs)):
                self.called[name] = self.called.get(name, 0) + 1
            return original(*args, **kwargs)

        return call


def _group_of(function: Any, args: Any, kwargs: Any) -> Any:
    """The ``group`` argument of a ``torch.distributed`` collective's call (``None``: the default
    group, every rank), by its signature."""
    import inspect

    if "group" in kwargs:
        return kwargs["group"]
    try:
        params = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return None
    index = params.index("group") if "group" in params else None
    return args[index] if index is not None and index < len(args) else None


def _alone_in(group: Any) -> bool:
    """Whether a collective's group holds this rank alone (a one-rank mesh's: the standalone copy
    under the job's policy, ``baseline.precision=policy``, whose ``ShardedGradScaler`` all-reduces
    its inf check over it): the identity, as on a single device; not counted."""
    size = getattr(group, "size", None)
    try:
        return callable(size) and int(size()) == 1
    except Exception:  # (a group object that cannot say: counted, as before)
        return False
