"""The report's training data, framework-free.

Sample ``i`` (0-based) is ``x = RandomState(seed_offset + i).randn(batch_size, in_size)``
and ``y = RandomState(seed_offset + i).randn(batch_size, out_size)``, each drawn from a
fresh ``RandomState`` as the report's reproducer does (so ``y`` equals the first
``out_size`` columns of ``x`` when ``batch_size`` is 1), cast to float32.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np

from sweep.errors import ConfigError


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


def regression(steps: int, *, batch_size: int, seed_offset: int, in_size: int, out_size: int
               ) -> List[Tuple[np.ndarray, np.ndarray]]:
    """``data._target_=sweep.models.data.regression`` (the default): :func:`make_samples`."""
    return make_samples(steps, batch_size=batch_size, in_size=in_size, out_size=out_size, seed_offset=seed_offset)


def tokens(steps: int, *, batch_size: int, seed_offset: int, vocab_size: int, seq_len: int
           ) -> List[Tuple[np.ndarray, np.ndarray]]:
    """``data._target_=sweep.models.data.tokens``: per step, ``batch_size`` rows of ``seq_len``
    int64 token ids ``x`` and their next tokens ``y`` (``x`` shifted by one), both of
    shape ``(batch_size, seq_len)``. Row ``r`` of step ``i`` is an arithmetic sequence
    modulo ``vocab_size`` with a start in ``[0, vocab_size)`` and a stride in ``[1, 4]``
    drawn from ``RandomState(seed_offset + i)``: learnable from its context, so the loss
    of a causal LM falls."""
    state = np.random.RandomState()
    positions = np.arange(seq_len + 1)
    samples = []
    for i in range(steps):
        state.seed(seed_offset + i)
        start = state.randint(0, vocab_size, size=(batch_size, 1))
        stride = state.randint(1, 5, size=(batch_size, 1))
        seq = ((start + stride * positions) % vocab_size).astype(np.int64)
        samples.append((seq[:, :-1].copy(), seq[:, 1:].copy()))
    return samples


def factory_of(cfg: Any) -> Any:
    """The callable ``data._target_`` names (checked before launch, ``sweep.run.checks``).

    Raises:
        ConfigError: it does not import.
    """
    from sweep.config import factories

    return factories.load("data._target_", str(cfg.data._target_))


def build(cfg: Any, rows: int) -> List[Tuple[np.ndarray, np.ndarray]]:
    """The job's samples: ``data._target_`` called through ``hydra.utils.instantiate``
    with ``steps``, ``batch_size=rows`` (rows of one step across the copies that share
    it), ``seed_offset``, those of ``model.in_size``/``model.out_size`` and of
    ``model.args`` it names, and every entry of ``data.args``.

    The factory returns ``steps`` pairs ``(inputs, targets)`` of numpy arrays whose first
    dim is ``rows``; the job slices rows for ranks and micro-batches.

    Raises:
        ConfigError: the factory does not import, or returns something else.
    """
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from sweep.config import factories

    target = str(cfg.data._target_)
    offered = {"in_size": cfg.model.in_size, "out_size": cfg.model.out_size,
               **(OmegaConf.to_container(cfg.model.args, resolve=True) if cfg.model.args else {})}
    kwargs = factories.accepted(factory_of(cfg), offered)
    kwargs.update(OmegaConf.to_container(cfg.data.args, resolve=True) if cfg.data.args else {})
    samples = instantiate({"_target_": target, **kwargs}, cfg.steps, batch_size=rows,
                          seed_offset=cfg.data.seed_offset, _convert_="all")
    came = _what_came(samples, cfg.steps, rows)
    if came:
        raise ConfigError(f"data._target_={target} must return {cfg.steps} (inputs, targets) pairs of numpy arrays "
                          f"of {rows} rows each: {came}")
    return samples


def _what_came(samples: Any, steps: int, rows: int) -> Optional[str]:
    """What a data factory returned instead of ``steps`` pairs of numpy arrays of ``rows`` rows
    (:func:`build`'s error): how many items, or the first item that is not such a pair;
    ``None`` where it is."""
    if not isinstance(samples, (list, tuple)):
        return f"it returned a {type(samples).__name__}"
    if len(samples) != steps:
        return f"it returned {len(samples)}"
    for i, item in enumerate(samples):
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            what = f"{len(item)} parts" if isinstance(item, (list, tuple)) else f"a {type(item).__name__}"
            return f"item {i} is {what}"
        if not all(isinstance(part, np.ndarray) and part.ndim > 0 for part in item):
            return f"pair {i} holds a {' and a '.join(_kind(part) for part in item)}"
        if any(len(part) != rows for part in item):
            return f"pair {i} holds {' and '.join(str(len(part)) for part in item)} rows"
    return None


def _kind(part: Any) -> str:
    return f"{part.ndim}-d numpy array" if isinstance(part, np.ndarray) else type(part).__name__
