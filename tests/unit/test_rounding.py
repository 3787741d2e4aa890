"""The rounding floor (sweep.analysis.rounding): its analytic figure per dtype and size, the
dtypes each copy computes in, the floor measured from passing peers (the smallest, with its
margin), and what it changes: a sharded job's step 0 is real beyond it, a passing job within
it differs by rounding only."""

import math

import pytest

from sweep.analysis import rounding
from sweep.analysis.evidence import drift_class, real_onset, rounding_only
from sweep.records import JobRecord


def _config(split="sharded", param=None, precision="float32", batch=4, out=24, world=2):
    return {"data": {"split": split}, "mp_policy": {"param_dtype": param, "reduce_dtype": None, "output_dtype": None},
            "baseline": {"precision": precision}, "train": {"batch_size": batch}, "world_size": world,
            "mesh": {"mesh_shape": [world]}, "framework": {"name": "torch"},
            "model": {"name": "mlp", "out_size": out, "init_dtype": "float32"}}


def _row(job, status, ref0, got0, **config):
    record = JobRecord(status=status, config=_config(**config), world_size=config.get("world", 2),
                       losses={"standalone": [ref0, 1.0], "distributed": [got0, 1.0]},
                       comparison={"passed": status == "ok"})
    return {"job": job, "status": status, "result": record}


@pytest.mark.parametrize("name, expected", [
    (None, "float32"), ("bf16", "bfloat16"), ("torch.bfloat16", "bfloat16"), ("mindspore.float16", "float16"),
    ("float32", "float32"), ("fp16", "float16"), ("int8", "float32"),
])
def test_dtype_names_from_config_and_frameworks(name, expected):
    assert rounding.dtype_name(name) == expected


def test_the_analytic_floor_is_two_unit_roundoffs_per_level_of_the_pairwise_sum():
    # 96 terms over 1 rank: ceil(log2 96) = 7 levels; float32's u = 2^-24
    assert rounding.analytic_floor("float32", 96) == pytest.approx(2 * 7 * 2.0 ** -24)
    # bf16's u = 2^-8 is 2^16 times float32's: the same sum's floor is that much larger
    assert rounding.analytic_floor("bf16", 96) / rounding.analytic_floor("float32", 96) == pytest.approx(2.0 ** 16)
    assert rounding.analytic_floor("float32", 1) == pytest.approx(2 * 2.0 ** -24)
    assert rounding.analytic_floor("float32", 12288, world=2) == pytest.approx(2 * math.ceil(math.log2(24576))
                                                                               * 2.0 ** -24)


def test_each_copy_computes_in_its_own_dtype():
    assert rounding.compute_dtypes(_config()) == ("float32", "float32")
    assert rounding.compute_dtypes(_config(param="bfloat16")) == ("float32", "bfloat16")
    assert rounding.compute_dtypes(_config(param="bfloat16", precision="policy")) == ("bfloat16", "bfloat16")
    assert rounding.loss_terms(_config(batch=4, out=24), world=2) == 4 * 2 * 24  # sharded: every rank's rows
    assert rounding.loss_terms(_config(split="replicated", batch=4, out=24), world=2) == 4 * 24


def test_the_floor_is_measured_from_the_smallest_passing_peer_and_names_where_it_came_from():
    big = 1e-5  # a passing peer carrying a fault below tolerance: not the floor
    rows = [_row(0, "fail", 1.0, 1.0 + 9.7e-5), _row(1, "ok", 1.0, 1.0 + 2.4e-7), _row(2, "ok", 1.0, 1.0 + big),
            _row(3, "ok", 1.0, 1.0 + 1e-3, split="replicated")]  # another split: no peer
    floor = rounding.rounding_floor(rows[0], rows)
    assert floor["peers"] == [1, 2]
    assert floor["measured"] == pytest.approx(rounding.MEASURED_MARGIN * 2.4e-7, rel=1e-3)
    assert floor["rel"] == max(floor["analytic"], floor["measured"]) and floor["dtype"] == "float32"
    assert "analytic" in floor["from"] and "passing jobs 1, 2" in floor["from"]
    # bf16 under a float32 standalone copy: its rounding is bf16's, its step 0 is judged at float32's
    bf16 = rounding.rounding_floor(_row(4, "ok", 1.0, 1.0, param="bfloat16"), [])
    assert bf16["dtype"] == "bfloat16" and bf16["rel"] > 1000 * bf16["step0_rel"]
    assert bf16["measured"] is None and bf16["from"].startswith("analytic")


def test_a_small_step0_gap_beyond_the_floor_is_real_on_sharded_data():
    ref, got = [1.0, 1.0, 1.0], [1.0 + 9.7e-5, 1.0 + 2e-4, 1.0 + 3e-4]  # under the fixed 1e-4 at step 0
    fixed = real_onset(0, {}, ref, got, sharded=True)
    floored = real_onset(0, {}, ref, got, sharded=True, step0_floor=2e-6)
    assert fixed["first_real_step"] == 1 and floored["first_real_step"] == 0
    within = real_onset(0, {}, ref, [1.0 + 1e-6, 1.0 + 2e-4, 1.0], sharded=True, step0_floor=2e-6)
    assert within["first_real_step"] == 1  # within the floor at step 0: rounding there


def test_a_passing_job_within_its_floor_differs_by_rounding_only_unless_a_tensor_is_beyond_its_dtypes_rounding():
    row = {"status": "ok", "first_diff_step": 0, "first_real_step": 1, "onset": "abrupt", "max_rel_diff": 1e-7,
           "first_tensor_rel": 5e-5, "rounding_floor": {"rel": 8e-7}}
    assert rounding.within_floor(row) and rounding_only(row) and drift_class(row) == "rounding"
    beyond = dict(row, max_rel_diff=1e-5)
    assert not rounding.within_floor(beyond) and drift_class(beyond) == "first_update"
    failing = dict(row, status="fail")
    assert not rounding.within_floor(failing)
    # a gradient scaled by 2 that Adam normalises away: losses within the floor, the gradient far beyond
    scaled = dict(row, first_tensor_rel=0.5)
    assert rounding.tensor_floor(scaled) == 1e-4
    assert not rounding.within_floor(scaled) and drift_class(scaled) == "first_update"
    # bf16: the loss floor (0.1) is the tensors' rounding too
    bf16 = dict(row, first_tensor_rel=0.02, rounding_floor={"rel": 0.1})
    assert rounding.tensor_floor(bf16) == 0.1 and rounding.within_floor(bf16)
    assert not rounding.within_floor(dict(bf16, first_tensor_rel=0.5))


def test_peers_that_share_the_fault_do_not_lift_the_floor_past_its_cap():
    """A tester's fault on every dp4 job (the output x1.1 on 4 ranks): the only dp4 peer is
    faulty too, so the measured floor would be 4x the fault's own gap and call it rounding;
    capped at MEASURED_CAP x the analytic bound, the gap stays beyond it (issue 41)."""
    gap = 1.94e-5
    rows = [_row(0, "ok", 1.0, 1.0 + gap, world=4), _row(1, "ok", 1.0, 1.0 + gap, world=4)]
    floor = rounding.rounding_floor(rows[0], rows)
    assert floor["measured"] == pytest.approx(rounding.MEASURED_MARGIN * gap, rel=1e-3)
    assert floor["step0_rel"] == pytest.approx(rounding.MEASURED_CAP * floor["analytic"])
    assert floor["step0_rel"] < gap


def _traced_row(job, status, updates_rel, **config):
    """A passing-or-failing row whose record traced its update errors (``updates.rel``)."""
    row = _row(job, status, 1.0, 1.0 + 1e-8, **config)
    row["result"].first_tensor = {"updates": {"rel": list(updates_rel), "along": [0.0] * len(updates_rel)}}
    return row


def test_update_errors_are_measured_on_the_passing_peers_and_a_fault_beyond_them_is_no_rounding():
    """A warmup 1.3x too large in one copy for two steps, below tolerance (a fault of this
    session's, not a tester's): its update errors reach 0.3 where the correct peers' stay at
    2e-6; bf16 peers reach 0.05 by rounding. Random sign alone no longer reads as rounding
    grown beyond the peers' measured size (issue 38 item 1, issue 41 item 1)."""
    correct = _traced_row(1, "ok", [2e-6, 1e-6, 5e-7])
    other = _traced_row(2, "ok", [3e-6, 2e-6])
    faulty = _traced_row(3, "ok", [0.3, 0.3, 2e-5, -1e-4])
    untraced = _row(4, "ok", 1.0, 1.0)
    rows = [correct, other, faulty, untraced]
    assert rounding.update_rel(faulty["result"]) == 0.3 and rounding.update_rel(untraced["result"]) is None
    floor, peers = rounding.measured_update_floor(faulty, rows)
    assert floor == pytest.approx(rounding.MEASURED_MARGIN * 2e-6) and peers == [1, 2]  # the smallest peer's
    whole = rounding.rounding_floor(faulty, rows)
    assert whole["update_rel"] == pytest.approx(max(rounding.ROUNDING_REL, whole["rel"]))  # never below 1e-4
    assert whole["update_peers"] == [1, 2]
    assert rounding.rounding_floor(untraced, [untraced])["update_rel"] is None  # no traced peer: not measured
    # within_floor: losses and first tensor within, the updates beyond the peers': not rounding
    row = {"status": "ok", "first_diff_step": 0, "max_rel_diff": 1e-8, "first_tensor_rel": None,
           "rounding_floor": whole, "result": faulty["result"]}
    assert not rounding.within_floor(row)
    assert rounding.within_floor(dict(row, result=correct["result"]))
    # bf16: correct peers grow to 0.05, the fault's 0.3 stays beyond 4x the smallest
    bf16 = [_traced_row(1, "ok", [0.05, 0.06], param="bf16"), _traced_row(2, "ok", [0.04], param="bf16"),
            _traced_row(3, "ok", [0.3, 0.3], param="bf16")]
    assert rounding.rounding_floor(bf16[2], bf16)["update_rel"] < 0.3
    assert rounding.rounding_floor(bf16[0], bf16)["update_rel"] >= 0.06
    # the optimizer takes the errors: an sgd peer (0.011) measures no adam job (0.075, bf16 sharded)
    adam, sgd = _traced_row(1, "ok", [0.075], param="bf16"), _traced_row(2, "ok", [0.011], param="bf16")
    adam["result"].config["optimizer"], sgd["result"].config["optimizer"] = {"name": "adam"}, {"name": "sgd"}
    assert rounding.measured_update_floor(adam, [adam, sgd]) == (None, [])
    assert rounding.measured_floor(adam, [adam, sgd])[1] == [2]  # its losses' step 0: the same reorderings


def test_a_passing_jobs_random_sign_update_errors_beyond_the_peers_are_real():
    """real_onset: the passing job's random-sign updates read as rounding grown without a
    measured update floor, and as the fault's from their first step beyond it."""
    updates = {"rel": [0.3, 0.3, 4e-3, 1e-2, 8e-2], "along": [0.3, 0.3, -2e-5, -3e-4, 1e-5], "pattern": "abrupt",
               "real_step": 0, "period": None, "events": [0], "first_step": 0}
    tensor = {"step": 0, "kind": "grad", "rel_diff": 8e-8,
              "beyond_rounding": {"step": 0, "kind": "weight", "rel_diff": 0.3}, "updates": updates}
    ref, got = [1.0] * 6, [1.0, 1.0 + 1e-6, 1.0 - 2e-6, 1.0 + 3e-6, 1.0, 1.0]
    old = real_onset(0, tensor, ref, got, within_tolerance=True, sharded=True)
    assert old["first_real_step"] is None and old.get("rounding_grown")
    found = real_onset(0, tensor, ref, got, within_tolerance=True, sharded=True, update_floor=8e-6)
    assert found["first_real_step"] == 1 and not found.get("rounding_grown") and found["onset"] == "abrupt"
    # the same errors within a measured floor (bf16 peers that grow as far): rounding grown
    assert real_onset(0, tensor, ref, got, within_tolerance=True, sharded=True, update_floor=0.4)["first_real_step"] \
        is None


def test_a_job_that_ran_another_precision_than_configured_is_never_rounding():
    """An RMSNorm override the engine never applied, under bf16 with baseline.precision=policy:
    its difference sits inside bf16's wide floor, yet its cause is known (the note), so it is
    not rounding; the headline says that a job ran another precision even when all pass."""
    from types import SimpleNamespace

    from sweep.analysis.attribution import headline

    note = "mp_policy.overrides.RMSNorm was not applied to layers.0.attn_norm: its forward's parameters ran bfloat16"
    row = {"job": 1, "status": "ok", "overrides": {"engine": "ignores"}, "first_diff_step": 0, "first_real_step": 0,
           "max_rel_diff": 1e-3, "first_tensor_rel": None, "rounding_floor": {"rel": 0.04},
           "result": SimpleNamespace(notes=[note], first_tensor=None), "policy_applied": None}
    assert rounding.policy_departed(row) and not rounding.within_floor(row) and not rounding_only(row)
    clean = dict(row, job=0, overrides={"engine": "applies"}, result=SimpleNamespace(notes=[], first_tensor=None))
    assert not rounding.policy_departed(clean) and rounding.within_floor(clean) and rounding_only(clean)
    assert rounding.policy_departed(dict(clean, policy_applied=False))
    equal = [dict(r, first_diff_step=None, max_rel_diff=0.0) for r in (clean, row)]
    assert headline(equal, []).endswith("1 job ran another precision than configured (job 1): see the notes.")


def test_a_step0_loss_gap_counts_when_every_traced_tensor_is_within_rounding():
    """A tester's loss scaled by 1 + 2e-5 in one copy: every gradient within 1e-4, so the
    trace finds nothing beyond rounding; the step-0 loss (equal weights) still differs, on
    replicated data at all, on sharded data beyond the step-0 floor: step 0 is real."""
    tensor = {"step": 0, "kind": "grad", "rel_diff": 2e-5, "beyond_rounding": None}
    ref, got = [1.0, 0.9, 0.8], [1.0 + 2e-5, 0.9 + 2e-5, 0.8 + 2e-5]
    assert real_onset(0, tensor, ref, got, within_tolerance=True)["first_real_step"] == 0
    assert real_onset(0, tensor, ref, got, within_tolerance=True, sharded=True, step0_floor=1e-6)[
        "first_real_step"] == 0
    rounded = [1.0 + 5e-7, 0.9, 0.8]  # sharded, within the step-0 floor: rounding
    assert real_onset(0, tensor, ref, rounded, within_tolerance=True, sharded=True, step0_floor=1e-6)[
        "first_real_step"] is None


def test_the_update_floor_is_capped_and_an_equal_peer_measures_zero():
    """The only traced peer may carry a fault of its own (a tester's update floor of 4.0):
    capped at MEASURED_CAP x the tensor floor. A peer equal to standalone at every step grew
    no rounding: it measures 0."""
    faulty_peer = _traced_row(1, "ok", [1.0])
    job = _traced_row(2, "ok", [0.2])
    floor = rounding.rounding_floor(job, [faulty_peer, job])
    assert floor["update_rel"] == pytest.approx(rounding.MEASURED_CAP * max(rounding.ROUNDING_REL, floor["rel"]))
    equal = dict(_row(3, "ok", 1.0, 1.0), max_abs_diff=0.0)
    assert rounding.measured_update_floor(job, [equal, job]) == (0.0, [3])
    row = {"status": "ok", "first_diff_step": 0, "max_rel_diff": 1e-8, "first_tensor_rel": None,
           "rounding_floor": floor, "result": _traced_row(4, "ok", [1e-6])["result"]}
    assert rounding.within_floor(row)
    # errors below rounding's size that keep one sign: the losses agree to rounding, so no cause
    # is taken from the tensors alone (issue 41 item 3); the row's text says so (summary.collect)
    row["result"].first_tensor["updates"]["systematic"] = True
    assert rounding.within_floor(row)
