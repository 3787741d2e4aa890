"""Evidence of what ran, not what was configured (issue 51), on real jobs with faults planted
by test-only engines (tests/helpers/ran_faults.py, ms_ran_faults.py): the collectives as
they ran (the op, the parameters carried, the groups crossed), the replicas tensor by
tensor, the precision per module and in the master weights, the optimizer per parameter,
zero_grad, the lr's cause, the gradient norms per step, and two frameworks compared under
one name map; correct models on both frameworks name nothing, and no result field is left
empty without a reason. One multirun of named cases per framework (the fast path)."""

import pytest

from tests.conftest import case_jobs
from tests.helpers.hyper_parallel import INSTALLED as HP, SKIP_REASON, needs_hyper_parallel

hp_only = pytest.mark.skipif(not HP, reason=SKIP_REASON)

pytestmark = pytest.mark.slow

T = "engine.impl.torch=tests.helpers.ran_faults."
M = "engine.impl.mindspore=tests.helpers.ms_ran_faults."
BN = ["model._target_=tests.helpers.batchnorm_model.bn_mlp", "train.batch_size=8"]
DROPOUT_BN = ["model._target_=tests.helpers.dropout_model.dropout_bn_mlp", "train.batch_size=8"]

TORCH = {
    "backend_max": [T + "BackendMaxFSDP2", "data.split=sharded"],
    "unreduced": [T + "UnreducedBiasFSDP2", "data.split=sharded"],
    "replicate_off": [T + "ReplicateOffHSDP", "mesh=hsdp2x2", "mesh.mesh_shape=[2,1]", "data.split=sharded"],
    "ddp_ignored": ["engine=data_parallel", T + "IgnoredWeightDDP", "data.split=sharded"],
    "hp_sum": ["engine=hyper_parallel", T + "SumOpHPTorch", "reshard_after_forward=false"],
    "replica": [T + "SkewedReplicaHSDP", "mesh=hsdp2x2"],
    "hand_twice": [T + "HandReplicateTwiceHSDP", "mesh=hsdp2x2", "data.split=sharded"],
    "hand_clip_first": [T + "HandReplicateHSDP", "mesh=hsdp2x2", "data.split=sharded", "train.clip_grad_norm=0.05"],
    "stats": [T + "SkewedStatsFSDP2"] + BN,
    "frozen_stats": [T + "FrozenStatsFSDP2"] + BN,
    "autocast": [T + "AutocastHeadFSDP2"],
    "half_master": [T + "HalfMasterFSDP2"],
    "no_decay": [T + "NoDecayBiasFSDP2", "optimizer=adamw", "optimizer.weight_decay=0.01"],
    "stuck": [T + "StuckGradsFSDP2"],
    "frozen_lr": [T + "FrozenLrFSDP2", "train.lr_scheduler=cosine"],
    "logging_clip": [T + "LoggingClipFSDP2"],
    "clean": [],
    "clean_clip": ["train.clip_grad_norm=0.05"],  # clipping writes FSDP2's gradients in place (no version bump)
    "clean_dropout_bn": DROPOUT_BN,
    "clean_bf16_sharded": ["mp_policy=bf16", "data.split=sharded"],
    "clean_hsdp": ["mesh=hsdp2x2", "data.split=sharded"],
    "clean_hand_hsdp": [T + "HandReplicateHSDP", "mesh=hsdp2x2", "data.split=sharded"],
    "clean_hand_flat": [T + "HandReplicateFlatHSDP", "mesh=hsdp2x2", "data.split=sharded"],
    "clean_hand_clip": [T + "HandReplicateInClipHSDP", "mesh=hsdp2x2", "data.split=sharded",
                        "train.clip_grad_norm=0.05"],
    "clean_ddp": ["engine=data_parallel", "data.split=sharded"],
    "clean_hp": ["engine=hyper_parallel", "reshard_after_forward=false"],
}
MINDSPORE = {
    "double_degree": ["engine=data_parallel", M + "DoubleDegreeDP", "data.split=sharded"],
    "clip_first": ["engine=data_parallel", M + "ClipFirstDP", "train.clip_grad_norm=0.05", "data.split=sharded"],
    "half_head": ["engine=data_parallel", M + "HalfHeadDP"],
    "loss_scale": ["engine=data_parallel", M + "ScaledLossDP"],
    "decay_flags": ["engine=data_parallel", M + "NoDecayWeightDP", "optimizer.weight_decay=0.01"],
    "halved_read": ["engine=data_parallel", M + "HalvedReadDP"],
    "half_master": ["engine=data_parallel", M + "HalfMasterDP"],
    "stats": ["engine=data_parallel", M + "SkewedStatsDP"] + BN,
    "hp_no_replica": ["engine=hyper_parallel", M + "NoReplicaReduceHP", "mesh=hsdp2x2", "data.split=sharded"],
    "hp_replica": ["engine=hyper_parallel", M + "SkewedReplicaHP", "mesh=hsdp2x2"],
    "hp_stats": ["engine=hyper_parallel"] + DROPOUT_BN,
    "clean": ["engine=data_parallel"] + DROPOUT_BN,
    "clean_hp": ["engine=hyper_parallel", "mesh=hsdp2x2", "data.split=sharded"],
}
if not HP:  # its cases are left out of the multiruns, and the tests of them skip with the reason
    TORCH = {name: case for name, case in TORCH.items() if "engine=hyper_parallel" not in case}
    MINDSPORE = {name: case for name, case in MINDSPORE.items() if "engine=hyper_parallel" not in case}
ACROSS = {
    "ms_momentum": ["framework=mindspore", "engine=data_parallel", M + "PortedMomentumDP", "baseline.framework=torch"],
    "ms_eps": ["framework=mindspore", "engine=data_parallel", M + "PortedEpsDP", "baseline.framework=torch"],
    "torch_momentum": [T + "PortedMomentumFSDP2", "baseline.framework=mindspore"],
    "ms_clean": ["framework=mindspore", "engine=data_parallel", "baseline.framework=torch"],
    "torch_clean": ["baseline.framework=mindspore"],
}


def _named(found):
    return {name: record for name, (record, _) in found.items()}


@pytest.fixture(scope="module")
def torch_jobs(tmp_path_factory):
    found, _ = case_jobs(tmp_path_factory.mktemp("ran_torch"), TORCH, "steps=6", "optimizer=sgd")
    return _named(found)


@pytest.fixture(scope="module")
def ms_jobs(tmp_path_factory):
    pytest.importorskip("mindspore")
    found, _ = case_jobs(tmp_path_factory.mktemp("ran_ms"), MINDSPORE, "framework=mindspore", "steps=6",
                         "optimizer=sgd")
    return _named(found)


@pytest.fixture(scope="module")
def across_jobs(tmp_path_factory):
    pytest.importorskip("mindspore")
    found, _ = case_jobs(tmp_path_factory.mktemp("ran_across"), ACROSS, "model=mlp_norm", "steps=6")
    return _named(found)


def _note(record, start):
    found = [n for n in record["notes"] if n.startswith(start)]
    assert found, record["notes"]
    return found[0]


# --- collectives as they ran ---------------------------------------------------------------

def test_an_op_that_ran_otherwise_than_it_was_called_is_named_with_the_call_and_the_parameters(torch_jobs):
    record = torch_jobs["backend_max"]
    assert record["status"] == "fail", record["reason"]
    note = _note(record, "the gradient reduction of step 0 ran the max over the ranks, not their mean for ")
    assert "layer0.weight" in note and "layer1.bias" in note
    assert note.endswith("(carried by reduce_scatter_single over dp (reduce_op AVG))")  # called AVG, ran max
    assert record["first_tensor"]["step"] == 0 and record["first_tensor"]["kind"] == "grad"
    # sharded data: nothing is compared before the reduction, so the reduction check of that step says where
    assert any("the gradient norm departs at step 0 after the reduction" in n and "arises in the reduction (it ran "
               "another op than the mean, above)" in n for n in record["notes"])


def test_a_parameter_no_reduction_carries_is_named_with_its_share_of_the_elements(torch_jobs, ms_jobs):
    record = torch_jobs["unreduced"]
    assert "layer1.bias was carried by no gradient reduction in step 0 (the reductions carried 3,648 of the 3,672 " \
           "gradient elements)" in " ".join(record["notes"]), record["notes"]
    assert _note(record, "the gradient reduction of step 0 ran no reduction: each rank keeps its own gradient for "
                         "layer1.bias (24 of 3,672")
    # unsharded on a sharded mesh: its replicas on every rank are compared, and part
    assert record["status"] == "fail" and record["replicas"]["first_step"] == 0
    assert {t["name"] for t in record["replicas"]["tensors"]} == {"layer1.bias"}
    ddp = torch_jobs["ddp_ignored"]
    assert _note(ddp, "layer0.weight is not among the parameters the engine's reducer carries (DDP's "
                      "parameters_to_ignore)")
    assert _note(ddp, "the gradient reduction of step 0 ran no reduction: each rank keeps its own gradient for "
                      "layer0.weight")


def test_a_replicate_reduction_that_never_runs_is_named_where_the_shard_dim_has_one_rank(torch_jobs):
    record = torch_jobs["replicate_off"]
    assert record["status"] == "fail"
    assert "no all_reduce over dp_replicate in step 0: the replicas' gradients are never reduced across the " \
           "replicate dim" in record["notes"], record["notes"]
    # the partial sum FSDP2 keeps for the all-reduce that never comes: no gradient reaches the parameters
    assert _note(record, "the gradient reduction of step 0 ran nothing: no gradient reached these parameters after it")
    assert _note(record, "the gradient norm departs at step 0 after the reduction: distributed 0, ")
    assert record["replicas"]["first_step"] is None  # (no gradient, no update: the replicas stay equal)


def test_a_replicate_dim_reduced_by_hand_is_judged_by_the_gradients_its_calls_carried(torch_jobs):
    """``fully_shard`` over the shard sub-mesh and the replicate dim all-reduced by hand before
    stepping: each call is given a gradient itself, so the ledger names its parameter. Done once
    it is correct (``clean_hand_hsdp`` names nothing: no "never across dp_replicate", no
    "reduced across the replicas more than once"), and so is one of a flat buffer of every
    gradient (its call names none: nothing is said of what it may have carried) or one made
    in ``clip_grad_norm``; their gradients are traced as the optimizer read them, within
    rounding. Done twice it is named as twice, and the gradient norm departs x2 where the
    optimizer read it. Clipped before the hand reduction (in the optimizer step), the order is
    named from the calls (N146), where a reduction in ``clip_grad_norm`` before the norm names none."""
    record = torch_jobs["hand_twice"]
    assert record["status"] == "fail"
    _note(record, "layer0.bias, layer0.weight, layer1.bias, layer1.weight were reduced more than once over "
                  "dp_replicate in step 0")
    # the norms after the backward are not the reduced ones here: the departure is where the optimizer read them
    norm = _note(record, "the gradient norm departs at step 0 as the optimizer read them")
    assert "(x2; " in norm and "in the engine's own reductions in its clipping or optimizer step" in norm
    for name in ("clean_hand_hsdp", "clean_hand_flat", "clean_hand_clip"):  # (their notes: the clean models' test)
        first = torch_jobs[name]["first_tensor"]  # traced as the optimizer read them: within rounding
        assert first.get("beyond_rounding") is None and first["rel_diff"] <= first["bound"], (name, first)
    assert not any("never across" in n or "all_reduce calls over" in n or "ran the mean over dp_shard only" in n
                   for n in record["notes"]), record["notes"]
    late = _note(torch_jobs["hand_clip_first"], "train.clip_grad_norm=0.05 clipped the gradients of step 0 before the "
                                                "engine reduced them by hand")
    assert "over dp_replicate in its optimizer step" in late, late
    assert not any("before the engine reduced" in n for n in torch_jobs["clean_hand_clip"]["notes"])


@pytest.mark.hyper_parallel
@hp_only
def test_a_sum_on_the_hyper_parallel_torch_path_is_named_by_factor(torch_jobs):
    hp = torch_jobs["hp_sum"]
    note = _note(hp, "the gradient reduction of step 0 ran a sum over the ranks, not their mean")
    assert "x2 = world_size: a sum where a mean was expected" in note and "reduce_scatter_tensor over dp" in note


def test_a_scale_inside_a_compiled_graph_is_named_by_factor(ms_jobs):
    graph = ms_jobs["double_degree"]
    note = _note(graph, "the gradient reduction of step 0 ran x0.5 the mean over the ranks")
    assert "x0.5 = 1/world_size: divided by world_size twice" in note
    assert "its calls not seen: nn.DistributedGradReducer all-reduces inside a compiled graph" in note
    assert graph["not_observed"]["collectives.calls"].startswith("nn.DistributedGradReducer all-reduces inside a "
                                                                 "compiled graph")


@pytest.mark.hyper_parallel
@hp_only
def test_a_replicate_reduction_that_never_runs_on_hyper_parallel_mindspore_is_named_per_dim(ms_jobs):
    record = ms_jobs["hp_no_replica"]
    assert record["status"] == "fail"
    assert _note(record, "layer0.weight, layer0.bias, layer1.weight, layer1.bias were reduced over dp_shard but never "
                         "across dp_replicate in step 0")
    assert _note(record, "the gradient reduction of step 0 ran x0.5 the mean over dp_shard")
    assert "replicas disagree from step 0: rank 0 (dp_replicate x dp_shard [0, 0]) and rank 2 (dp_replicate x " \
           "dp_shard [1, 0]) hold the same " in record["reason"]


def test_clipping_before_the_reduction_is_named_on_mindspore(ms_jobs):
    assert _note(ms_jobs["clip_first"], "the gradient reduction of step 0 ran a mean of gradients each rank had clipped "
                                        "by its own norm first: clipping ran before the reduction")


# --- replicas by shard ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["replica", pytest.param("hp_replica", marks=needs_hyper_parallel)])
def test_replicas_of_a_shard_that_part_name_each_ranks_own_tensor_and_shard(torch_jobs, ms_jobs, name):
    for record in ([torch_jobs[name]] if name in TORCH else [ms_jobs[name]]):
        assert record["status"] == "fail"
        replicas = record["replicas"]
        assert replicas["first_step"] == 1 and replicas["pairs"] == [[0, 2], [1, 3]]
        assert {(t["name"], t["part"], tuple(t["ranks"])) for t in replicas["tensors"]} == {
            ("layer0.weight", "dim-0 shard 0 of 2", (0, 2)), ("layer0.weight", "dim-0 shard 1 of 2", (1, 3))}
        assert "rank 1 (dp_replicate x dp_shard [0, 1]) and rank 3 (dp_replicate x dp_shard [1, 1]) hold the same " \
               "layer0.weight (dim-0 shard 1 of 2) but different values" in record["reason"]


def test_buffers_every_rank_holds_are_replicas_on_both_frameworks(torch_jobs, ms_jobs):
    for record, name in ((torch_jobs["stats"], "buffer:bn.running_mean"), (ms_jobs["stats"], "buffer:bn.moving_mean")):
        assert record["status"] == "fail", record["reason"]
        assert name in {t["name"] for t in record["replicas"]["tensors"]}, record["replicas"]
        assert "a statistic the forward updates on each rank alike with replicated data" in record["reason"]


@pytest.mark.parametrize("name", ["frozen_stats", pytest.param("hp_stats", marks=needs_hyper_parallel)])
def test_a_statistic_that_never_moves_in_the_distributed_copy_is_named_frozen_and_how_it_is_held(
        torch_jobs, ms_jobs, name):
    # every loss agrees; the distributed copy's running mean ends where it started. On hyper-parallel's
    # MindSpore hsdp the moving statistics are parameters it shards: the forward updates the gathered copy
    # and resharding drops it (a real behaviour of the engine, no fault planted)
    record = torch_jobs[name] if name in TORCH else ms_jobs[name]
    buffer = "bn.running_mean" if name in TORCH else "bn.moving_mean"
    assert record["status"] == "fail", record["reason"]
    assert record["comparison"]["first_diff_step"] is None, record["comparison"]
    assert f"the copies end apart: rank 0: buffer {buffer} after the last step (5)" in record["reason"]
    assert "the distributed copy's never moved from its value before step 0" in record["reason"]
    held = "this rank holds it as shard 0 of 2 along dim 0: the engine shards it as a parameter"
    assert (held in record["reason"]) == (name == "hp_stats"), record["reason"]


# --- precision as it ran -------------------------------------------------------------------

def test_a_module_that_computes_below_the_policy_is_named_on_both_frameworks(torch_jobs, ms_jobs):
    for record, dtype in ((torch_jobs["autocast"], "bfloat16"), (ms_jobs["half_head"], "float16")):
        note = _note(record, "precision departs from the policy in layer1: its output ran " + dtype)
        assert "which no mp_policy field gives (the policy computes in float32)" in note
        assert record["dtypes"]["observed"]["output"] == dtype


def test_master_weights_holding_only_lower_precision_values_are_named_at_their_step(torch_jobs, ms_jobs):
    for record in (torch_jobs["half_master"], ms_jobs["half_master"]):
        note = _note(record, "the float32 master weights ")
        assert "hold only float16 values after step 2: a float16 copy was written back into the master weights" in note
        assert record["dtypes"]["observed"]["master_lower"]["step"] == 2


# --- the optimizer and the step as they ran -------------------------------------------------

def test_weight_decay_per_parameter_and_the_loss_scale_are_named(torch_jobs, ms_jobs):
    assert _note(torch_jobs["no_decay"], "weight decay differs between the copies for layer0.bias (0 against 0.01), "
                                         "layer1.bias (0 against 0.01)")
    assert torch_jobs["no_decay"]["optimizer"]["decay"]["distributed"]["layer0.weight"] == pytest.approx(0.01)
    assert _note(ms_jobs["decay_flags"], "weight decay differs between the copies for layer0.weight (0 against 0.01)")
    record = ms_jobs["loss_scale"]
    assert record["status"] == "fail"
    assert _note(record, "loss scale ran 64 in the distributed copy, configured 1")
    assert record["optimizer"]["loss_scale"]["distributed"] == 64.0


def test_a_skipped_zero_grad_and_an_lr_that_stops_are_named_with_their_cause(torch_jobs):
    stuck = torch_jobs["stuck"]
    assert _note(stuck, "zero_grad had no effect in the distributed copy: when step 3 began its gradients still held "
                        "the last step's")
    assert stuck["zero_grad_effective"] is False and torch_jobs["clean"]["zero_grad_effective"] is True
    lr = _note(torch_jobs["frozen_lr"], "lr differs from step 3:")
    assert "the distributed copy's lr stops moving while the standalone one's follows its schedule: its scheduler " \
           "does not step" in lr


# --- gradient norms per step ---------------------------------------------------------------

def test_a_fault_that_moves_the_gradient_norm_before_the_loss_is_named_at_its_step(torch_jobs, ms_jobs):
    for record, step in ((torch_jobs["logging_clip"], 3), (ms_jobs["halved_read"], 2)):
        note = _note(record, f"the gradient norm departs at step {step} as the optimizer read them (equal after the "
                             "reduction)")
        assert "arises between the reduction and the optimizer step" in note and "before the losses show it" in note
        norms = record["reductions"]
        assert len(norms["standalone"]["read"]) == 6 and set(norms["distributed"]) == {"0", "1"}


# --- across frameworks ---------------------------------------------------------------------

def test_two_frameworks_are_compared_under_one_name_map_first_module_tensor_and_end_buffers(across_jobs):
    for name in ("ms_momentum", "torch_momentum"):
        record = across_jobs[name]
        assert record["status"] == "fail"
        assert record["first_tensor"]["name"] == "norm1.running_mean" and record["first_tensor"]["step"] == 0
        assert record["first_module"]["module"] == "norm1"
        assert "the copies end apart: rank 0: buffer norm1.running_mean after the last step" in record["reason"]
        assert _note(record, "the frameworks part in buffer norm1.running_mean after the forward of step 0")
    eps = across_jobs["ms_eps"]
    assert eps["first_module"]["module"] == "norm0" and eps["first_module"]["phase"] == "forward"
    assert eps["first_module"]["description"].startswith("norm0 forward output at step 0, inputs agree")


# --- correct models, and never silent ------------------------------------------------------

def test_correct_models_on_both_frameworks_name_nothing(torch_jobs, ms_jobs, across_jobs):
    clean = [torch_jobs[k] for k in TORCH if k.startswith("clean")] + [ms_jobs[k] for k in MINDSPORE
                                                                      if k.startswith("clean")]
    clean += [across_jobs["ms_clean"], across_jobs["torch_clean"]]
    for record in clean:
        assert record["status"] == "ok", (record["overrides"], record["reason"])
        own = [n for n in record["notes"] if not n.startswith("the standalone copy trained in ")]
        assert own == [], (record["overrides"], own)
        assert (record["collectives"] or {}).get("notes", []) == []
        assert (record["replicas"] or {}).get("first_step") is None


def test_no_field_of_a_mindspore_hyper_parallel_or_cross_framework_record_is_empty_without_a_reason(
        ms_jobs, across_jobs, torch_jobs):
    for record in list(ms_jobs.values()) + list(across_jobs.values()) + [torch_jobs[k] for k in TORCH if "hp" in k]:
        for key, value in record.items():
            if value in (None, [], {}) and key not in ("not_observed",):
                assert record["not_observed"].get(key), (record["overrides"], key)
        for key, value in ((record["dtypes"] or {}).get("observed") or {}).items():
            if value is None:
                assert record["not_observed"].get(f"dtypes.observed.{key}"), (record["overrides"], key)
