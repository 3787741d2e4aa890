"""Judging one run (sweep.analysis.judging), on constructed comparisons: the rank a job is
judged by, ranks that disagree, the verdict's status and reasons, copies that start apart,
and notes several ranks share."""

import pytest

from sweep.analysis.compare import compare_losses
from sweep.analysis import judging
from sweep.analysis.judging import Disagreements, JudgedLosses, ranked_notes, ranks_apart, start_tensor, worst_rank
from sweep.report.notes import text_of


def verdict(*args):
    """The status and the reason as the record holds it: the reasons (notes) rendered, joined by "; "."""
    status, reasons = judging.verdict(*args)
    return status, "; ".join(text_of(n) for n in reasons) or None

REF = [1.0, 0.9, 0.8, 0.7]


def _c(got):
    return compare_losses(REF, got, rtol=1e-4, atol=1e-4)


def test_a_job_passes_when_every_rank_passes_and_nothing_else_fails_it():
    assert verdict(JudgedLosses({0: _c(REF), 1: _c(REF)}, 0, REF, REF), 1e-4, 1e-4) == ("ok", None)


def test_the_reason_names_the_judged_rank_the_failing_ranks_and_a_non_finite_loss():
    bad = [1.0, float("nan"), 0.7, 0.6]
    comparisons = {0: _c(REF), 1: _c(bad)}
    status, reason = verdict(JudgedLosses(comparisons, worst_rank(comparisons), REF, bad), 1e-4, 1e-4)
    assert status == "fail" and reason == (
        "rank 1: 3/4 steps outside rtol=0.0001, atol=0.0001; first at step 1 (failing ranks: 1 of 2); "
        "a non-finite loss from step 1 (standalone 0.9, distributed nan)")
    # one judged sequence (sharded): no rank named
    one = verdict(JudgedLosses({0: _c(bad)}, 0, REF, bad), 1e-4, 1e-4)[1]
    assert one.startswith("3/4 steps outside") and "failing ranks" not in one


def test_ranks_that_disagree_copies_that_start_apart_and_replicas_fail_a_job_within_tolerance():
    close, other = [1.0, 0.9, 0.8 + 1.5e-4, 0.7], [1.0, 0.9, 0.8 - 1.5e-4, 0.7]  # each within tolerance of standalone
    apart = ranks_apart([(0, close), (1, REF), (2, other)], 1e-4, 1e-4)
    assert [rank for rank, _ in apart] == [2] and apart[0][1].first_fail_step == 2
    assert ranks_apart([(0, REF), (1, list(REF))], 1e-4, 1e-4) == [] and ranks_apart([], 1e-4, 1e-4) == []
    unequal = [(0, {"description": "w initial weights differ"}), (1, {"description": "w initial weights differ"})]
    replicas = {"first_step": 1, "pairs": [[0, 2]], "coords": {"0": [0, 0], "2": [1, 0]}, "mesh_dims": ["r", "s"]}
    comparisons = {0: _c(close), 2: _c(other)}
    judged = JudgedLosses(comparisons, 0, REF, close)
    status, reason = verdict(judged, 1e-4, 1e-4, Disagreements(apart=apart, unequal=unequal, replicas=replicas))
    assert status == "fail" and reason.split("; ") == [
        "ranks disagree: rank 2 against rank 0 from step 2 (max |diff| 0.0003)",
        "the copies do not start equal: rank 0: w initial weights differ (ranks 0, 1)",
        "replicas disagree from step 1: rank 0 (r x s [0, 0]) and rank 2 (r x s [1, 0]) hold the same shards of the "
        "weights but different values (the reduction across replicas is missing or wrong)",
    ]
    assert verdict(judged, 1e-4, 1e-4, Disagreements(replicas=dict(replicas, first_step=None))) == ("ok", None)
    codes = [n.code for n in judging.verdict(judged, 1e-4, 1e-4, Disagreements(apart=apart, unequal=unequal,
                                                                                replicas=replicas))[1]]
    assert codes == ["N182", "N183", "N184"]
    # from step 0, with a rank among them that starts apart: the initialisation, not the reduction
    from_init = dict(replicas, first_step=0, ranks=[0, 2])
    _, reason = verdict(judged, 1e-4, 1e-4, Disagreements(unequal=unequal, replicas=from_init))
    assert "initial weights that differ by rank: an initialisation, not the reduction" in reason
    assert "missing or wrong" not in reason


def test_copies_that_start_apart_have_their_first_tensor_at_the_start():
    found = {"step": 0, "kind": "initial", "name": "w", "description": "w initial weights differ"}
    assert start_tensor([(1, found), (3, found)]) == dict(found, rank=1, ranks=[1, 3])
    assert start_tensor([]) is None


def test_notes_of_several_ranks_are_said_once_with_their_ranks():
    notes = ranked_notes({1: ["b", "a"], 0: ["a"], 2: ["a"]}, 3)
    assert notes == ["a", "b (rank 1)"]  # first seen on rank 0; every rank has "a"
    assert ranked_notes({0: ["x"], 2: ["x"]}, 4) == ["x (ranks 0, 2)"]
    assert ranked_notes({0: ["x"]}, 1) == ["x"]


def test_the_worst_rank_is_the_earliest_failure_and_ties_go_to_the_lowest_rank():
    late, early = [1.0, 0.9, 0.8, 0.7 + 1e-2], [1.0, 0.9 + 1e-2, 0.8, 0.7]
    assert worst_rank({0: _c(late), 1: _c(early), 2: _c(early)}) == 1
    assert worst_rank({0: _c(REF), 1: _c(REF)}) == 0
    with pytest.raises(ValueError):
        worst_rank({})


def test_losses_non_finite_alike_in_both_copies_fail_the_job():
    diverged = [1.0, float("inf"), float("nan"), float("nan")]
    both = compare_losses(diverged, diverged, rtol=1e-4, atol=1e-4)
    assert both.passed and both.first_nonfinite_step == 1  # numpy.isclose(equal_nan) calls them equal
    status, reason = verdict(JudgedLosses({0: both}, 0, diverged, diverged), 1e-4, 1e-4)
    assert status == "fail" and reason == (
        "non-finite loss from step 1 in both copies (standalone inf, distributed inf): equal, but nothing to compare")
    finite = compare_losses(REF, REF, rtol=1e-4, atol=1e-4)
    # another rank's: named by rank
    status, reason = verdict(JudgedLosses({0: finite, 1: both}, 0, REF, REF), 1e-4, 1e-4)
    assert status == "fail" and reason.startswith("non-finite loss from step 1 in both copies (rank 1)")


def test_replicas_apart_from_the_initial_weights_are_not_blamed_on_the_reduction():
    """A tester's per-rank init fault on HSDP (rank 1's shard re-initialised): the replicas
    disagree from step 0 because the copies start apart there; the sentence says so."""
    from sweep.report.findings import attribute

    def replica_sentence(rows):
        return " ".join(f["sentence"] for f in attribute([dict(r, overrides={"j": str(r["job"])}, status="ok",
                                                               mean_signed_diff=0.0, max_abs_diff=0.0,
                                                               first_fail_step=None, reason=None)
                                                          for r in rows])["findings"] if f["code"] == "V150")

    init = {"job": 1, "notes": "replicas disagree from step 0 (ranks 1 and 3)", "first_tensor_kind": "initial",
            "first_tensor": "layer0.weight initial weights (before any step), only dim-0 shard 1 of 2 differs, "
                            "held by rank 1"}
    text = replica_sentence([{"job": 0, "notes": None}, init])
    assert "an initialisation that differs by rank, not the reduction" in text and "missing or wrong" not in text
    later = dict(init, notes="replicas disagree from step 2 (ranks 1 and 3)", first_tensor="layer0.weight grad")
    assert "the reduction across replicas is missing or wrong" in replica_sentence([later])
    # a gradient whose text mentions equal initial weights is no initialisation (a missing replicate reduce)
    grad = dict(init, first_tensor_kind="grad", first_tensor="layer1.bias grad at step 0, rel 1.01; the first "
                                                              "gradient (initial weights equal)")
    assert "the reduction across replicas is missing or wrong" in replica_sentence([grad])


def test_replicas_apart_after_an_agreeing_reduction_are_not_blamed_on_it():
    """A new user's fault scaled one rank's gradient after the reduction on HSDP: the headline
    blamed the reduction while the first tensor said the step's gradients agree as reduced."""
    from types import SimpleNamespace

    from sweep.analysis.judging import arises_after_reduction, replica_reason
    from sweep.findings import find
    from sweep.records import JobRecord
    from sweep.report.notes import text_of
    from sweep.run.judge import replicas_after_trace

    weight = {"kind": "weight", "step": 0, "name": "fc1.weight", "rel_diff": 1e-3}
    assert arises_after_reduction(weight) and not arises_after_reduction(dict(weight, kind="grad"))
    assert not arises_after_reduction(dict(weight, grad_only_in="standalone")) and not arises_after_reduction(None)
    # sharded data: the first difference is a gradient within rounding, the first beyond it that weight (HSDP, a
    # fault on one rank after a correct reduction: it was "the reduction across replicas is missing or wrong")
    rounding = {"kind": "grad", "step": 0, "name": "layer1.bias", "rel_diff": 1e-7}
    assert arises_after_reduction(dict(rounding, beyond_rounding=weight)) and not arises_after_reduction(rounding)
    assert not arises_after_reduction(dict(weight, beyond_rounding=dict(weight, kind="grad")))
    replicas = {"first_step": 1, "pairs": [[1, 3]], "ranks": [1, 3], "coords": {}, "mesh_dims": []}
    assert "it arises after the reduction" in text_of(replica_reason(replicas, (), True))
    blamed = text_of(replica_reason(replicas))
    record = JobRecord(status="fail", reason="max |diff| 0.1; " + blamed, replicas=replicas, first_tensor=weight)
    replicas_after_trace(record)
    assert "missing or wrong" not in record.reason and "it arises after the reduction" in record.reason
    # a rank's own clipping after a correct all-reduce (a new user's, MindSpore): the first tensor is the clipped
    # gradient, but the norm departs only as the optimizer read them (N144 "read"): after the reduction too
    from sweep.records import Note

    read = Note("N144", {"step": 0, "stage": "read", "equal": "after the reduction"})
    grad = dict(weight, kind="grad")
    assert arises_after_reduction(grad, [read]) and arises_after_reduction(grad, [read.to_dict()])
    assert not arises_after_reduction(grad, [Note("N144", {"step": 0, "stage": "reduced"})])
    clipped = JobRecord(status="fail", reason="max |diff| 0.1; " + blamed, replicas=replicas, first_tensor=grad,
                        notes=[read])
    replicas_after_trace(clipped)
    assert "missing or wrong" not in clipped.reason and "it arises after the reduction" in clipped.reason
    note = "replicas disagree from step 1 (ranks 1 and 3)"
    rows = [{"job": j, "overrides": {"mesh": m}, "status": "fail", "reason": None, "first_fail_step": 1,
             "first_diff_step": 1, "mean_signed_diff": -0.5, "max_abs_diff": 0.5, "runs_low_pct": 100.0,
             "notes": note if m == "hsdp" else None, "result": SimpleNamespace(first_tensor=weight)}
            for j, m in enumerate(["dp4", "hsdp"])]
    headline = next(f for f in find(rows, ()) if f.code == "V106")
    assert headline.values["fails"] == 2 and "it arises after the reduction" in headline.values["cause"]


def test_the_standalone_optimizer_not_seen_by_the_ranks_says_why():
    """A job whose ranks did not train the standalone copy (a cached baseline,
    order=separate) records why its standalone optimizer is missing, never a blank."""
    from sweep.records import JobRecord, RankResult
    from sweep.run.judge import _inside_notes

    group = [{"group": 0, "lr": 1e-4}]
    rank = RankResult(rank=0, world_size=1, framework="torch", distributed=[1.0], optimizer={"distributed": group, "notes": []})
    cached = JobRecord(config={"order": "standalone_first"}, baseline={"source": "cache", "job_dir": "/s/0"})
    _, optimizer = _inside_notes(cached, [rank])
    assert optimizer["standalone"] == {"note": "not observed: the standalone losses were reused from job dir /s/0 "
                                               "(execution.reuse_baselines)"}
    _, optimizer = _inside_notes(JobRecord(config={"order": "separate"}), [rank])
    assert "order=separate" in optimizer["standalone"]["note"]


def test_a_gradient_norm_note_past_the_first_weight_beyond_rounding_goes_once_traced():
    """A new user's weight decay applied twice on sharded data (MindSpore): the weights part at
    update 0, the gradient norms at step 1 follow them; the note said "the difference arises in
    the forward, the backward or the reduction" beside a first tensor that said after it."""
    from sweep.records import JobRecord, Note
    from sweep.run.judge import norms_after_trace

    later, same = (Note("N144", {"step": s, "stage": "reduced"}) for s in (1, 0))
    weight = {"kind": "weight", "step": 0, "name": "embed.bias", "rel_diff": 1e-2}
    record = JobRecord(status="fail", first_tensor={"kind": "grad", "step": 0, "name": "x", "rel_diff": 1e-8,
                                                    "beyond_rounding": weight}, notes=[later, same, "other"])
    norms_after_trace(record)
    assert record.notes == [same, "other"]
    untraced = JobRecord(status="fail", first_tensor={"note": "not traced: compare.trace_after=0"}, notes=[later])
    norms_after_trace(untraced)
    assert untraced.notes == [later]
