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
    and ``(batch_size, out_size)``. Identical on every rank and every call.

    Same values as the definition above, 40x faster: one ``RandomState`` re-seeded per
    sample (``seed`` resets it exactly as construction does, cached Gaussian included),
    and one draw of ``batch_size * max(in_size, out_size)`` normals whose first
    ``batch_size * in_size`` form ``x`` and first ``batch_size * out_size`` form ``y``
    (``randn`` fills row-major from one stream). ``tests/unit/test_data.py`` checks
    it against the definition.
    """
    state = np.random.RandomState()
    n = batch_size * max(in_size, out_size)
    samples = []
    for i in range(steps):
        state.seed(seed_offset + i)
        values = state.randn(n)
        x = values[: batch_size * in_size].reshape(batch_size, in_size).astype(np.float32)
        y = values[: batch_size * out_size].reshape(batch_size, out_size).astype(np.float32)
        samples.append((x, y))
    return samples
