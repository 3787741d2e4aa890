"""Evidence of what ran (issue 51), the pure parts: what each reduced gradient became
(sweep.analysis.reductions), which calls carried it, the gradient norms per step, the replicas
tensor by tensor (sweep.analysis.judging), the precision per module and the master weights
(sweep.analysis.dtypes), the optimizer per parameter (sweep.analysis.collectives), and the
reasons for empty fields (sweep.run.judge.never_silent)."""

import numpy as np
import pytest

from sweep.analysis.collectives import decay_notes, dim_groups, held_notes, loss_scale_notes
from sweep.analysis import dtypes
from sweep.analysis import judging
from sweep.analysis.judging import replica_check
from sweep.analysis import reductions
from sweep.analysis.reductions import Carriers, LossStep, candidates, classify, clip_coefficients, shard_of
from sweep.records import Note, RankResult
from sweep.train.observers.dtypes import lower_precision
from sweep.findings.places import tensor_text

RNG = np.random.default_rng(0)
LOCAL = RNG.normal(size=(4, 6, 3))  # four ranks' local gradients of one (6, 3) parameter
GROUPS = dim_groups([2, 2], ["dp_replicate", "dp_shard"], 0)
KNOWN = {"world_size": 4.0, "grad_accum_steps": 1.0, "the replicate degree": 2.0}


def replica_reason(*args):
    """The replicas' reason (a note: N184, N185) as the report renders it."""
    from sweep.report.notes import text_of

    return text_of(judging.replica_reason(*args))


def _rendered(notes):
    """Typed notes (sweep.records.Note) as the report renders them (sweep.report.notes)."""
    from sweep.records import Note
    from sweep.report.notes import text_of

    assert all(isinstance(n, Note) for n in notes), notes
    return [text_of(n) for n in notes]


def reduction_notes(*args, **kwargs):
    return _rendered(reductions.reduction_notes(*args, **kwargs))


def coverage_notes(*args, **kwargs):
    return _rendered(reductions.coverage_notes(*args, **kwargs))


def norm_notes(*args, **kwargs):
    return _rendered(reductions.norm_notes(*args, **kwargs))


def precision_notes(*args, **kwargs):
    return _rendered(dtypes.precision_notes(*args, **kwargs))


def _op(reduced, rank=0, index=0, clip=None):
    scale = float(np.max(np.abs(LOCAL.mean(axis=0))))
    return classify(candidates(LOCAL, rank, GROUPS, clip), reduced, scale, 1e-4, index)


def test_the_op_that_ran_is_read_from_the_values_whatever_the_call_was_given():
    assert _op(LOCAL.mean(axis=0))["op"] == "mean"
    assert _op(LOCAL.sum(axis=0)) == pytest.approx({"op": "sum", "factor": 4.0, "residual": 0.0}, abs=1e-9)
    assert _op(LOCAL.max(axis=0))["op"] == "max"
    assert _op(LOCAL[0])["op"] == "none"  # never reduced: this rank's own
    assert _op(LOCAL[[0, 1]].mean(axis=0))["op"] == "mean over dp_shard"  # the replicate dim never crossed
    found = _op(LOCAL.mean(axis=0) * 0.5)
    assert found["op"] == "x0.5 the mean" and found["factor"] == pytest.approx(0.5)
    assert _op(LOCAL[[0, 1]].mean(axis=0) * 0.5)["op"] == "x0.5 the mean over dp_shard"
    assert _op(LOCAL.mean(axis=0) + RNG.normal(size=(6, 3)))["op"] == "other"
    # a rank's shard of the reduced gradient is held against the same rows of each candidate
    assert _op(LOCAL.mean(axis=0)[3:], rank=1, index=1)["op"] == "mean"
    assert shard_of(np.arange(5.0), (1,), 2).tolist() == [4.0] and shard_of(np.arange(5.0), (4,), 0) is None


def test_measured_before_the_scale_is_known_the_op_is_the_one_classify_names():
    # the observer measures each parameter as its chunk passes and decides once the step's largest
    # mean is known: at its own max|mean| or at the step's largest, the answer is classify's
    own = float(np.max(np.abs(LOCAL.mean(axis=0))))
    for reduced in [LOCAL.mean(axis=0), LOCAL.sum(axis=0), LOCAL[0], LOCAL.mean(axis=0) * 0.5,
                    LOCAL[[0, 1]].mean(axis=0) * 0.5, LOCAL.mean(axis=0) + RNG.normal(size=(6, 3)) * 1e-2]:
        for scale in (own, own * 2e3):
            measured = reductions.measure(candidates(LOCAL, 0, GROUPS), reduced, 1e-4, own)
            assert reductions.decide(measured, scale, 1e-4) == classify(candidates(LOCAL, 0, GROUPS), reduced, scale,
                                                                        1e-4)
    # candidates computed on a rank's rows only (the observer cuts them first) give the same answer
    rows = reductions.shard_rows((6, 3), (3, 3), 1)
    assert rows == slice(3, 6)
    cut = reductions.measure(candidates(LOCAL[:, rows], 1, GROUPS), LOCAL.sum(axis=0)[3:], 1e-4, own, 1)
    assert reductions.decide(cut, own, 1e-4)["op"] == "sum" == _op(LOCAL.sum(axis=0)[3:], rank=1, index=1)["op"]
    assert reductions.measure(candidates(LOCAL, 0, GROUPS), np.zeros((5, 3)), 1e-4, own) is None  # no dim-0 split
    # 16 rows, 4 a rank: shard 2 of 4 holds rows 8-12, of 3 (chunks 6, 6, 4) rows 12-16. Without the
    # number of shards a correct dp4 reduction of a hidden-16 MLP was named "not the mean" on rank 2
    assert reductions.shard_rows((16, 32), (4, 32), 2, 4) == slice(8, 12)
    assert reductions.shard_rows((16, 32), (4, 32), 2, 3) == slice(12, 16)
    assert reductions.shard_rows((16, 32), (4, 32), 3, 4) == slice(12, 16)
    assert reductions.shard_rows((16, 32), (5, 32), 1, 4) is None  # 4 shards of 16 rows hold 4 each
    wide = RNG.normal(size=(4, 16, 2))
    assert reductions.classify(candidates(wide, 2, {}), wide.mean(axis=0)[8:12], 1.0, 1e-4, 2, 4)["op"] == "mean"
    # an overflowing fp16 step (a gradient scaler skips it): inf on a rank, NaN after the mean; no op is read from it
    # (a new user's correct run read "ran not the mean over the ranks nor any op of it", N140)
    over = wide.copy()
    over[1, 9, 0] = np.inf
    reduced = over.mean(axis=0)[8:12]
    reduced[1, 0] = np.nan
    assert reductions.classify(candidates(over, 2, {}), reduced, 1.0, 1e-4, 2, 4)["op"] == "unknown"


def test_clipping_before_the_reduction_is_named_from_each_ranks_own_norm():
    norms = np.sqrt(np.sum(LOCAL.reshape(4, -1) ** 2, axis=1))
    coef = clip_coefficients(norms, 1.0)
    clipped = (LOCAL * coef[:, None, None]).mean(axis=0)
    assert _op(clipped, clip=coef)["op"] == "clipped before the reduction"
    assert _op(LOCAL.mean(axis=0), clip=coef)["op"] == "mean"  # clipping after: the reduction itself is a mean


def test_the_note_names_the_parameters_the_op_the_factor_and_the_calls_that_carried_them():
    found = {0: {"w": _op(LOCAL.sum(axis=0)), "b": _op(LOCAL.sum(axis=0)), "c": _op(LOCAL.mean(axis=0))}}
    calls = [{"op": "reduce_scatter_single", "group": [0, 1], "reduce_op": "AVG", "step": 0, "params": ["w", "b"]}]
    notes = reduction_notes(found, KNOWN, Carriers(GROUPS, 4, calls))
    assert notes == ["the gradient reduction of step 0 ran a sum over the ranks, not their mean for b, w: they are x4 "
                     "the mean (x4 = world_size: a sum where a mean was expected) (carried by reduce_scatter_single "
                     "over dp_shard (reduce_op AVG))"]
    why = "nn.DistributedGradReducer all-reduces inside a compiled graph (@jit): no call"
    unseen = reduction_notes({0: {"w": _op(LOCAL.mean(axis=0) * 0.25)}}, KNOWN, Carriers(GROUPS, 4, unseen=why))
    assert "x0.25 = 1/world_size: divided by world_size twice" in unseen[0]
    assert unseen[0].endswith("(its calls not seen: nn.DistributedGradReducer all-reduces inside a compiled graph "
                              "(@jit); judged from the gradients it returned)")
    left = reduction_notes({0: {"b": _op(LOCAL[0])}}, KNOWN, sizes={"w": 1600, "b": 25})
    assert "no reduction: each rank keeps its own gradient for b (25 of 1,625 gradient elements left unreduced)" in left[0]
    assert reduction_notes({0: {"w": _op(LOCAL.mean(axis=0))}}, KNOWN, Carriers(GROUPS, 4)) == []
    typed = reductions.reduction_notes(found, KNOWN, Carriers(GROUPS, 4, calls))[0]
    assert typed.code == "N140" and typed.values["op"] == "sum" and typed.values["parameters"] == ["b", "w"]
    assert typed.values["causes"]["factors"] == ["world_size"] and typed.values["calls"][0]["group"] == "dp_shard"


HSDP = {"mesh_shape": [2, 2], "mesh_dim_names": ["dp_replicate", "dp_shard"]}


def _call(op, group, params, step=0):
    return {"op": op, "group": group, "params": params, "step": step, "span": "grads", "numel": 8}


def test_every_gradient_is_reduced_once_over_each_group_it_must_cross():
    sizes = {"w": 1600, "b": 25}
    fine = [_call("reduce_scatter_tensor", [0, 1], ["w"]), _call("all_reduce", [0, 2], ["w"]),
            _call("all_reduce", [0, 1, 2, 3], ["b"])]  # a parameter too small to shard: once over every rank
    assert coverage_notes(fine, HSDP, ["w", "b"], sizes, 0, 4) == []
    skipped = coverage_notes(fine[:2], HSDP, ["w", "b"], sizes, 0, 4)
    assert skipped == ["b was carried by no gradient reduction in step 0 (the reductions carried 1,600 of the 1,625 "
                       "gradient elements): each rank keeps its own gradient for it"]
    # sizes unknown (no step-0 check ran, as in a tracing rerun): no "0 of the 0" figures
    assert coverage_notes(fine[:2], HSDP, ["w", "b"], {}, 0, 4) == [
        "b was carried by no gradient reduction in step 0: each rank keeps its own gradient for it"]
    # a parameter no loss reads has no gradient (the observer leaves it out of ``params``): no reduction owed
    assert coverage_notes(fine[:2], HSDP, ["w"], sizes, 0, 4) == []
    # one the loss reads from step 1 on (a branch taken later) is owed none in step 0, one from step 1 on
    later = fine[:2] + [dict(c, step=1) for c in fine[:2]]
    owed = lambda step: ["w"] if step == 0 else ["w", "b"]  # noqa: E731
    assert coverage_notes(later, HSDP, owed, sizes, 0, 4) == [skipped[0].replace("step 0", "step 1")]
    # a shard dim of size 1 reduce-scatters nothing: the replicate all-reduce is checked all the same
    one = {"mesh_shape": [2, 1], "mesh_dim_names": ["dp_replicate", "dp_shard"]}
    missing = coverage_notes([_call("all_reduce", [0], ["w"])], one, ["w"], {"w": 8}, 0, 2)
    assert missing == ["w was reduced over dp_shard but never across dp_replicate in step 0: the ranks along "
                       "dp_replicate keep gradients that differ"]
    twice = coverage_notes(fine + [_call("all_reduce", [0, 2], ["w"])], HSDP, ["w", "b"], sizes, 0, 4)
    assert twice == ["w was reduced more than once over dp_replicate in step 0: a gradient is reduced once per group "
                     "it crosses"]
    assert coverage_notes([dict(c, params=None) for c in fine], HSDP, ["w", "b"], sizes, 0, 4) == []  # unknown: no claim
    # the replicate dim reduced by hand before stepping (calls given the gradients themselves) is a crossing;
    # twice, it is named; without the engine saying what its own reductions carried, nothing is judged
    shard = [_call("reduce_scatter_tensor", [0, 1], ["w", "b"])]
    hand = [dict(_call("all_reduce", [0, 2], [n]), span="update", params_from="grad") for n in ("w", "b")]
    assert coverage_notes(shard + hand, HSDP, ["w", "b"], sizes, 0, 4) == []
    assert coverage_notes(shard + hand + hand[:1], HSDP, ["w", "b"], sizes, 0, 4) == [
        "w was reduced more than once over dp_replicate in step 0: a gradient is reduced once per group it crosses"]
    assert coverage_notes(hand, HSDP, ["w", "b"], sizes, 0, 4) == []
    in_clip = [dict(c, span="clip") for c in hand]
    assert coverage_notes(shard + in_clip, HSDP, ["w", "b"], sizes, 0, 4) == []
    # a flat buffer over dp_replicate names no parameter: "never across dp_replicate" is not said of any
    flat = dict(_call("all_reduce", [0, 2], None), span="update", numel=1625)
    assert coverage_notes(shard + [flat], HSDP, ["w", "b"], sizes, 0, 4) == []
    assert reductions.later_reductions(shard + hand + [flat]) == {0: None}
    assert reductions.later_reductions(shard + in_clip) == {0: {"w", "b"}}
    assert reductions.later_reductions(shard) == {}
    # the run's ledger summary: calls given gradients in the clipping or optimizer step, or a flat buffer in the
    # optimizer step, are gradients reduced by hand; the clipping's norms (FSDP2's: a vector a call) are not
    row = {"step": 0, "span": "update", "op": "all_reduce", "calls": 1, "numel": 1836}
    assert reductions.reduced_by_hand([row]) and reductions.reduced_by_hand([dict(row, span="clip", given_grads=1)])
    assert not reductions.reduced_by_hand([dict(row, span="clip", numel=23), dict(row, span="grads"), {}])
    # a shard reduced over dp_shard, then all-reduced over every rank: dp_shard crossed twice (rows of
    # different shards summed)
    world = [dict(_call("all_reduce", [0, 1, 2, 3], [n]), span="update", params_from="grad") for n in ("w", "b")]
    assert coverage_notes(shard + world, HSDP, ["w", "b"], sizes, 0, 4) == [
        "b, w were reduced more than once over dp_shard in step 0: a gradient is reduced once per group it crosses"]


def test_gradients_clipped_before_the_engine_reduces_them_by_hand_are_named_from_the_calls_order():
    """N146: train.clip_grad_norm read the gradients before the engine's own reduction of them (in its
    optimizer step, or in its clipping after the norm's all-reduce); reduced first, then clipped: no note."""
    shard = [_call("reduce_scatter_tensor", [0, 1], ["w", "b"])]
    norm = dict(_call("all_reduce", [0, 1], None), span="clip", numel=1)  # the clipping's norm (FSDP2: a scalar)
    hand = [dict(_call("all_reduce", [0, 2], [n]), span="update", params_from="grad") for n in ("w", "b")]
    late = reductions.clip_order_notes(shard + [norm] + hand, 1.0, GROUPS, 4)
    assert [(n.code, n.values["step"], n.values["groups"], n.values["calls"]) for n in late] == [
        ("N146", 0, ["dp_replicate"], 2)]
    assert _rendered(late) == ["train.clip_grad_norm=1 clipped the gradients of step 0 before the engine reduced "
                               "them by hand (2 call(s) over dp_replicate in its optimizer step): each rank clipped "
                               "by the norm of its own unreduced gradients, not of their mean"]
    in_clip = [dict(c, span="clip") for c in hand]
    assert reductions.clip_order_notes(shard + in_clip + [norm], 1.0, GROUPS, 4) == []  # reduced, then the norm
    after_norm = reductions.clip_order_notes(shard + [norm] + in_clip, 1.0, GROUPS, 4)
    assert after_norm[0].values["where"] == ["its clipping, after the norm"]
    flat = dict(_call("all_reduce", [0, 2], None), span="update", numel=1625)  # a flat buffer of gradients
    assert reductions.clip_order_notes(shard + [norm, flat], 1.0, GROUPS, 4, 2)[0].values["calls"] == 1
    # a vector of norms in the optimizer step (a "logging" clip: get_total_norm of DTensor gradients, one
    # a parameter) is not a flat buffer of gradients
    norms = dict(_call("all_reduce", [0, 1], None), span="update", numel=2)
    assert reductions.clip_order_notes(shard + [norm, norms], 1.0, GROUPS, 4, 2) == []
    # no clipping, one rank, or only the backward's own reductions (FSDP2, DDP): nothing to say
    assert reductions.clip_order_notes(shard + [norm] + hand, None, GROUPS, 4) == []
    assert reductions.clip_order_notes(shard + [norm] + hand, 1.0, GROUPS, 1) == []
    assert reductions.clip_order_notes(shard + [norm], 1.0, GROUPS, 4) == []
    # a later step's order is named at that step
    later = [dict(e, step=3) for e in [norm] + hand]
    assert reductions.clip_order_notes(shard + in_clip + [norm] + later, 1.0, GROUPS, 4)[0].values["step"] == 3


def _norms(rows):
    return {"params": ["w", "b"], "pre": rows, "reduced": rows, "read": rows}


def test_a_gradient_norm_that_departs_before_the_losses_is_named_at_its_step_and_place():
    ours = _norms([[1.0, 0.5], [1.1, 0.4], [0.9, 0.6], [1.0, 0.5]])
    theirs = dict(ours, read=[[1.0, 0.5], [1.1, 0.4], [0.45, 0.3], [0.5, 0.25]])
    notes = norm_notes(ours, theirs, 1e-4, LossStep(3), sharded=False)
    assert notes == ["the gradient norm departs at step 2 as the optimizer read them (equal after the reduction): "
                     "distributed 0.540833, standalone 1.08167 (x0.5; most in w), so the difference arises between "
                     "the reduction and the optimizer step (clipping, scaling or code that touches the gradients, "
                     "such as logging), before the losses show it (they first differ at step 3)"]
    reduced = dict(theirs, reduced=theirs["read"])
    assert "after the reduction (equal before it)" in norm_notes(ours, reduced, 1e-4, LossStep(3), sharded=False)[0]
    assert "in the reduction" in norm_notes(ours, reduced, 1e-4, LossStep(3), sharded=False)[0]
    # from the step the losses part on, the norm follows the weights: no claim
    assert norm_notes(ours, theirs, 1e-4, LossStep(2), sharded=False) == []
    assert norm_notes(ours, ours, 1e-4, LossStep(None), sharded=False) == []
    unclipped = norm_notes(_norms([[0.3, 0.4]] * 2), dict(_norms([[0.3, 0.4]] * 2), read=[[0.3, 0.4], [3.0, 4.0]]),
                           1e-4, LossStep(None), sharded=True, max_norm=1.0)[0]
    assert "above train.clip_grad_norm=1, not clipped to it in the distributed copy (the standalone copy's is)" \
        in unclipped  # (a copy clipped by each rank's own norm is clipped, not to the whole gradient's: not "unclipped")
    # with micro-batches, before the reduction includes their accumulation (a new user's: grads zeroed between them)
    pre = reductions.norm_notes(_norms([[0.3, 0.4]]), dict(_norms([[0.3, 0.4]]), pre=[[0.6, 0.8]]), 1e-4,
                                LossStep(1), sharded=False)[0]
    assert pre.values["stage"] == "pre"
    accumulated = Note(pre.code, dict(pre.values, accum=2), pre.ranks)
    assert "in the forward, the backward or the accumulation of the micro-batches" in _rendered([accumulated])[0]
    assert "in the forward or backward (before any reduction)" in _rendered([pre])[0]
    after = reductions.norm_notes(_norms([[0.3, 0.4]]), dict(_norms([[0.3, 0.4]]), reduced=[[0.6, 0.8]]), 1e-4,
                                  LossStep(1), sharded=False)[0]
    assert after.values["stage"] == "reduced" and after.values["equal"]
    assert "or where the micro-batches' reduced gradients add up" in _rendered([Note(after.code, dict(after.values,
                                                                                                       accum=2))])[0]
    assert "though the losses do not show it" in unclipped
    typed = reductions.norm_notes(ours, theirs, 1e-4, LossStep(3), sharded=False)[0]
    assert (typed.code, typed.values["step"], typed.values["stage"], typed.values["parameter"]) == ("N144", 2, "read", "w")


def _rank(rank, tensors, digests, coords):
    return RankResult(rank=rank, world_size=4, framework="torch",
                      replica={"key": "k", "tensors": tensors, "digests": digests, "coords": coords,
                               "mesh_dims": ["r", "s"]})


def test_replicas_are_held_against_each_other_tensor_by_tensor_buffers_and_unsharded_parameters_included():
    keys = lambda s: {"w": f"(2, 3)@1:{s}/2", "b": "(3,)", "buffer:bn.running_mean": "(3,)"}  # noqa: E731
    same = [{"w": "a", "b": "b", "buffer:bn.running_mean": "m"}] * 3
    ranks = [_rank(r, keys(r % 2), [dict(d, w=f"w{r % 2}") for d in same], [r // 2, r % 2]) for r in range(4)]
    assert replica_check(ranks)["first_step"] is None and replica_check(ranks)["compared"] == 4
    # rank 3's unsharded b parts from step 1; rank 2's buffer from step 1 too
    ranks[3].replica["digests"] = [same[0] | {"w": "w1"}, same[0] | {"w": "w1", "b": "x"}, same[0] | {"w": "w1", "b": "x"}]
    ranks[2].replica["digests"] = [same[0] | {"w": "w0"}] + [same[0] | {"w": "w0", "buffer:bn.running_mean": "y"}] * 2
    found = replica_check(ranks)
    assert found["first_step"] == 1 and found["pairs"] == [[0, 2], [0, 3]]
    assert {(t["name"], tuple(t["ranks"])) for t in found["tensors"]} == {("b", (0, 3)),
                                                                          ("buffer:bn.running_mean", (0, 2))}
    reason = replica_reason(found)
    assert reason.startswith("replicas disagree from step 1: ")
    assert "rank 0 (r x s [0, 0]) and rank 3 (r x s [1, 1]) hold the same b but different values" in reason
    assert "hold the same buffer bn.running_mean but different values" in reason
    # sharded data: each rank's statistics are its shard's, buffers are left out
    assert {t["name"] for t in replica_check(ranks, buffers=False)["tensors"]} == {"b"}
    ranks[3].replica["digests"][1]["w"] = "z"  # shard 1 of w: ranks 1 and 3
    assert ("w", [1, 3]) in [(t["name"], t["ranks"]) for t in replica_check(ranks)["tensors"]]
    assert "dim-0 shard 1 of 2" in replica_reason(replica_check(ranks))


POLICY = [{"param_dtype": None, "reduce_dtype": None, "output_dtype": None}]


def test_precision_that_departs_from_the_policy_is_named_per_module_and_per_parameter():
    modules = [{"module": "layer0", "params": "float32", "input": "float32", "output": "float32", "grad_output": None},
               {"module": "layer1", "params": "float32", "input": "float32", "output": "float16",
                "grad_output": "float16"},
               {"module": "(model)", "params": None, "input": "float32", "output": "float16", "grad_output": None}]
    notes = precision_notes({"modules": modules, "grads": {"w": "float32", "b": "bfloat16"}}, POLICY)
    assert notes == [
        "precision departs from the policy in layer1: its output ran float16, its output's gradient ran float16, "
        "which no mp_policy field gives (the policy computes in float32), and so do (model) after it",
        "the optimizer read the gradients of b in bfloat16, expected float32 (the master weights' dtype: the reduced "
        "gradient is cast back to it)"]
    bf16 = [{"param_dtype": "bfloat16", "reduce_dtype": None, "output_dtype": None}]
    widened = [dict(m, output="float32" if m["module"] == "layer1" else "bfloat16", grad_output=None) for m in modules]
    assert precision_notes({"modules": widened}, bf16) == []  # a norm widening to float32 is no departure
    lower = {"master_lower": {"step": 3, "params": ["w"], "holds": "bfloat16"}}
    assert precision_notes(lower, POLICY) == [
        "the float32 master weights w hold only bfloat16 values after step 3: a bfloat16 copy was written back into "
        "the master weights (each update below that precision is lost)"]
    assert precision_notes(lower, POLICY, standalone={"master_lower": {"step": 3}}) == []  # both copies: no departure


def test_master_weights_that_hold_only_lower_precision_values_are_told_apart_from_float32_ones():
    values = RNG.normal(size=64).astype(np.float32)
    assert lower_precision(values) is None
    assert lower_precision(values.astype(np.float16).astype(np.float32)) == "float16"
    import torch

    assert lower_precision(torch.from_numpy(values).bfloat16().float().numpy()) == "bfloat16"
    assert lower_precision(np.zeros(64, np.float32)) is None and lower_precision(values[:4].round()) is None


def test_the_per_step_master_check_reads_as_the_numpy_rule_on_every_kind_of_value():
    # the observer's in-place summary (_Lower) tells the common case by one test of the 13 low bits;
    # it must say what lower_precision says: float16 subnormals and large values, bfloat16, float32
    import torch

    from sweep.train.observers.dtypes import _Lower

    tiny = (RNG.normal(size=64) * 2.0 ** -20).astype(np.float16).astype(np.float32)  # float16 subnormals (few bits: bf16 too)
    big = RNG.uniform(-6e4, 6e4, size=64).astype(np.float16).astype(np.float32)  # float16 normals, large
    cases = [RNG.normal(size=64).astype(np.float32), tiny, big, big * 1e6,
             torch.from_numpy(RNG.normal(size=64).astype(np.float32)).bfloat16().float().numpy(),
             np.full(64, 0.1, np.float32), np.zeros(64, np.float32)]
    assert [lower_precision(c) for c in cases] == [None, "bfloat16", "float16", None, "bfloat16", None, None]
    for values in cases:
        assert _Lower(torch.from_numpy(values.copy())).holds == lower_precision(values), values[:4]


def test_the_optimizer_per_parameter_and_its_loss_scale_are_held_copy_against_copy():
    from sweep.report.notes import text_of

    decay = {"standalone": {"w": 0.01, "b": 0.01}, "distributed": {"w": 0.01, "b": 0.0}}
    assert [text_of(n) for n in decay_notes(decay)] == [
        "weight decay differs between the copies for b (0 against 0.01) (distributed against standalone): the "
        "optimizer decays these parameters otherwise in one copy (its param groups or decay_flags)"]
    assert decay_notes({"standalone": {"w": 0.01}, "distributed": {"w": 0.01}}) == []
    # a parameter one copy's optimizer leaves out of its param groups (a new user's filtered param list): named
    left_out = held_notes({"standalone": {"w": 0.0, "b": 0.0, "pos": 0.0}, "distributed": {"w": 0.0, "b": 0.0}})
    assert [text_of(n) for n in left_out] == [
        "the distributed copy's optimizer does not hold pos, which the standalone copy's steps: it never moves there "
        "(left out of its param groups)"]
    assert held_notes({"standalone": {"w": 0.0}, "distributed": {"w": 0.0}}) == []
    assert held_notes({"standalone": {"a.w": 0.0}, "distributed": {"w": 0.0}}) == []  # names that do not line up
    assert decay_notes({"distributed": {"w": 0.0}}) == []
    assert [n.code for n in decay_notes(decay)] == ["N121"]
    assert [text_of(n) for n in loss_scale_notes({"standalone": 1.0, "distributed": 64.0}, 1.0)] == [
        "loss scale ran 64 in the distributed copy, configured 1: the gradients the optimizer steps with are divided "
        "by it"]
    assert loss_scale_notes({"standalone": None, "distributed": None}, None) == []
    assert loss_scale_notes({"distributed": 1024.0}, 1024.0) == []


def test_no_result_field_is_left_empty_without_a_reason(compose_cfg):
    from sweep.records import JobRecord
    from sweep.run.judge import never_silent

    cfg = compose_cfg(["data.split=sharded"])
    record = JobRecord(status="ok", comparison={"passed": True, "first_diff_step": None},
                       dtypes={"observed": {"reduce": None, "master_lower": None}},
                       collectives={"calls": [], "divide_factors": None, "unchecked": "compiled graph"})
    never_silent(cfg, record)
    for field in ("reason", "rank_comparisons", "first_tensor", "first_module", "repeats", "notes",
                  "dtypes.observed.reduce", "dtypes.observed.master_lower", "collectives.divide_factors",
                  "zero_grad_effective"):
        assert record.not_observed.get(field), field
    assert record.not_observed["collectives.calls"] == "compiled graph"
    record.first_tensor = {"description": "w grad at step 0"}  # filled later (the tracing rerun): the reason goes
    never_silent(cfg, record)
    assert "first_tensor" not in record.not_observed


def test_each_ranks_own_shard_finding_is_named_where_the_ranks_gather_other_shards():
    from sweep.analysis.judging import each_ranks_shards

    mine = {"step": 1, "kind": "grad", "name": "w", "abs_diff": 0.5, "rel_diff": 0.25,
            "shards": {"of": 2, "differ": [1], "ranks": [1]}, "rank": 0, "ranks": [0, 1, 2, 3]}
    assert tensor_text(mine) == ("w grad at step 1, abs 0.5, rel 0.25; weights identical before; only dim-0 shard 1 of "
                                 "2 differs, held by rank 1")
    theirs = dict(mine, shards={"of": 2, "differ": [1], "ranks": [3]})
    found = [(mine, 0), (mine, 1), (theirs, 2), (theirs, 3)]
    merged = each_ranks_shards(mine, found)
    assert tensor_text(merged).endswith("; each rank's own finding: rank 0: held by rank 1, rank 1: held by "
                                        "rank 1, rank 2: held by rank 3, rank 3: held by rank 3")
    assert merged["shards_by_rank"]["2"] == [3]
    assert each_ranks_shards(mine, [(mine, 0), (mine, 1)]) == mine  # one finding: said once, as it was


def test_a_factor_shared_by_some_gradients_is_a_reductions_not_one_tensors():
    """Two reduction paths that scale otherwise (hyper-parallel's sharded parameters and its
    unsharded ones): the gradients of one path share the factor, which is then a reduction's,
    named, not "this tensor only"."""
    from sweep.analysis.trace import Search, first_difference

    grads = {"layer1.weight": np.ones((2, 3)), "layer1.bias": np.full(3, 2.0), "layer0.weight": np.ones((2, 2))}
    doubled = dict(grads, **{"layer1.weight": grads["layer1.weight"] * 2, "layer1.bias": grads["layer1.bias"] * 2})
    order = {"grad": ["layer1.bias", "layer1.weight", "layer0.weight"]}
    found = first_difference([{"grad": grads, "order": order}], [{"grad": doubled}], Search(known={"world_size": 2.0}))
    assert found["name"] == "layer1.bias" and found["scale_shared"] == ["layer1.weight"]
    assert "x2 = world_size: a sum where a mean was expected" in tensor_text(found)
    assert "and so are layer1.weight, not every gradient: the reduction scales some parameters otherwise" in \
        tensor_text(found)
    assert "this tensor only" not in tensor_text(found)


def test_a_missing_replicate_all_reduce_is_named_where_the_shard_dim_reduce_scatters_nothing():
    from sweep.analysis.collectives import ledger_notes

    contract = {"mesh_shape": [2, 1], "mesh_dim_names": ["dp_replicate", "dp_shard"],
                "reduce_scatter": {"dim": "dp_shard", "size": 1, "dtypes": ["float32"], "why": "policy"},
                "all_reduce": {"dim": "dp_replicate", "size": 2, "dtypes": ["float32"], "why": "policy"},
                "all_gather": None, "divide": 2, "units": 1, "grad_accum_steps": 1}
    factors = {"op": "divide_factors", "predivide": None, "postdivide": None, "factor": None, "reduce_scatter_op": "SUM",
               "all_reduce_op": "AVG", "reduce_scatter_group": [0], "all_reduce_group": [0, 1], "step": 0,
               "span": "grads", "dtype": "float32"}
    from sweep.report.notes import text_of

    notes = [text_of(n) for n in ledger_notes([factors], contract, rank=0, world_size=2)]
    assert "no all_reduce over dp_replicate in step 0: the replicas' gradients are never reduced across the " \
           "replicate dim" in notes
    done = {"op": "all_reduce", "dtype": "float32", "numel": 8, "group": [0, 1], "reduce_op": "AVG", "step": 0,
            "span": "grads", "params": ["w"]}
    assert not any(n.code == "N103" for n in ledger_notes([factors, done], contract, 0, 2))


def test_a_pair_of_replicas_that_disagree_on_several_tensors_is_said_once():
    # a new user's optimizer state reset on rank 3 under hsdp2x2: the pair (1, 3) was spelt out once per tensor
    found = {"first_step": 10, "pairs": [[1, 3]], "coords": {"1": [0, 1], "3": [1, 1]}, "mesh_dims": ["r", "s"],
             "ranks": [1, 3], "tensors": [{"name": n, "part": "dim-0 shard 1 of 2", "ranks": [1, 3]}
                                          for n in ("layer0.bias", "layer0.weight", "layer1.bias")]}
    reason = str(replica_reason(found))
    assert reason.count("rank 1 (r x s [0, 1]) and rank 3 (r x s [1, 1])") == 1, reason
    assert "hold the same layer0.bias, layer0.weight and layer1.bias (dim-0 shard 1 of 2) but different values" in reason


def test_one_gradient_alone_summed_over_the_ranks_is_named_as_its_own_reduction():
    """A hand engine that reduces each gradient apart and sums one of them (a new user's case):
    x2 = world_size on that tensor alone may be its own reduction's sum, not "no reduction's
    factor" (the MindSpore note N140 said sum for the same job); a factor no reduction makes
    stays unnamed."""
    from sweep.analysis.trace import Search, first_difference

    grads = {"layer1.bias": np.full(3, 2.0), "layer1.weight": np.ones((2, 3))}
    order = {"grad": ["layer1.bias", "layer1.weight"]}
    for factor, says in ((2.0, "x2 = world_size, this tensor only: the other gradients are not scaled alike; a sum "
                               "where a mean was expected in its own reduction, or a factor on it alone"),
                         (1.1, "this tensor only, the other gradients are not scaled alike: not a reduction's factor")):
        scaled = dict(grads, **{"layer1.bias": grads["layer1.bias"] * factor})
        found = first_difference([{"grad": grads, "order": order}], [{"grad": scaled}],
                                 Search(known={"world_size": 2.0}))
        assert found["name"] == "layer1.bias" and found["scale_alone"] and says in tensor_text(found), tensor_text(found)
