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


class _Exchange(_Echo):
    """As :class:`_Echo`, with the all-to-all: every rank holds these gradients, so what rank
    ``q`` sends this one is this one's own part for itself."""

    exchanges = True

    def all_to_all(self, parts):
        self.sent.append(("all_to_all", [p.size for p in parts]))
        return np.stack([parts[self.rank]] * self.world)


def test_an_exchange_brings_each_rank_its_rows_of_every_ranks_gradient():
    rng = np.random.default_rng(1)
    local = {"w": rng.standard_normal((5, 3)), "b": rng.standard_normal(4), "s": np.array(2.0)}
    reduced = {"w": local["w"][3:5], "b": local["b"][2:4], "s": local["s"]}  # rank 1 of 2: torch.chunk's rows
    ranks = _Exchange(True, until=0, rank=1, world=2)
    table = ranks._rows_table(sorted(local), local, reduced, {"w": (1, 2), "b": (1, 2)})
    assert table == [{"b": (2, 4), "w": (3, 5)}] * 2  # (the echo: every rank reports this one's rows)
    chunks = list(ranks._gathered(sorted(local), local, table))
    got = {n: a for c in chunks for n, a in c.items()}
    assert got["w"].shape == (2, 2, 3) and np.array_equal(got["w"][0], local["w"][3:5])
    assert got["b"].shape == (2, 2) and got["s"].shape == (2,)  # a 0-d one travels whole, gathered
    whole = {n: a for c in _Echo(True, until=0, rank=1, world=2)._gathered(sorted(local), local) for n, a in c.items()}
    assert np.array_equal(whole["w"][:, 3:5], got["w"]) and np.array_equal(whole["b"][:, 2:4], got["b"])


def test_the_op_that_ran_is_the_same_by_exchange_as_by_whole_gathers():
    """Rank 1 of 2 holds its rows of gradients reduced by a sum (every rank's gradient alike):
    the verdicts, scales included, are those of gathering every gradient whole."""
    rng = np.random.default_rng(2)
    local = {"big": rng.standard_normal((6, 4)), "small": rng.standard_normal(5) * 1e-6}
    reduced = {"big": 2 * local["big"][3:6], "small": local["small"][3:5]}  # a sum, and the mean
    found = []
    for kind in (_Echo, _Exchange):
        ranks = kind(True, until=0, rank=1, world=2)
        ranks.check(_step(0), local, reduced, {"big": (1, 2), "small": (1, 2)})
        found.append(ranks.found[0])
    assert found[0] == found[1]
    assert found[1]["big"]["op"] == "sum" and found[1]["small"]["op"] == "mean"


def test_a_large_gradient_is_checked_on_some_columns_of_every_row_and_decided_alike():
    """The step's check reads every row but only some columns of a gradient over
    ``check_elements`` (``sweep.analysis.reductions.sampled``): the op each gradient is found to
    have run, and its factor, are those of reading every element; the sizes stay the whole
    tensors'."""
    from sweep.analysis.reductions import check_columns

    rng = np.random.default_rng(3)
    local = {"big": rng.standard_normal((40, 30)), "half": rng.standard_normal((40, 30)),
             "bias": rng.standard_normal(40), "ok": rng.standard_normal((40, 3, 10))}
    reduced = {"big": 2 * local["big"][20:40], "half": 0.5 * local["half"][20:40], "bias": local["bias"][20:40],
               "ok": local["ok"][20:40]}  # rank 1 of 2: a sum, half the mean, the mean, the mean
    index = {n: (1, 2) for n in local}
    found, sizes = [], []
    for cap in (10 ** 9, 100):
        for kind in (_Echo, _Exchange):
            ranks = kind(True, until=0, rank=1, world=2)
            ranks.check_elements = cap
            ranks.check(_step(0), local, reduced, index)
            found.append({n: (f["op"], f["factor"]) for n, f in ranks.found[0].items()})
            sizes.append(ranks.sizes)
    assert check_columns((40, 30), 100) == 2 and check_columns((40, 3, 10), 100) == 2
    assert check_columns((40,), 100) is None and check_columns((4, 5), 100) is None
    assert all(f == found[0] for f in found)
    assert found[0]["big"][0] == "sum" and found[0]["bias"][0] == "mean" and found[0]["ok"][0] == "mean"
    assert found[0]["half"] == ("x0.5 the mean", 0.5)
    assert all(s == {"big": 1200, "half": 1200, "bias": 40, "ok": 1200} for s in sizes)


def test_a_fault_on_the_upper_columns_of_a_large_gradient_is_still_seen_by_the_check():
    """The columns the check reads are spread over the whole width (``spread_columns``): a
    gradient whose upper half of columns was doubled after a correct mean (a fault a new user
    planted on ``layers.0.up.weight``, 1024 x 256, where the first 64 columns alone read as
    the mean) is not called the mean."""
    from sweep.analysis.reductions import spread_columns

    rng = np.random.default_rng(4)
    local = {"w": rng.standard_normal((40, 30))}
    after = local["w"][20:40].copy()
    after[:, 15:] *= 2.0  # the upper half of the columns, after a correct mean
    ranks = _Exchange(True, until=0, rank=1, world=2)
    ranks.check_elements = 100  # 2 columns of 30 a row: 0 and 29
    ranks.check(_step(0), local, {"w": after}, {"w": (1, 2)})
    assert list(spread_columns(30, 2)) == [0, 29] and list(spread_columns(10, 10)) == list(range(10))
    assert ranks.found[0]["w"]["op"] != "mean"
