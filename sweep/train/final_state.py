"""Each copy's buffers after the last step, recorded by the process that trained it
(``RankResult.final``), so that the job compares them by name wherever each copy trained
(in one rank, apart, or from the sweep's cached baseline: ``sweep.run.judge``). Buffers are
the running statistics the forward updates and no training loss reads: a statistic frozen
or updated otherwise in one copy is named even where every loss agrees, and one that never moved
from its value before the first step says so (``unchanged``)."""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional

import numpy as np

MAX_ELEMENTS = 1 << 18  # buffers of more elements in all are not recorded (a note says so)


def buffers_before(names: Iterable[str], buffers: Dict[str, Callable[[], Dict[str, Any]]]) -> Dict[str, Any]:
    """``{copy: {name: float64 array}}``: the buffers of the copies in ``names`` that ``buffers``
    can read, before their first step (for :func:`final_record`'s ``unchanged``); a copy of more
    than :data:`MAX_ELEMENTS` buffer elements is left out. Call it where every rank reads the
    same copies (a sharded buffer's reader may be a collective)."""
    out: Dict[str, Any] = {}
    for name in names:
        if name in buffers:
            found = {k: np.array(v, np.float64) for k, v in buffers[name]().items()}
            if 0 < sum(int(v.size) for v in found.values()) <= MAX_ELEMENTS:
                out[name] = found
    return out


def final_record(names: Iterable[str], buffers: Dict[str, Callable[[], Dict[str, Any]]],
                 before: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``{copy: {name: nested list}}`` of the copies in ``names`` that ``buffers`` can read
    (``copy -> () -> {name: array}``, full tensors or this rank's shards), or ``{copy:
    {"note": ...}}`` where they hold more than :data:`MAX_ELEMENTS` elements; ``{}`` for
    a model without buffers. With ``before`` (:func:`buffers_before`), ``"unchanged": {copy:
    [names]}``: the buffers still equal, bit for bit, to their value before the first step (a
    statistic the forward never updated, or whose update was lost)."""
    out: Dict[str, Any] = {}
    unchanged: Dict[str, List[str]] = {}
    for name in names:
        if name not in buffers:
            continue
        found = {k: np.asarray(v, np.float64) for k, v in buffers[name]().items()}
        size = sum(int(v.size) for v in found.values())
        if size > MAX_ELEMENTS:
            out[name] = {"note": f"not recorded: {size} buffer elements (more than {MAX_ELEMENTS})"}
        elif found:
            out[name] = {k: v.tolist() for k, v in found.items()}
            was = (before or {}).get(name)
            if was is not None:
                unchanged[name] = [k for k, v in found.items() if k in was and np.array_equal(v, was[k])]
    if unchanged:
        out["unchanged"] = unchanged
    return out


class EndBuffers:
    """One job's buffers on this rank: each copy's read before its first step
    (:func:`buffers_before`, at construction) and after its last (:meth:`record`).
    ``readers``: ``copy -> () -> {name: array}`` (full tensors or this rank's shards)."""

    def __init__(self, names: Iterable[str], readers: Dict[str, Callable[[], Dict[str, Any]]]) -> None:
        self.names, self.readers = list(names), readers
        self.before = buffers_before(self.names, readers)

    def record(self) -> Dict[str, Any]:
        """``RankResult.final``: :func:`final_record` with ``unchanged``."""
        return final_record(self.names, self.readers, self.before)
