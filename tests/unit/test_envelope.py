"""The rounding envelope (sweep.analysis.envelope, sweep.analysis.rounding): units in the last
place, the resolution of a sequence, the envelope the twin measures, the judgement of the
losses against it, the sign rule, the nudge, and what the verdict's rules read from it
(rounding only, a tolerance finer than the precision, the first real step, the traced
tensors' and modules' envelopes)."""

import math

import numpy as np
import pytest

from sweep.analysis import envelope, rounding
from sweep.analysis.evidence import drift_class, real_onset, rounding_only, tolerance_only
from sweep.records import JobRecord
from sweep.findings.places import module_text, tensor_text


# --- numerics -----------------------------------------------------------------------------------

def test_one_unit_in_the_last_place_per_format():
    assert envelope.ulp(1.0, "float32") == 2.0 ** -23
    assert envelope.ulp(4.2, "bfloat16") == 1 / 32  # the "a bf16 loss near 4.2 moves in steps of 1/32"
    assert envelope.ulp(-3.0, "float16") == 2.0 ** -9
    assert envelope.ulp(0.0, "float32") == 2.0 ** (-126 - 23)  # zero: the smallest normal's unit
    assert math.isnan(float(envelope.ulp(float("nan"), "float32")))


def test_a_sequence_reads_as_the_coarsest_format_that_holds_it_exactly():
    bf16 = [float(np.float32(v)) for v in (4.15625, 4.125, 3.96875)]  # bf16 numbers with detail
    assert envelope.value_dtype(bf16) == "bfloat16"
    f32 = [float(np.float32(v)) for v in (1.0770171880722046, 0.9557399749755859)]
    assert envelope.value_dtype(f32) == "float32"
    assert envelope.value_dtype([0.5, 4.0, 1.0]) == "float32"  # round numbers: no evidence of a low precision
    assert envelope.value_dtype([0.1]) == "float64"
    res = envelope.resolution([bf16, f32 + [1.0]])
    assert res.tolist() == [1 / 32, 1 / 32, 1 / 64]  # the coarser sequence's spacing at each step


def test_the_envelope_is_the_largest_twin_gap_so_far_never_below_the_resolution():
    standalone = [1.0, 0.9, 0.8, 0.7]
    twin = [1.0 + 1e-6, 0.9 - 3e-6, 0.8 + 1e-6, 0.7]
    got = envelope.loss_envelope(standalone, twin, floor=[2e-6] * 4)
    assert got == pytest.approx([2e-6, 3e-6, 3e-6, 3e-6])
    diverged = envelope.loss_envelope([1.0, 1.0], [1.0, float("nan")])
    assert diverged[0] == 0.0 and math.isinf(diverged[1])
    with pytest.raises(ValueError):
        envelope.loss_envelope([1.0], [1.0, 2.0])


def test_losses_are_judged_against_margin_times_the_envelope():
    standalone = [1.0] * 6
    env = [1e-6] * 6
    within = envelope.judge_losses(standalone, [1.0 + 3e-6, 1.0 - 3.9e-6, 1.0, 1.0, 1.0, 1.0], env, margin=4.0)
    assert within["within"] and within["first_beyond_step"] is None and within["sign"] is None
    assert within["ratio"] == pytest.approx(3.9)
    assert within["band"] == pytest.approx(4e-6 / 2)  # margin x E / (1 + |standalone|): rtol = atol that holds
    beyond = envelope.judge_losses(standalone, [1.0, 1.0 - 5e-6, 1.0 - 1e-5, 1.0 - 2e-5, 1.0 + 5e-6, 1.0], env)
    assert not beyond["within"] and beyond["first_beyond_step"] == 1 and beyond["beyond_steps"] == 4
    assert beyond["sign"] == "low" and beyond["sign_share"] == 0.75
    mixed = envelope.judge_losses(standalone, [1.0 + 1e-5, 1.0 - 1e-5] * 3, env)
    assert mixed["sign"] is None and mixed["sign_share"] == 0.5  # half the steps each way: no sign
    nonfinite = envelope.judge_losses([1.0, 1.0], [1.0, float("nan")], [1e-6, 1e-6])
    assert nonfinite["first_beyond_step"] == 1
    with pytest.raises(ValueError):
        envelope.judge_losses([1.0], [1.0], [1.0], margin=0.5)


def test_the_nudge_moves_each_weight_by_one_unit_in_the_last_place():
    w = np.array([1.0, -0.3, 0.0, 2.5], np.float32).astype(np.float64)
    signs = envelope.twin_signs(w.shape, np.random.default_rng(3))
    assert set(signs.tolist()) <= {-1.0, 1.0}
    moved = envelope.perturb(w, "float32", signs)
    assert moved.astype(np.float32).astype(np.float64).tolist() == moved.tolist()  # exact in float32
    units = np.where(w != 0, np.abs(moved - w) / envelope.ulp(w, "float32"), 0.0)
    assert units.tolist() == [1.0, 1.0, 0.0, 1.0]  # one unit of each (zero stays zero)
    bf16 = envelope.perturb(np.array([1.0]), "bfloat16", np.array([1.0]))
    assert bf16[0] == 1.0 + 2.0 ** -7


def test_the_tolerance_that_holds_is_rounded_up_to_one_digit():
    assert envelope.hold_text(0.0234) == "rtol = atol = 3e-02"
    assert envelope.hold_text(0.0099) == "rtol = atol = 1e-02"
    assert envelope.hold_text(None) == "" and envelope.hold_text(0.0) == ""


def test_measure_says_why_where_no_twin_ran():
    assert envelope.measure([1.0], [1.0], [[1.0]], None)["why"] == "no twin of the standalone copy trained"
    short = envelope.measure([1.0, 1.0], [1.0, 1.0], [[1.0, 1.0]], {"losses": [1.0]})
    assert not short["measured"] and "1 steps" in short["why"]
    found = envelope.measure([1.0, 0.9], [1.0, 0.9 + 1e-9], [[1.0, 0.9]], {"losses": [1.0, 0.9 + 1e-7],
                                                                           "dtype": "float32"})
    assert found["measured"] and found["dtype"] == "float32" and found["loss"]["within"]


# --- what the config says about the twin -------------------------------------------------------

def _config(param=None, reduce=None, init="float32", overrides=None):
    return {"mp_policy": {"param_dtype": param, "reduce_dtype": reduce, "output_dtype": None,
                          "overrides": overrides or {}}, "model": {"init_dtype": init}}


@pytest.mark.parametrize("name, expected", [
    (None, "float32"), ("bf16", "bfloat16"), ("torch.bfloat16", "bfloat16"), ("mindspore.float16", "float16"),
    ("float32", "float32"), ("fp16", "float16"), ("int8", "float32"),
])
def test_dtype_names_from_config_and_frameworks(name, expected):
    assert rounding.dtype_name(name) == expected


def test_the_twin_is_nudged_in_the_lowest_precision_either_copy_computes_in():
    assert rounding.twin_dtype(_config()) == "float32" and not rounding.policy_lowers(_config())
    assert rounding.twin_dtype(_config(param="bfloat16")) == "bfloat16"
    assert rounding.twin_dtype(_config(reduce="float16")) == "float16"  # a reduction in fp16 rounds at fp16
    assert rounding.twin_dtype(_config(init="bfloat16")) == "bfloat16"  # a model created in bf16
    assert rounding.twin_dtype(_config(param="float32", overrides={"layer1": {"param_dtype": "bfloat16"}})) \
        == "bfloat16"
    assert rounding.policy_lowers(_config(param="bfloat16"))


def test_against_a_policy_baseline_the_twin_is_nudged_where_the_copies_part_the_reduction():
    def policy(**kw):
        return dict(_config(**kw), baseline={"precision": "policy"}, data={"split": "replicated"})

    assert rounding.twin_dtype(policy(param="bfloat16", reduce="float32")) == "float32"  # both copies cast alike
    assert rounding.twin_dtype(policy(param="bfloat16")) == "bfloat16"  # fully_shard reduces in param_dtype
    assert rounding.twin_dtype(policy(init="bfloat16")) == "bfloat16"
    assert rounding.twin_dtype(policy(param="bfloat16", reduce="float32",
                                      overrides={"head": {"param_dtype": "bfloat16", "reduce_dtype": "float16"}})) \
        == "float16"
    assert rounding.twin_dtype(dict(policy(param="bfloat16", reduce="float32"), baseline={"precision": "float32"})) \
        == "bfloat16"
    # on sharded data each rank computes its own rows' gradients in bf16: they part in bf16 too
    assert rounding.twin_dtype(dict(policy(param="bfloat16", reduce="float32"), data={"split": "sharded"})) \
        == "bfloat16"


# --- the rules that read it ---------------------------------------------------------------------

def _record(status="ok", within=True, first_beyond=None, sign=None, other=(), dtype="bfloat16", measured=True,
            notes=()):
    found = {"measured": measured, "dtype": dtype, "margin": 4.0, "source": "twin",
             "loss": {"within": within, "first_beyond_step": first_beyond, "ratio": 1.5 if within else 12.0,
                      "band": 0.02, "sign": sign, "beyond_steps": 0 if within else 3},
             "other_failures": list(other)} if measured else {"measured": False, "why": "compare.envelope=false"}
    return JobRecord(status=status, envelope=found, notes=list(notes),
                     comparison={"passed": status == "ok", "rtol": 1e-4, "atol": 1e-4})


def _row(status="ok", first_diff=0, first_real=None, **record):
    return {"job": 0, "status": status, "first_diff_step": first_diff, "first_real_step": first_real,
            "onset": "abrupt", "result": _record(status, **record)}


def test_rounding_only_means_within_a_measured_envelope_passing_or_not():
    assert rounding_only(_row()) and drift_class(_row()) == "rounding"
    failing = _row("fail")
    assert rounding_only(failing) and tolerance_only(failing)  # the tolerance is finer than the precision
    assert not tolerance_only(_row("fail", other=["replicas disagree"]))  # something else fails: a fault
    assert not rounding_only(_row(first_real=3)) and drift_class(_row(first_real=3)) == "from_step"
    assert not rounding_only(_row(measured=False))  # not measured: nothing is called rounding
    departed = _row(notes=["mp_policy.overrides.RMSNorm was not applied to layers.0.norm"])
    assert not rounding_only(departed)


def test_signs_come_only_from_steps_beyond_the_envelope():
    assert rounding.drift_sign(_row(first_real=2, within=False, first_beyond=2, sign="low")) == "low"
    assert rounding.drift_sign(_row()) is None  # within its envelope: no sign worth saying
    unmeasured = dict(_row(measured=False), runs_low_pct=90.0)
    assert rounding.drift_sign(unmeasured) == "low"
    assert rounding.drift_sign(dict(unmeasured, runs_low_pct=55.0)) is None  # about half each way: no sign


def test_the_first_real_step_is_the_first_difference_beyond_an_envelope():
    env = {"measured": True, "loss": {"first_beyond_step": None}}
    grad = {"step": 0, "kind": "grad", "rel_diff": 1e-5, "bound": 4e-7}  # beyond its own envelope
    assert real_onset(0, grad, env)["first_real_step"] == 1
    within = dict(grad, bound=1e-4, beyond_rounding=None)
    assert real_onset(0, within, env)["first_real_step"] is None  # every difference within its envelope
    losses = {"measured": True, "loss": {"first_beyond_step": 0}}  # a loss gap at step 0 beyond the envelope
    assert real_onset(0, within, losses)["first_real_step"] == 0
    assert real_onset(0, {"step": 0, "kind": "initial", "rel_diff": 1e-9}, env)["first_real_step"] == 0
    assert real_onset(5, {}, {"measured": False})["first_real_step"] == 5  # not measured: every difference
    updates = dict(within, updates={"pattern": "periodic", "period": 2, "real_step": 3, "until": None})
    found = real_onset(0, updates, env)
    assert found["first_real_step"] == 4 and found["onset"] == "periodic" and found["onset_from"] == "updates"


# --- the traced tensors' and modules' envelopes ---------------------------------------------------

def test_each_traced_tensor_is_judged_against_its_twins_difference():
    from sweep.analysis.trace import envelope_bounds, locate

    w = np.linspace(-1.0, 1.0, 8)
    g = np.linspace(0.5, 1.5, 8)
    standalone = [{"initial": {"w": w}, "grad": {"w": g}, "weight": {"w": w - 0.1 * g}}]
    twin = [{"initial": {"w": w * (1 + 1e-7)}, "grad": {"w": g * (1 + 1e-6)}, "weight": {"w": w - 0.1 * g}}]
    bounds = envelope_bounds(standalone, twin, 4.0, "float32")
    assert ("0", "initial") not in bounds and (0, "initial", "w") not in bounds  # the copies must start equal
    assert bounds[(0, "grad", "w")] == pytest.approx(4.0 * 1e-6 * 1.5 / 1.5, rel=1e-6)
    rounded = [{"initial": {"w": w}, "grad": {"w": g * (1 + 2e-6)}, "weight": {"w": w - 0.1 * g}}]
    found = locate(standalone, rounded, 0, twin=twin)
    assert found["name"] == "w" and found["beyond_rounding"] is None
    assert "every traced tensor within its rounding envelope" in tensor_text(found)
    assert "but not their update differences" not in tensor_text(found)
    # each tensor within its own, their updates' sum beyond its envelope: both said, no contradiction
    summed = dict(found, updates={"pattern": "abrupt", "real_step": 0})
    assert tensor_text(summed).endswith("every traced tensor within its rounding envelope in steps 0-0, but not their "
                                        "update differences summed over every parameter, beyond float rounding from "
                                        "update 0"), tensor_text(summed)
    faulty = [{"initial": {"w": w}, "grad": {"w": g * (1 + 1e-4)}, "weight": {"w": w - 0.1 * g}}]
    beyond = locate(standalone, faulty, 0, twin=twin)
    assert "beyond_rounding" not in beyond and "(100x its rounding envelope)" in tensor_text(beyond)
    unmeasured = locate(standalone, rounded, 0)
    assert unmeasured["envelope"] == "not measured" and "rounding" not in tensor_text(unmeasured)


def test_update_errors_are_real_only_beyond_the_twins():
    from sweep.analysis.trace import update_onset

    series = {"rel": [1e-6, 2e-6, 0.3, 0.2, 1e-6], "along": [1e-6, -2e-6, 0.3, 0.2, 1e-6]}
    twin = [1e-6, 1e-6, 1e-6, 1e-6, 1e-6]
    found = update_onset(series, twin, margin=4.0)
    assert found["real_step"] == 2 and found["envelope"][0] == pytest.approx(4e-6)
    assert update_onset(series, [0.5] * 5)["pattern"] == "none"  # the twin's own errors as large: rounding
    assert update_onset(series)["real_step"] == 0  # no twin: every differing update is real


def test_modules_are_judged_against_the_twins_difference_not_their_own_size():
    from sweep.analysis.modules import compare_modules

    def step(scale_out):
        out = np.array([[1e-3, 2e-3]]) * scale_out
        return {"forward": [{"module": "layer0", "call": 0, "input": {"sample": [[1.0, 2.0]]},
                             "output": {"sample": out.tolist(), "dtype": "float32"}}], "backward": []}

    standalone = [step(1.0)]
    twin = [step(1.0 + 1e-6)]
    within = compare_modules(standalone, [step(1.0 + 3e-6)], twin=twin)
    assert within["first"] is None and "within their rounding envelope" in module_text(within)
    beyond = compare_modules(standalone, [step(1.0 + 3e-4)], twin=twin)
    assert beyond["first"]["module"] == "layer0" and "x its rounding envelope" in module_text(beyond["first"])
    exact = compare_modules(standalone, [step(1.0 + 3e-6)])  # no twin: any difference counts
    assert exact["first"]["module"] == "layer0"
    # a module that outputs bfloat16 in the distributed copy alone (under an fp32 policy: a unit given
    # param_dtype=bfloat16 by hand, a new user's) is judged at float32's unit, not given bfloat16's room
    def bf16(step_):
        step_["forward"][0]["output"]["dtype"] = "bfloat16"
        return step_

    departed = compare_modules(standalone, [bf16(step(1.0 + 3e-3))], twin=twin)
    assert departed["first"]["module"] == "layer0", departed
    both = compare_modules([bf16(step(1.0))], [bf16(step(1.0 + 3e-3))], twin=[bf16(step(1.0 + 1e-6))])
    assert both["first"] is None  # the model's own bfloat16, in both copies: a unit of it is rounding


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_float32_weights_are_nudged_in_float32_to_the_same_numbers_as_in_float64(dtype):
    # the twin's nudge of float32 weights takes the float32 path (3.7x faster): it must give the
    # float64 computation's numbers exactly, at zeros, subnormals, powers of two (where the
    # downward neighbour is half a unit away in float32), the largest float32 and non-finite values
    rng = np.random.default_rng(3)
    edges = [0.0, -0.0, 2.0 ** -149, -2.0 ** -149, 2.0 ** -126, -2.0 ** -125, 1.0, -0.5, 2.0 ** 20, 6.1e-5,
             3.4028235e38, -3.4028235e38, np.inf, -np.inf, np.nan]
    x = np.concatenate([np.asarray(edges, np.float32), (rng.standard_normal(20000) * 0.02).astype(np.float32),
                        np.float32(2.0) ** np.arange(-140, 120, dtype=np.float32)])
    signs = envelope.twin_signs(x.shape, np.random.default_rng(4))
    fast = envelope.perturb(x, dtype, signs)
    with np.errstate(over="ignore", invalid="ignore"):
        slow = envelope.perturb(x.astype(np.float64), dtype, signs).astype(np.float32)
    assert fast.dtype == np.float32
    assert np.array_equal(fast, slow, equal_nan=True)
    moved = np.isfinite(x) & (x != 0)
    if dtype == "float32":  # every finite, non-zero float32 weight moves to a neighbour
        assert np.all(fast[moved] != x[moved])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
def test_a_nudge_drawn_in_one_pass_gives_the_same_numbers_from_the_same_draws(dtype):
    """``nudged`` (the twin's nudge: no array of signs for float32 weights) against ``perturb``
    with ``twin_signs``: the same values, edges included, and the generator left in the same state."""
    rng = np.random.default_rng(5)
    edges = [0.0, -0.0, 2.0 ** -149, -2.0 ** -149, 2.0 ** -126, 1.0, -0.5, 3.4028235e38, np.inf, -np.inf, np.nan]
    x = np.concatenate([np.asarray(edges, np.float32), (rng.standard_normal(5000) * 0.02).astype(np.float32)])
    one, two = np.random.default_rng(6), np.random.default_rng(6)
    with np.errstate(over="ignore", invalid="ignore"):
        fast = envelope.nudged(x, dtype, one)
        slow = envelope.perturb(x, dtype, envelope.twin_signs(x.shape, two))
    assert fast.dtype == slow.dtype and np.array_equal(fast, slow, equal_nan=True)
    assert np.array_equal(np.signbit(fast), np.signbit(slow))
    assert one.random() == two.random()


def test_a_twin_whose_rank_computes_the_first_loss_otherwise_is_not_the_standalone_copys():
    from sweep.analysis.envelope import twin_unlike

    same, other = (1.1844211816787720).hex(), (1.1845099925994873).hex()
    assert twin_unlike({0: same, 1: same}, 1) is None
    assert twin_unlike({0: same, 1: None}, 1) is None  # (compile, a policy baseline: not probed)
    assert twin_unlike({0: same, 1: other}, None) is None and twin_unlike({0: same}, 0) is None
    why = twin_unlike({0: same, 1: other, 2: same}, 1)
    assert why.startswith("the twin trained on rank 1, where the standalone model's first loss is 1.18450999 against "
                          "rank 0's 1.18442118"), why
    assert twin_unlike({0: same, 1: other, 3: same}, 3) is None  # the twin's own rank computes it alike
