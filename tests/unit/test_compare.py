import math

import numpy as np
import pytest

from sweep.analysis.compare import compare_losses, drift_metrics


def test_identical_sequences_pass_with_zero_difference():
    c = compare_losses([1.0, 0.5, 0.25], [1.0, 0.5, 0.25], rtol=1e-4, atol=1e-4)
    assert c.passed and c.n_fail == 0 and c.first_fail_step is None
    assert c.max_abs_diff == 0.0 and c.mean_signed_diff == 0.0 and c.n_steps == 3


def test_isclose_semantics_and_signed_difference():
    ref = [1.0, 1.0, 1.0, 1.0]
    # tolerance at |ref| = 1 is atol + rtol * 1 = 2e-4
    got = [1.0, 1.0 - 1.5e-4, 1.0 - 3e-4, 1.0 - 1e-3]
    c = compare_losses(ref, got, rtol=1e-4, atol=1e-4)
    assert not c.passed
    assert c.n_fail == 2 and c.first_fail_step == 2
    assert c.max_abs_diff == pytest.approx(1e-3)
    assert c.max_rel_diff == pytest.approx(1e-3)
    assert c.mean_signed_diff == pytest.approx(-(1.5e-4 + 3e-4 + 1e-3) / 4)
    assert c.mean_signed_diff < 0  # distributed runs low


def test_nan_in_both_at_same_step_is_equal_but_in_one_fails():
    same = compare_losses([1.0, math.nan, 2.0], [1.0, math.nan, 2.0], rtol=0, atol=0)
    assert same.passed and same.first_nonfinite_step == 1
    one = compare_losses([1.0, 1.0, 2.0], [1.0, math.nan, 2.0], rtol=1e-4, atol=1e-4)
    assert not one.passed and one.first_fail_step == 1 and one.first_nonfinite_step == 1
    assert one.max_abs_diff == 0.0  # differences are over finite steps only


def test_float32_inputs_are_compared_in_float64():
    ref = np.float32([0.1, 0.2])
    c = compare_losses(ref, ref.copy(), rtol=0, atol=0)
    assert c.passed


@pytest.mark.parametrize(
    "ref, got, rtol, atol",
    [([1.0], [1.0, 2.0], 1e-4, 1e-4), ([], [], 1e-4, 1e-4), ([1.0], [1.0], -1.0, 1e-4)],
)
def test_bad_arguments_raise(ref, got, rtol, atol):
    with pytest.raises(ValueError):
        compare_losses(ref, got, rtol=rtol, atol=atol)


def test_drift_metrics_describe_the_shape_of_the_difference():
    m = drift_metrics([1.0, 1.0, 1.0, 1.0], [1.1, 0.9, 0.8, 0.7])
    assert m["step0_diff"] == pytest.approx(0.1)  # differs before any update
    assert m["runs_low_pct"] == pytest.approx(75.0)  # 3 of 4 steps below the reference
    assert m["trend"] == pytest.approx(-0.13)  # least-squares slope of [0.1, -0.1, -0.2, -0.3]
    assert m["final_ratio"] == pytest.approx(0.7)


def test_drift_metrics_of_identical_runs_and_of_non_finite_steps():
    same = drift_metrics([2.0, 1.0, 0.5], [2.0, 1.0, 0.5])
    assert same == {"step0_diff": 0.0, "runs_low_pct": 0.0, "trend": pytest.approx(0.0), "final_ratio": 1.0}
    blown = drift_metrics([1.0, 1.0, 1.0], [0.5, math.nan, 0.0])
    assert blown["runs_low_pct"] == 100.0  # over the 2 finite steps
    assert blown["trend"] == pytest.approx(-0.25)  # fitted on steps 0 and 2 only: -0.5 -> -1.0
    assert blown["final_ratio"] == 0.0
    assert math.isnan(drift_metrics([1.0, 0.0], [1.0, 0.0])["final_ratio"])  # 0 / 0
    assert math.isnan(drift_metrics([1.0], [1.0])["trend"])  # one step has no slope


@pytest.mark.parametrize("ref, got", [([1.0], [1.0, 2.0]), ([], [])])
def test_drift_metrics_bad_arguments_raise(ref, got):
    with pytest.raises(ValueError):
        drift_metrics(ref, got)


def test_a_loss_that_sums_over_the_batch_on_sharded_data_is_noted_from_step_0():
    """A new user's loss with ``reduction='sum'`` on sharded data: each rank's loss is its shard's
    part, so the mean over the ranks at step 0 (equal weights) is 1/world_size the standalone
    loss; it was called "divided by world_size twice". A mean loss (ratio 1), a ratio near but
    not at 1/world_size, one rank or a zero loss: no note."""
    from sweep.analysis.compare import summed_loss_note
    from sweep.report.notes import text_of

    found = summed_loss_note([96.70468, 90.0], [48.352335, 47.0], 2, "my_losses.sum_mse")
    assert found.code == "N191" and text_of(found).startswith(
        "summed loss: the distributed loss at step 0, the copies' weights still equal, is x0.5 = 1/2 the standalone "
        "one: train.loss=my_losses.sum_mse sums over the batch")
    assert summed_loss_note([8.0], [2.0], 4, "s").values["shards"] == 4
    for standalone, distributed, shards in (([1.0], [1.0], 2), ([1.0], [0.49], 2), ([1.0], [0.5], 1), ([0.0], [0.0], 2),
                                            ([], [], 2), ([float("nan")], [0.5], 2)):
        assert summed_loss_note(standalone, distributed, shards, "mse") is None
