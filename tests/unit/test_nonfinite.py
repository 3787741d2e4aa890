"""A NaN or an infinity in one copy only is a difference beyond any envelope, everywhere the
copies are compared: the pair statistics (sweep.analysis.pairs), the first differing tensor
(sweep.analysis.trace), the modules (sweep.analysis.modules) and the sentences that word them.
A new user's MindSpore fault that turned the reduced gradients into NaN at step 3 read "no tensor
differs in steps 0-19 ... that launch did not repeat the difference"."""

from __future__ import annotations

import numpy as np

from sweep.analysis.modules import relative_difference
from sweep.analysis.pairs import pair_stats
from sweep.analysis.trace import Search, locate
from sweep.findings.base import Context
from sweep.findings import job_envelope
from sweep.findings.places import tensor_text
from sweep.records import JobRecord, note
from sweep.report.findings import sentence
from sweep.report.notes import text_of

NAN = np.nan


def test_a_nan_in_one_copy_is_an_infinite_difference_and_its_shard_is_named():
    a = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    b = np.array([[1.0, 2.0], [3.0, NAN]], np.float32)
    row = pair_stats(a, b, "grad", shards=2)
    assert row["abs"] == row["diff_norm"] == np.inf and row["chunks"] == [0.0, np.inf]
    assert row["scale"] is None  # no factor is read from a NaN


def test_the_same_non_finite_values_in_both_copies_are_no_difference():
    a = np.array([1.0, NAN, np.inf, 4.0], np.float32)
    b = np.array([1.0, NAN, np.inf, 4.5], np.float32)
    assert pair_stats(a, b, "weight")["abs"] == 0.5
    assert pair_stats(a, np.array([1.0, NAN, -np.inf, 4.0], np.float32), "weight")["abs"] == np.inf
    # gradients non-finite in both copies, anywhere (an fp16 overflow both copies' scalers skip: inf on one side, NaN
    # after the reduction's mean on the other): no difference either update sees (a new user's correct run read
    # "non-finite in one copy where the other is not")
    assert pair_stats(a, np.array([1.0, np.inf, NAN, 4.0], np.float32), "grad")["abs"] == 0.0
    assert pair_stats(a, np.array([1.0, 2.0, 3.0, 4.0], np.float32), "grad")["abs"] == np.inf  # one copy only
    assert relative_difference(np.array([[1.0, np.inf]]), np.array([[NAN, 1.0]]), 0, False, gradient=True) == (0.0, 0.0)


def _steps(nan_at):
    w = {"l.w": np.ones((2, 2), np.float32)}
    out = []
    for t in range(3):
        g = {"l.w": np.full((2, 2), 0.5, np.float32)}
        if t == nan_at:
            g = {"l.w": np.array([[0.5, NAN], [0.5, 0.5]], np.float32)}
        out.append({"grad": g, "weight": dict(w), "order": {"grad": ["l.w"]}})
    return out


def test_the_first_differing_tensor_is_the_gradient_that_turned_nan_and_says_so():
    found = locate(_steps(None), _steps(1), 2, Search())
    assert (found["step"], found["kind"], found["name"], found.get("nonfinite")) == (1, "grad", "l.w", True)
    assert tensor_text(found).startswith("l.w grad at step 1, non-finite (NaN or infinite) in one copy where the "
                                         "other is not; weights identical before")


def test_a_module_output_nan_in_one_copy_differs_and_nan_in_both_does_not():
    a = np.array([[1.0, 2.0]])
    assert relative_difference(a, np.array([[1.0, NAN]]), 0, False) == (np.inf, np.inf)
    assert relative_difference(np.array([[1.0, NAN]]), np.array([[1.0, NAN]]), 0, False) == (0.0, 0.0)


def test_a_nan_gradient_norm_gives_no_ratio_and_a_zero_standalone_norm_still_does():
    nan_norm = note("N144", step=3, stage="reduced", equal="before it", distributed=NAN, standalone=1.1,
                    ratio=NAN, parameter="w", max_norm=None, loss_step=4, loss_word="differ")
    assert "distributed nan, standalone 1.1 (most in w)" in text_of(nan_norm)
    zero = note("N144", step=0, stage="reduced", equal=None, distributed=1.0, standalone=0.0, ratio=float("inf"),
                parameter="w", max_norm=None, loss_step=None, loss_word="differ")
    assert "(xinf; most in w)" in text_of(zero)


def test_a_loss_non_finite_in_one_copy_reads_so_in_the_jobs_envelope_not_as_infx():
    loss = {"within": False, "first_beyond_step": 4, "ratio": float("inf"), "beyond_steps": 16, "sign": None}
    record = JobRecord(status="fail", comparison={"rtol": 1e-4, "atol": 1e-4},
                       envelope={"measured": True, "dtype": "float32", "source": "twin", "margin": 4.0, "loss": loss})
    row = {"job": 0, "first_diff_step": 4, "result": record}
    (found,) = job_envelope.check(Context([row]))
    assert sentence(found) == ("rounding envelope (float32: its twin, trained with this job): the losses leave 4x it "
                               "from step 4 (16 steps, a loss non-finite in one copy)")

