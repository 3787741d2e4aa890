"""The collective ledger of a torch copy (``RankResult.collectives``): every
``torch.distributed`` call the copy's forward, backward, gradient unscaling, clipping and
optimizer step make (``engine.collectives()``, ``sweep.engines.collectives``), never the
tracer's own gathers, which run outside the spans it opens."""

from __future__ import annotations

from typing import Any, ContextManager, Dict, List, Optional

from sweep.train.observers.base import Observer, Step


class CollectiveLedger(Observer):
    """Watches steps 0 to ``until`` (at least step 0: the dtype observer reads its first
    reduction there): ``begin_step`` opens a new ``engine.collectives()`` ledger
    (:attr:`current`, its entries tagged with the step), entered around the ``grads``,
    ``clip`` and ``update`` spans (each entry tagged with the span's name); ``after_update`` appends its entries to :attr:`entries` when
    ``keep`` (the standalone copy's is read for its dtypes only)."""

    def __init__(self, engine: Any, until: int = 0, keep: bool = True) -> None:
        self.engine, self.until, self.keep = engine, max(int(until), 0), keep
        self.entries: List[Dict[str, Any]] = []
        self.current: Any = None

    def begin_step(self, step: Step) -> None:
        self.current = None
        if step.index <= self.until:
            self.current = self.engine.collectives()
            self.current.step = step.index

    def span(self, step: Step, name: str) -> Optional[ContextManager[Any]]:
        if self.current is None or name not in ("grads", "clip", "update"):
            return None
        self.current.span = name  # each entry says which part of the step made it
        if name in ("clip", "update"):  # a reduction given a gradient itself names its parameter (by hand)
            from sweep.engines.collectives import local_grads

            self.current.grad_owners = local_grads(step.copy.model)
        return self.current

    def after_update(self, step: Step) -> None:
        if self.keep and self.current is not None:
            self.entries.extend(self.current.entries)
