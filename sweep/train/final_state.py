"""Each copy's buffers after the last step, recorded by the process that trained it
(``RankResult.final``), so that the job compares them by name wherever each copy trained
(in one rank, apart, or from the sweep's cached baseline: ``sweep.run.judge``). Buffers are
the running statistics the forward updates and no training loss reads: a statistic frozen
or updated otherwise in one copy is named even where every loss agrees."""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable

import numpy as np

MAX_ELEMENTS = 1 << 18  # buffers of more elements in all are not recorded (a note says so)


def final_record(names: Iterable[str], buffers: Dict[str, Callable[[], Dict[str, Any]]]) -> Dict[str, Any]:
    """``{copy: {name: nested list}}`` of the copies in ``names`` that ``buffers`` can read
    (``copy -> () -> {name: array}``, full tensors or this rank's shards), or ``{copy:
    {"note": ...}}`` where they hold more than :data:`MAX_ELEMENTS` elements; ``{}`` for
    a model without buffers."""
    out: Dict[str, Any] = {}
    for name in names:
        if name not in buffers:
            continue
        found = {k: np.asarray(v, np.float64) for k, v in buffers[name]().items()}
        size = sum(int(v.size) for v in found.values())
        if size > MAX_ELEMENTS:
            out[name] = {"note": f"not recorded: {size} buffer elements (more than {MAX_ELEMENTS})"}
        elif found:
            out[name] = {k: v.tolist() for k, v in found.items()}
    return out
