import numpy as np

from sweep.models.data import make_samples


def test_samples_follow_the_report_recipe():
    samples = make_samples(3, batch_size=1, in_size=32, out_size=24, seed_offset=44)
    assert len(samples) == 3
    x, y = samples[2]
    assert x.shape == (1, 32) and y.shape == (1, 24)
    assert x.dtype == np.float32 and y.dtype == np.float32
    np.testing.assert_array_equal(x, np.random.RandomState(46).randn(1, 32).astype(np.float32))
    # y comes from a fresh RandomState with the same seed, so it repeats x's first draws
    np.testing.assert_array_equal(y, x[:, :24])


def test_samples_are_identical_across_calls():
    a = make_samples(5, batch_size=2, in_size=4, out_size=3, seed_offset=7)
    b = make_samples(5, batch_size=2, in_size=4, out_size=3, seed_offset=7)
    for (xa, ya), (xb, yb) in zip(a, b):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)


def test_samples_equal_the_fresh_randomstate_definition_for_every_shape():
    # batch > 1 and out_size > in_size: each array is its own RandomState(seed).randn draw
    for batch, n_in, n_out in [(1, 32, 24), (3, 32, 24), (2, 8, 40)]:
        for i, (x, y) in enumerate(make_samples(20, batch_size=batch, in_size=n_in, out_size=n_out, seed_offset=5)):
            np.testing.assert_array_equal(x, np.random.RandomState(5 + i).randn(batch, n_in).astype(np.float32))
            np.testing.assert_array_equal(y, np.random.RandomState(5 + i).randn(batch, n_out).astype(np.float32))


def short_data(steps, *, batch_size, seed_offset, in_size, out_size):
    """A user's data factory that returns 3 items too few (the last of them a pair of too few rows)."""
    return make_samples(steps, batch_size=batch_size, in_size=in_size, out_size=out_size,
                        seed_offset=seed_offset)[:steps - 3]


def one_row_data(steps, *, batch_size, seed_offset, in_size, out_size):
    """A user's data factory that ignores ``batch_size``: one row a step."""
    return make_samples(steps, batch_size=1, in_size=in_size, out_size=out_size, seed_offset=seed_offset)


def list_data(steps, *, batch_size, seed_offset, in_size, out_size):
    """A user's data factory that returns Python lists, not numpy arrays (a new user's)."""
    return [(x.tolist(), y.tolist()) for x, y in one_row_data(steps, batch_size=batch_size, seed_offset=seed_offset,
                                                              in_size=in_size, out_size=out_size)]


def scalar_targets(steps, *, batch_size, seed_offset, in_size, out_size):
    """Inputs of ``batch_size`` rows, a numpy scalar for a target."""
    import numpy as np

    return [(x, np.float32(0.0) * np.ones(())) for x, _ in make_samples(
        steps, batch_size=batch_size, in_size=in_size, out_size=out_size, seed_offset=seed_offset)]


def test_a_data_factory_that_returns_too_few_pairs_is_told_what_it_returned(compose_cfg):
    import pytest

    from sweep.errors import ConfigError
    from sweep.models.data import build

    cfg = compose_cfg(["steps=10", "data._target_=tests.unit.test_data.short_data"])
    with pytest.raises(ConfigError, match=r"must return 10 \(inputs, targets\) pairs of numpy arrays of 1 rows each: "
                                          r"it returned 7"):
        build(cfg, 1)
    one_row = compose_cfg(["steps=3", "data._target_=tests.unit.test_data.one_row_data"])
    with pytest.raises(ConfigError, match=r"of 2 rows each: pair 0 holds 1 and 1 rows"):
        build(one_row, 2)
    lists = compose_cfg(["steps=3", "data._target_=tests.unit.test_data.list_data"])
    with pytest.raises(ConfigError, match=r"of 2 rows each: pair 0 holds a list and a list$"):
        build(lists, 2)
    scalars = compose_cfg(["steps=3", "data._target_=tests.unit.test_data.scalar_targets"])
    with pytest.raises(ConfigError, match=r"pair 0 holds a 2-d numpy array and a float64$"):
        build(scalars, 2)
