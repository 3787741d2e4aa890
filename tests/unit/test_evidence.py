"""What a job's evidence means (sweep.analysis.evidence, sweep.analysis.dtypes), on
constructed findings: the first step over the ranks, the real first step, the first tensor
and module over the ranks and their merge, the sentence of the first tensor, one record's
evidence, the drift class, and the dtypes against the policy."""

import pytest

from sweep.analysis.compare import compare_losses
from sweep.analysis.dtypes import dtype_evidence, implied_dtypes
from sweep.analysis.evidence import (
    drift_class,
    first_diff_over_ranks,
    first_module_over_ranks,
    first_tensor_order,
    first_tensor_over_ranks,
    job_evidence,
    parting_step,
    place,
    real_onset,
    rounding_only,
)
from sweep.findings.places import located_text, module_text, tensor_text
from sweep.records import JobRecord

# --- the first step -------------------------------------------------------------------------------


def test_the_first_differing_step_is_the_earliest_over_the_ranks():
    assert first_diff_over_ranks([{"first_diff_step": 5}, {"first_diff_step": 3}, {"first_diff_step": None}]) == 3
    assert first_diff_over_ranks([{"first_diff_step": 0}, {"first_diff_step": 4}]) == 0  # 0 is a step, not "none"
    assert first_diff_over_ranks([{"first_diff_step": None}, {}, None]) is None
    assert first_diff_over_ranks([]) is None


WITHIN = {"measured": True, "loss": {"first_beyond_step": None}}  # an envelope the losses stay within


def test_a_traced_gradient_beyond_its_envelope_parts_the_losses_at_the_next_step():
    grad = {"step": 0, "kind": "grad", "name": "w", "rel_diff": 0.5}  # no bound: beyond (or unmeasured)
    found = real_onset(2, grad, WITHIN)  # the losses within their envelope until then
    assert found == {"first_real_step": 1, "onset_from": "losses"}
    beyond = {"measured": True, "loss": {"first_beyond_step": 2}}
    assert real_onset(2, grad, beyond)["first_real_step"] == 1  # the gradient is earlier
    assert real_onset(None, grad, WITHIN) == {"first_real_step": None, "onset_from": None}


def test_the_update_differences_give_the_onset_unless_the_copies_part_at_step_0():
    periodic = {"step": 1, "kind": "weight", "rel_diff": 0.1,
                "updates": {"pattern": "periodic", "period": 2, "real_step": 1, "until": None}}
    found = real_onset(2, periodic, WITHIN)
    assert found == {"first_real_step": 2, "onset_from": "updates", "onset": "periodic", "period": 2,
                     "onset_until": None}
    initial = dict(periodic, kind="initial", step=0)  # the copies start apart: step 0, the losses' onset stays
    assert real_onset(2, initial, WITHIN) == {"first_real_step": 0, "onset_from": "losses"}


def test_without_a_measured_envelope_every_difference_is_real():
    assert real_onset(0, {}, {"measured": False, "why": "runner=command"})["first_real_step"] == 0
    assert real_onset(0, {}, None)["first_real_step"] == 0


# --- the place: the first tensor and module over the ranks ------------------------------------------


def _tensor(step, kind, rel, beyond="absent", **extra):
    found = {"step": step, "kind": kind, "name": "w", "abs_diff": rel, "rel_diff": rel, **extra}
    if beyond != "absent":
        found["beyond_rounding"] = beyond
    return found


def test_a_real_difference_on_one_rank_comes_before_another_ranks_rounding():
    rounding = _tensor(0, "grad", 1e-7, beyond=None)  # rank 0: summation order only
    real = _tensor(2, "weight", 1e-2)  # rank 1: a fault at step 2
    assert first_tensor_order(dict(real, rank=1)) < first_tensor_order(dict(rounding, rank=0))
    found = first_tensor_over_ranks([(rounding, 0), (real, 1)], first_diff=3)
    assert (found["rank"], found["ranks"], found["step"], found["kind"]) == (1, [1], 2, "weight")
    assert "rank" not in real  # the ranks' findings are left as they are


def test_ranks_naming_the_same_difference_are_all_named():
    grad, weight = _tensor(1, "grad", 0.1), _tensor(1, "weight", 0.1)
    found = first_tensor_over_ranks([(weight, 0), (grad, 1), (grad, 2)], first_diff=2)
    assert (found["kind"], found["rank"], found["ranks"]) == ("grad", 1, [1, 2])  # a gradient before the update
    # a rounding first difference is ranked by its first real one (beyond_rounding)
    late = _tensor(0, "grad", 1e-7, beyond={"step": 3, "kind": "weight", "rel_diff": 0.1})
    found = first_tensor_over_ranks([(late, 0), (_tensor(2, "weight", 0.1), 1)], first_diff=0)
    assert (found["rank"], found["step"]) == (1, 2)


def test_a_rerun_that_does_not_repeat_the_difference_says_so():
    equal = {"last_step": 3}
    found = first_tensor_over_ranks([(equal, 0), ({"last_step": 3}, 1)], first_diff=4)
    assert found["rank"] == 0 and found["not_repeated_from"] == 4 and "not_repeated_from" not in equal
    assert tensor_text(found) == (
        "no tensor differs in steps 0-3 in the tracing rerun, though this run's losses differ from step 4: that launch "
        "did not repeat the difference (nondeterministic? repeat=3 tells)")
    assert first_tensor_over_ranks([({"note": "not observed"}, 1)], first_diff=4) == {"note": "not observed", "rank": 1}
    assert first_tensor_over_ranks([], first_diff=4) is None


def test_the_first_module_is_the_earliest_over_the_ranks_or_says_why_none():
    assert first_module_over_ranks([]) is None
    quiet = {"first": None, "traced_steps": 4, "envelope_measured": True}
    none = first_module_over_ranks([(quiet, 0), ({"first": None, "traced_steps": 2}, 1)])
    assert none == {"traced_steps": 4, "envelope_measured": True}
    assert module_text(none) == ("every module's forward output and output gradient agree within their rounding "
                                 "envelope in the traced steps 0-3")
    assert module_text(first_module_over_ranks([({"first": None, "traced_steps": 0}, 0)])) == "no module trace recorded"
    first = {"step": 1, "phase": "forward", "module": "layer1", "rel_in": 0.0, "rel_out": 0.25}
    found = first_module_over_ranks([({"first": first}, 0), ({"first": first}, 1)])
    assert found["ranks"] == [0, 1] and module_text(found) == (
        "layer1 forward output at step 1, inputs agree, rel 0.25 (every rank)")
    # a rank whose trace holds that module in one copy only (compile=true once ran another copy's hooks there):
    # it neither names the module nor clears it, and the sentence says so instead of "(rank 0)" alone
    blind = {"first": None, "rows": [{"step": 1, "phase": "forward", "module": "layer1", "abs": None}]}
    found = first_module_over_ranks([({"first": first}, 0), (blind, 1)])
    assert found["uncompared"] == [1] and module_text(found) == (
        "layer1 forward output at step 1, inputs agree, rel 0.25 (rank 0; rank 1 recorded it in one copy only: not "
        "compared there)")


def test_a_module_that_computes_on_weights_that_already_differ_says_so():
    module = {"step": 3, "phase": "forward", "module": "layer1", "rel_in": 0.0, "rel_out": 0.5}
    found = place(module, {"step": 2, "kind": "weight"})
    assert module_text(found) == ("layer1 forward output at step 3, inputs agree, rel 0.5; the weights already differ "
                                  "after step 2's update (first differing tensor): the module computes on them")
    assert "computes_on" not in module  # a copy: the rank's finding is unchanged
    assert found["module"] == "layer1" and found["step"] == 3
    assert place(module, {"step": 3, "kind": "grad"}) is module  # the same step: the module is the place
    assert place(module, {"note": "not traced"}) is module


def test_a_window_where_every_module_agrees_places_the_parting_only_from_a_tensor_beyond_rounding_in_it():
    # a new user's late fault (step 50) was told "the copies part after the backward" from steps 0-3
    agree = {"traced_steps": 4, "envelope_measured": True}
    after = place(agree, {"step": 2, "kind": "grad"})
    assert module_text(after) == ("every module's forward output and output gradient agree within their rounding "
                                  "envelope in the traced steps 0-3: the copies part after the backward (in the "
                                  "reduction, clipping or the optimizer step)")
    assert place(agree, {"step": 0, "kind": "grad", "beyond_rounding": None}) is agree  # all within rounding
    assert place(agree, {"step": 0, "kind": "grad", "beyond_rounding": {"step": 50, "kind": "grad"}}) is agree
    assert place(agree, {"step": 0, "kind": "initial"}) is agree


def test_a_module_is_held_against_the_first_real_tensor_not_one_within_rounding():
    module = {"step": 50, "phase": "backward", "module": "(model)", "gradient_of": "layer1", "rel_out": 0.5}
    assert place(module, {"step": 0, "kind": "grad", "beyond_rounding": {"step": 50, "kind": "grad"}}) is module
    assert place(module, {"step": 0, "kind": "grad", "beyond_rounding": None}) is module


def test_a_forward_beyond_rounding_at_step_0_makes_the_parting_step_0():
    # sharded data: the losses leave their envelope only later, but layer0's step-0 forward already has
    envelope = {"measured": True, "loss": {"first_beyond_step": 7}}
    tensor = {"step": 0, "kind": "grad", "beyond_rounding": {"step": 0, "kind": "grad"}}
    assert real_onset(0, tensor, envelope)["first_real_step"] == 1
    module = {"step": 0, "phase": "forward", "module": "layer0"}
    assert real_onset(0, tensor, envelope, module)["first_real_step"] == 0
    assert real_onset(0, tensor, envelope, dict(module, phase="backward"))["first_real_step"] == 1


def test_the_tracing_window_runs_past_where_the_losses_leave_their_envelope():
    from sweep.run.job import trace_anchor

    assert trace_anchor(0, {"measured": True, "loss": {"first_beyond_step": 122}}) == 122
    assert trace_anchor(5, {"measured": True, "loss": {"first_beyond_step": 3}}) == 5
    assert trace_anchor(0, {"measured": True, "loss": {"first_beyond_step": None}}) == 0
    assert trace_anchor(0, {"measured": False, "why": "no twin"}) == 0 and trace_anchor(2, None) == 2


def test_a_module_after_a_buffer_that_differs_names_the_buffer_not_the_update():
    """A buffer is updated by a forward, not by the optimizer: the merged place names it and
    that forward, never "the weights already differ after step N's update" (issue 38)."""
    module = {"step": 1, "phase": "forward", "module": "norm1", "rel_in": 0.0, "rel_out": 0.5}
    found = place(module, {"step": 0, "kind": "buffer", "name": "norm1.running_mean"})
    assert module_text(found) == ("norm1 forward output at step 1, inputs agree, rel 0.5; buffer norm1.running_mean "
                                  "already differs after the forward of step 0 (first differing tensor): the module "
                                  "computes with it")
    assert "update" not in module_text(found)
    initial = place(module, {"step": 0, "kind": "initial", "name": "w"})
    assert module_text(initial).endswith("; the initial weights already differ (first differing tensor): the "
                                         "module computes on them")
    assert place({"note": "not traced"}, {"step": 0, "kind": "grad"}) == {"note": "not traced"}
    assert place(None, {"step": 0, "kind": "grad"}) is None


def test_the_first_tensors_sentence_names_its_rank_on_several_ranks():
    found = dict(_tensor(2, "grad", 0.1), rank=1, ranks=[1])
    text = "w grad at step 2, abs 0.1, rel 0.1; weights identical before"
    assert located_text(found, 2) == text + " (rank 1)"
    assert located_text(dict(found, ranks=[0, 1]), 2) == text + " (every rank)"
    assert located_text(found, 1) == text
    shards = dict(found, shards={"of": 2, "differ": [1], "ranks": [1]})
    assert located_text(shards, 2) == text + "; only dim-0 shard 1 of 2 differs, held by rank 1"
    assert located_text({"note": "not traced: order=separate"}, 2) == "not traced: order=separate"
    assert located_text({}, 2) is None


# --- one record's evidence ---------------------------------------------------------------------------


def _record(status, distributed, rank_steps=None, **extra):
    ref = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5]
    c = compare_losses(ref, distributed, rtol=1e-4, atol=1e-4)
    return JobRecord(status=status, comparison=c.to_dict(), losses={"standalone": ref, "distributed": distributed},
                     rank_comparisons=[{"rank": r, "first_diff_step": s} for r, s in enumerate(rank_steps or [])],
                     **extra)


def test_a_records_evidence_is_the_earliest_rank_its_real_step_and_its_first_tensor():
    got = [1.0, 0.9, 0.8, 0.7 + 1e-3, 0.6 + 2e-3, 0.5 + 3e-3]
    record = _record("fail", got, rank_steps=[3, 2], world_size=2,
                     first_tensor=dict(_tensor(1, "weight", 0.1), rank=1, ranks=[1]),
                     first_module={"step": 2, "phase": "forward", "module": "layer0", "rel_in": 0.0, "rel_out": 0.5,
                                   "rank": 1, "ranks": [1], "every": False})
    found = job_evidence(record)
    assert list(found) == ["first_diff_step", "onset", "period", "first_tensor_kind", "first_tensor_rel",
                           "first_real_step", "onset_from"]
    assert found["first_diff_step"] == 2  # rank 1's, before the judged losses' step 3
    assert found["first_real_step"] == 2 and found["onset_from"] == "losses"
    assert found["first_tensor_rel"] == 0.1
    assert located_text(record.first_tensor, 2) == (
        "w weight at step 1, abs 0.1, rel 0.1; gradients of that step identical (as reduced): it arises after the "
        "reduction, in clipping, scaling or the optimizer step (rank 1)")
    assert module_text(record.first_module) == "layer0 forward output at step 2, inputs agree, rel 0.5 (rank 1)"
    assert drift_class(dict(found, status="fail")) == "from_step"


def test_a_job_whose_every_difference_stays_within_its_envelope_is_rounding_passing_or_not():
    got = [1.0] * 3 + [0.7 + 2e-7, 0.6 + 2e-7, 0.5 - 2e-7]
    within = {"step": 0, "kind": "weight", "name": "b", "abs_diff": 1e-12, "rel_diff": 1e-12,
              "bound": 1e-9, "beyond_rounding": None, "rank": 0, "ranks": [0]}
    envelope = {"measured": True, "loss": {"within": True, "first_beyond_step": None}, "other_failures": []}
    for status in ("ok", "fail"):
        record = _record(status, [1.0, 0.9, 0.8] + got[3:], world_size=1, first_tensor=within, envelope=envelope)
        found = job_evidence(record)
        assert found["first_real_step"] is None and found["first_tensor_rel"] == 1e-12
        row = dict(found, status=status, result=record)
        assert rounding_only(row) and drift_class(row) == "rounding"


def test_a_record_without_losses_has_only_its_places():
    record = JobRecord(status="error", first_tensor={"note": "not traced: the tracing rerun gave no result (exit 1)"})
    assert job_evidence(record) == {"first_tensor_kind": None, "first_tensor_rel": None}
    assert located_text(record.first_tensor, 1) == "not traced: the tracing rerun gave no result (exit 1)"
    assert module_text(record.first_module) is None


def test_an_older_records_place_without_its_data_renders_its_sentence():
    old = {"step": 0, "kind": "grad", "rel_diff": 0.004, "description": "layer0.bias grad at step 0, abs 4.31e-05"}
    assert tensor_text(old) == "layer0.bias grad at step 0, abs 4.31e-05"
    assert module_text({"step": 2, "description": "layer0 forward output at step 2"}) == (
        "layer0 forward output at step 2")


def test_a_job_whose_envelope_was_not_measured_parts_at_its_first_difference():
    got = [1.0 + 1e-8, 0.9 + 5e-6, 0.8 + 1e-3, 0.7, 0.6, 0.5]
    command = _record("fail", got, config={"runner": {"name": "command"}},
                      envelope={"measured": False, "why": "runner=command: no twin can run"})
    found = job_evidence(command)
    assert found["first_real_step"] == 0  # 1e-8 may be a mean over the ranks, but nothing was measured
    assert not rounding_only(dict(found, status="fail", result=command))


# --- the class -------------------------------------------------------------------------------------


@pytest.mark.parametrize("row, cls", [
    ({"status": "fail", "first_diff_step": 0, "first_real_step": 0}, "step0"),
    ({"status": "fail", "first_diff_step": 0, "first_real_step": 1}, "first_update"),
    ({"status": "fail", "first_diff_step": 0, "first_real_step": 5, "onset": "periodic"}, "periodic"),
    ({"status": "ok", "first_diff_step": 4, "first_real_step": 4, "onset": "growth"}, "from_step"),
    ({"status": "ok", "first_diff_step": 4, "first_real_step": None,
      "result": JobRecord(status="ok", envelope={"measured": True})}, "rounding"),
    ({"status": "ok", "first_diff_step": None, "first_real_step": None}, None),
    ({"status": "error", "first_diff_step": 0, "first_real_step": 0}, None),
    ({"status": "fail", "first_diff_step": 2, "first_tensor_rel": 1e-6}, "from_step"),  # an older row: no envelope
    ({"status": "fail", "first_diff_step": 2}, "from_step"),  # untraced: a real drift
])
def test_the_drift_class_is_that_of_the_first_real_difference(row, cls):
    assert drift_class(row) == cls


def test_the_parting_step_is_the_real_one_where_known():
    assert parting_step({"first_diff_step": 0, "first_real_step": 7}) == 7
    assert parting_step({"first_diff_step": 3, "first_real_step": None}) == 3
    assert parting_step({"first_fail_step": 9}) == 9  # an older row: no first differing step


# --- the dtypes ------------------------------------------------------------------------------------


def test_the_policy_implies_the_reduction_and_master_dtypes():
    assert implied_dtypes({"param_dtype": "torch.bfloat16", "reduce_dtype": None}) == {
        "param_forward": "bfloat16", "reduce": "bfloat16", "master": "float32", "optimizer_state": "float32"}
    assert implied_dtypes({}, master="bfloat16")["param_forward"] == "bfloat16"


def test_a_policy_whose_forward_ran_otherwise_is_not_applied():
    found = dtype_evidence({"configured": {"param_dtype": "bfloat16", "reduce_dtype": None, "output_dtype": None},
                            "observed": {"param_forward": "torch.float32", "reduce": "bfloat16"}})
    assert found["policy_applied"] is False
    assert found["dtypes_configured"] == "bfloat16/-/-" and found["dtypes_ran"] == "float32/bfloat16/?/?/?/?"
    from sweep.records import note

    assert found["dtype_notes"] == [note("N160", key="param_forward", ran="float32", expected="bfloat16",
                                         configured=True)]
    assert dtype_evidence(None) == {"dtypes_configured": None, "dtypes_ran": None, "policy_applied": None,
                                    "dtype_notes": []}
    assert dtype_evidence({"configured": {}, "observed": {}})["policy_applied"] is None


def _noisy(spread):
    got = [1.0, 0.9 + 2e-3, 0.8 - 1e-3, 0.7 + 3e-3, 0.6 + 1e-3, 0.5 - 2e-3]
    # one launch's update errors drew one large first step: abrupt, from the updates alone
    updates = {"pattern": "abrupt", "first_step": 0, "real_step": 0, "period": None, "events": [0]}
    return _record("fail", got, world_size=2, nondeterministic=spread is not None,
                   repeat_spread=None if spread is None else {"distributed_max_abs": spread, "standalone_max_abs": 0.0},
                   first_tensor=dict(_tensor(0, "grad", 0.1), rank=0, ranks=[0, 1], updates=updates))


def test_repeats_that_differ_as_much_as_the_copies_make_the_onset_noise_whatever_one_launch_draws():
    drift = _noisy(None).comparison["max_abs_diff"]
    alone = job_evidence(_noisy(None))  # no repeats: the launch's own pattern stands
    assert alone["onset"] == "abrupt" and alone["onset_from"] == "updates"
    found = job_evidence(_noisy(0.8 * drift))  # launches differ by about as much as from standalone
    assert found["onset"] == "noise" and found["onset_from"] == "repeats" and found["period"] is None
    small = job_evidence(_noisy(0.1 * drift))  # a little nondeterminism under a larger deterministic fault
    assert small["onset"] == "abrupt" and small["onset_from"] == "updates"


def test_a_buffer_that_differs_first_is_glossed_as_the_buffer_not_the_update():
    """A tester's running mean updated with another momentum in the distributed copy (used
    before it is updated): the losses part at step 1, class first_update, but step 0's
    update is equal; the gloss names the buffer, not 'the first update differs'."""
    from sweep.analysis.evidence import DRIFT_CLASSES, class_gloss

    row = {"first_diff_step": 1, "first_tensor_kind": "buffer"}
    assert "a buffer that the forward updates differs first, after the forward of step 0" in \
        class_gloss(row, "first_update")
    assert class_gloss(dict(row, first_tensor_kind="grad"), "first_update") == DRIFT_CLASSES["first_update"]
    assert class_gloss(row, "step0") == DRIFT_CLASSES["step0"]


def test_a_fault_that_stopped_ends_where_its_lr_note_says():
    """An lr changed on updates 1-8 (a warmup's, whose last difference is small): the update
    differences' last large step (7) said "over after update 7" while the lr note (N123) said
    steps 1-8; the note's exact span decides. A note on other steps changes nothing."""
    from sweep.records import note

    got = [1.0, 0.9 + 1e-3, 0.8 + 2e-3, 0.7 + 1e-3, 0.6 + 1e-3, 0.5 + 1e-3]
    stopped = dict(_tensor(1, "weight", 0.1),
                   updates={"pattern": "abrupt", "period": None, "real_step": 1, "until": 7, "events": [1]})
    lr = note("N123", step=1, distributed=0.002, standalone=0.001, first=1, last=8, after=9, ratio=2.0)
    record = _record("fail", got, first_tensor=stopped, notes=[lr])
    assert job_evidence(record)["onset_until"] == 8
    elsewhere = note("N123", step=12, distributed=0.002, standalone=0.001, first=12, last=13, after=14, ratio=2.0)
    assert job_evidence(_record("fail", got, first_tensor=stopped, notes=[elsewhere]))["onset_until"] == 7
    assert job_evidence(_record("fail", got, first_tensor=stopped))["onset_until"] == 7
