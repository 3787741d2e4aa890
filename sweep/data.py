"""The report's training data, framework-free.

Sample ``i`` (0-based) is ``x = RandomState(seed_offset + i).randn(batch_size, in_size)``
and ``y = RandomState(seed_offset + i).randn(batch_size, out_size)``, each drawn from a
fresh ``RandomState`` as the report's reproducer does (so ``y`` equals the first
``out_size`` columns of ``x`` when ``batch_size`` is 1), cast to float32.
"""

from __future__ import annotations

from typing import List, Tuple

import numpy as np


def make_samples(
    steps: int, *, batch_size: int, in_size: int, out_size: int, seed_offset: int
) -> List[Tuple[np.ndarray, np.ndarray]]:
    """One ``(x, y)`` pair per step: float32 arrays of shapes ``(batch_size, in_size)``
    and ``(batch_size, out_size)``. Identical on every rank and every call."""
    samples = []
    for i in range(steps):
        x = np.random.RandomState(seed_offset + i).randn(batch_size, in_size).astype(np.float32)
        y = np.random.RandomState(seed_offset + i).randn(batch_size, out_size).astype(np.float32)
        samples.append((x, y))
    return samples
