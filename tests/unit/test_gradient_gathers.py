"""``sweep.train.observers.reductions._Gradients``: which steps gather every rank's gradients,
and what the gather sends (float64; a ``world``-rank gather played by one process: every rank is
given this rank's values, as a real all-gather of equal inputs returns)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from sweep.train.observers.reductions import _Gradients


class _Echo(_Gradients):
    """A gather every rank answers with the same values; records what was sent."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sent = []

    def all_gather(self, values):
        self.sent.append(values.dtype)
        return np.stack([values] * self.world)


def _step(index):
    return SimpleNamespace(index=index)


def test_a_run_watches_step_0_and_its_tracing_rerun_none():
    run, rerun = _Echo(True, until=0, world=2), _Echo(True, until=-1, world=2)
    assert run.gathers(_step(0)) and not run.gathers(_step(1))
    assert not rerun.gathers(_step(0))
    assert not _Echo(False, until=0, world=2).gathers(_step(0))  # the standalone copy reduces nothing


def test_gradients_travel_as_float64_and_arrive_exact():
    """float64 on the wire, float32 gradients too: sending float32 and widening after gave the
    same values but raised a passing 42.6M job's peak by 0.24 GiB in two paired runs (as a
    session before had found; ``docs/scale.md``), so it was taken out again."""
    rng = np.random.default_rng(0)
    local = {"a.weight": rng.standard_normal((5, 3)).astype(np.float32),
             "b.bias": (rng.standard_normal(7) * 1e-30).astype(np.float32)}
    gathers = _Echo(True, until=0, world=3)
    chunks = list(gathers._gathered(sorted(local), local))
    assert gathers.sent == [np.float64]
    for name, values in local.items():
        got = next(c[name] for c in chunks if name in c)
        assert got.dtype == np.float64 and got.shape == (3, *values.shape)
        assert np.array_equal(got[2], values.astype(np.float64))


def test_float64_gradients_arrive_whole():
    local = {"w": np.array([1.0 + 2.0 ** -40, -3.0])}  # not representable in float32
    gathers = _Echo(True, until=0, world=2)
    got = next(iter(gathers._gathered(["w"], local)))["w"]
    assert gathers.sent == [np.float64]
    assert got[1, 0] == 1.0 + 2.0 ** -40
