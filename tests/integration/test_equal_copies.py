"""Equal copies on real models (issue 24): real torchrun jobs, few steps. The two copies
must differ in the engine and nothing else: the same random draws, every parameter and
buffer under one name, every replica equal, and an observer that changes nothing."""

import json

import pytest

from tests.conftest import culprits_named, multirun_jobs, run_cli

pytestmark = pytest.mark.slow

DROPOUT = "model._target_=tests.helpers.dropout_model.dropout_mlp"
ENGINES = "engine.impl.torch=tests.helpers.copy_engines."


def _multirun(tmp_path, *overrides):
    jobs, _ = multirun_jobs(tmp_path, *overrides)
    return jobs, json.loads((tmp_path / "multirun" / "summary.json").read_text())


def test_dropout_draws_the_same_masks_in_both_copies_whatever_the_order_and_the_cache(tmp_path):
    runs = {}
    for wraps in ("root,per_layer", "per_layer,root"):
        for reuse in ("true", "false"):
            runs[wraps, reuse] = _multirun(tmp_path / f"{wraps.replace(',', '_')}-{reuse}", DROPOUT, "steps=12",
                                           f"wrap={wraps}", f"execution.reuse_baselines={reuse}")
    for (wraps, reuse), (jobs, _) in runs.items():
        assert [r["status"] for r in jobs.values()] == ["ok", "ok"], {n: r["reason"] for n, r in jobs.items()}
        for r in jobs.values():
            assert r["random_draws"] is True  # the forward did draw: the test tests something
            assert all(c["max_abs_diff"] == 0.0 for c in r["rank_comparisons"])  # every rank, bit for bit
            assert r["losses"]["standalone"] == r["losses"]["distributed"]
        # with the cache, the second job's standalone copy was not trained in its own launch
        assert (jobs[1]["baseline"] or {}).get("source") == ("cache" if reuse == "true" else None)
    verdicts = {summary["verdict"] for _, summary in runs.values()}
    assert len(verdicts) == 1 and not any(culprits_named(summary) for _, summary in runs.values())
    by_wrap = {}
    for (wraps, _), (jobs, _) in runs.items():
        for r in jobs.values():
            by_wrap.setdefault(r["config"]["wrap"], []).append(r["losses"])
    assert all(all(losses == group[0] for losses in group) for group in by_wrap.values())


@pytest.mark.exhaustive
def test_dropout_on_sharded_data_is_noted_and_makes_no_culprit(tmp_path):
    jobs, summary = _multirun(tmp_path, DROPOUT, "steps=10", "data.split=replicated,sharded")
    replicated, sharded = jobs[0], jobs[1]
    assert replicated["status"] == "ok" and replicated["random_draws"] is True
    assert not any("draws random numbers" in n for n in replicated["notes"])
    assert sharded["random_draws"] is True
    note = ("the forward draws random numbers (dropout?): with data.split=sharded the copies' masks differ, so "
            "their losses cannot match, and no culprit follows from this alone")
    assert note in sharded["notes"]
    assert note in summary["verdict"] and "Culprit:" not in summary["verdict"]


@pytest.mark.exhaustive
def test_an_unsharded_root_is_observed_without_being_changed(tmp_path):
    # FSDP2's root left unsharded by a forward in parallelize: a snapshot that viewed its
    # storage from numpy made the next reshard raise (both jobs were errors before host_copy).
    jobs, _ = _multirun(tmp_path, ENGINES + "UnshardedRootFSDP2", "steps=8",
                        "order=standalone_first,distributed_first", "execution.reuse_baselines=false")
    first, second = jobs[0], jobs[1]
    assert first["status"] == second["status"] == "fail", (first["reason"], second["reason"])
    for r in (first, second):  # the tracing rerun ran and named a tensor
        assert "step" in r["first_tensor"], r["first_tensor"]
    # standalone_first snapshots the distributed copy before and after the standalone one
    # trains; distributed_first does not: the same losses, bit for bit
    assert first["weights_moved"] and not second["weights_moved"].get("standalone_during_distributed")
    assert first["losses"] == second["losses"]
    for n, r in jobs.items():  # and with every tensor traced: the same losses again
        traced = json.loads((tmp_path / "multirun" / str(n) / "trace" / "ranks" / "rank_0.json").read_text())
        steps = len(traced["distributed"])
        assert steps >= 2
        assert traced["distributed"] == r["losses"]["distributed"][:steps]
        assert traced["standalone"] == r["losses"]["standalone"][:steps]


@pytest.mark.exhaustive
def test_a_changed_buffer_and_an_extra_parameter_are_named(tmp_path):
    names = ",".join(f"{ENGINES[len('engine.impl.torch='):]}{e}" for e in ("ExtraParamFSDP2", "ShardShiftFSDP2"))
    jobs, summary = _multirun(tmp_path, "model=mlp_norm", "steps=8", f"{ENGINES}BufferShiftFSDP2,{names}")
    shifted, extra, shard = jobs[0], jobs[1], jobs[2]
    # one element of one rank's shard: the initial check compares shard by shard, then gathers to name it
    assert shard["status"] == "fail" and "the copies do not start equal" in shard["reason"]
    assert "layer1.weight initial weights (before any step), abs 0.001" in shard["reason"]
    assert (shard["first_tensor"]["kind"], shard["first_tensor"]["name"]) == ("initial", "layer1.weight")
    # BatchNorm in training mode normalises by the batch: the losses do not show the stale buffer
    assert shifted["comparison"]["passed"] and shifted["status"] == "fail"
    assert "the copies do not start equal: rank 1: buffer norm1.running_mean initial value" in shifted["reason"]
    tensor = shifted["first_tensor"]
    assert (tensor["kind"], tensor["name"], tensor["rank"], tensor["ranks"]) == \
        ("initial_buffer", "norm1.running_mean", 1, [1])
    assert extra["status"] == "ok" and extra["losses"]["standalone"] == extra["losses"]["distributed"]
    assert any("only the distributed copy has the parameter extra" in n for n in extra["notes"])
    assert "only the distributed copy has the parameter extra" in summary["verdict"]


def test_every_replica_of_a_shard_is_compared(tmp_path):
    jobs, summary = _multirun(tmp_path, "world_size=4", "mesh=hsdp2x2", "data.split=sharded", "steps=8",
                        "engine.impl.torch=sweep.engines.torch_fsdp2.TorchFSDP2,"
                        "tests.helpers.copy_engines.NoReplicaReduceHSDP")
    correct, unreduced = jobs[0], jobs[1]
    assert correct["status"] == "ok", correct["reason"]
    assert correct["replicas"]["groups"] == [[0, 2], [1, 3]] and correct["replicas"]["first_step"] is None
    assert unreduced["status"] == "fail"
    assert ("replicas disagree from step 0: rank 0 (dp_replicate x dp_shard [0, 0]) and rank 2 "
            "(dp_replicate x dp_shard [1, 0])") in unreduced["reason"]
    assert unreduced["replicas"]["pairs"] == [[0, 2], [1, 3]]
    # and beyond the job's reason: a finding of its own (V150) and summary.md's table (issue 38)
    replicas = [f["sentence"] for f in summary["findings"] if f["code"] == "V150"]
    assert replicas and replicas[0].startswith(
        "Replicas disagree in job 1 (job 1: replicas disagree from step 0 (ranks 0 and 2, ranks 1 and 3))"), replicas
    assert replicas[0] in summary["verdict"]
    table = (tmp_path / "multirun" / "summary.md").read_text()
    assert "replicas disagree from step 0 (ranks 0 and 2, ranks 1 and 3)" in table


@pytest.mark.exhaustive
def test_a_wrapper_that_renames_every_parameter_changes_nothing_and_misses_nothing(tmp_path):
    proc = run_cli(["steps=6", "model=mlp_norm", "train.batch_size=4", ENGINES + "CheckpointWrappedFSDP2"], tmp_path)
    r = json.loads((tmp_path / "run" / "result.json").read_text())
    assert r["comparison"]["max_abs_diff"] == 0.0  # every loss equal
    assert not any("only the" in note for note in r["notes"]), r["notes"]  # no tensor is missing under its new name
    # the recomputed forward updates mlp_norm's BatchNorm statistics a second time, in this copy
    # only: found by name (wrapper segments dropped) after the last step
    assert proc.returncode == 1 and r["status"] == "fail"
    assert r["reason"].startswith("the copies end apart: rank 0: buffer norm1."), r["reason"]


@pytest.mark.exhaustive
def test_a_fault_on_one_replica_is_named_on_its_ranks_not_hidden_behind_another_ranks_rounding(tmp_path):
    proc = run_cli(["steps=8", "optimizer=sgd", "mesh=hsdp2x2", "data.split=sharded", "train.batch_size=4",
                    ENGINES + "Replica1GradScaleHSDP"], tmp_path)
    r = json.loads((tmp_path / "run" / "result.json").read_text())
    assert proc.returncode == 1 and r["status"] == "fail" and "replicas disagree from step 0" in r["reason"]
    t = r["first_tensor"]
    real = t.get("beyond_rounding") or t
    # the faulty replica's ranks, beyond the rounding envelope: the weight its scaled gradient updated
    assert t["rank"] in (2, 3) and real["kind"] == "weight" and real["step"] == 0, t
    assert real["rel_diff"] > real["bound"], t


def test_a_single_run_says_where_the_copies_part_and_names_shared_storage(tmp_path):
    proc = run_cli(["weights.transfer=shared", "engine=data_parallel", "steps=5", "compare.trace_after=0"], tmp_path)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    status = next(i for i, line in enumerate(lines) if line.startswith("[   fail]"))
    # the run's findings, indented 2 (a wrapped job line's own continuation is indented 10)
    headline = [line.strip() for line in lines[status + 1:] if line.startswith("  ") and line[2] != " "]
    assert headline[0].startswith("the copies part at step 0: step0")
    assert any(line.startswith("note: the copies share storage (weights.transfer=shared): the distributed copy's "
                               "weights moved by") for line in headline), headline
    r = json.loads((tmp_path / "run" / "result.json").read_text())
    assert any("share storage" in note for note in r["notes"])


def test_a_forward_that_changes_its_input_in_place_changes_no_other_copys_data(tmp_path):
    """A new user's model halves its input in place (``x.mul_(0.5)``): each copy, the twin and
    the probe get their own tensors, so the copies stay bit-equal and the rounding envelope is
    float32's, not the 5% of the loss that data halved once more made it (it was called rounding
    with rtol = atol = 2e-01 'would hold'; on CPU ``.to(device)`` of a ``from_numpy`` tensor copies
    nothing)."""
    jobs, summary = _multirun(tmp_path, "model._target_=tests.helpers.own_models.input_in_place", "steps=6",
                              "order=standalone_first,distributed_first")
    assert [r["status"] for r in jobs.values()] == ["ok", "ok"], {n: r["reason"] for n, r in jobs.items()}
    for r in jobs.values():
        assert all(c["max_abs_diff"] == 0.0 for c in r["rank_comparisons"])
        assert r["envelope"]["measured"] and r["envelope"]["loss"]["ratio"] is not None
        assert r["envelope"]["loss"]["band"] < 1e-4 * max(r["losses"]["standalone"]), r["envelope"]["loss"]
    assert not culprits_named(summary)


def test_a_buffer_in_no_state_dict_is_the_same_in_both_copies(tmp_path):
    """A new user's model draws a random projection buffer at construction with
    ``persistent=False``: ``load_state_dict`` does not carry it, so the standalone copy drew
    its own and the job failed from step 0 naming ``proj``, a difference of this tool's making
    (one training run has one model). Every way of giving the weights carries it now."""
    jobs, summary = _multirun(tmp_path, "model._target_=tests.helpers.own_models.random_projection", "steps=4",
                              "weights.transfer=independent,checkpoint")
    assert [r["status"] for r in jobs.values()] == ["ok", "ok"], {n: r["reason"] for n, r in jobs.items()}
    for r in jobs.values():
        assert all(c["max_abs_diff"] == 0.0 for c in r["rank_comparisons"])
    assert not culprits_named(summary)


def test_the_standalone_copy_trains_as_on_one_device_beside_the_ranks(tmp_path):
    """A new user's model all-reduces its batch mean where ``torch.distributed.is_initialized()``
    (a hand-written SyncBatchNorm). Trained beside the ranks, the standalone copy's forward
    all-reduced with the twin's on the last rank, so its losses changed with ``order``; it now
    sees one device, as in the standalone process of ``order=separate`` (a world of one). A model
    that calls the collective without asking is named (N193)."""
    model = "model._target_=tests.helpers.own_models.synced_centre"
    jobs, summary = _multirun(tmp_path / "ask", model, "steps=4", "data.split=sharded",
                              "order=standalone_first,separate")
    # (the distributed copy's gradient misses the all-reduce's part: no autograd through it; both orders alike)
    assert jobs[0]["status"] == jobs[1]["status"] and jobs[0]["losses"] == jobs[1]["losses"]
    assert not any("collectives in the standalone copy" in n for r in jobs.values() for n in r["notes"])
    jobs, summary = _multirun(tmp_path / "always", model, "+model.args.ask=false", "steps=3", "data.split=sharded",
                              "order=standalone_first")
    record = jobs[0]
    assert record["features"]["stray_collectives"] == {"standalone": {"all_reduce": 3}}  # rank 0's
    assert any(n.startswith("collectives in the standalone copy: the model called torch.distributed.all_reduce in "
                            "the steps of the standalone copy and its twin (6 calls)") for n in record["notes"]), \
        record["notes"]
    assert "Note: collectives in the standalone copy (N193) (1 job)." in summary["verdict"]
    # the one-rank FSDP2 group the twin trains on under a policy: its ShardedGradScaler all-reduces the inf check over
    # itself alone, which is no collective of the model's (a new user's false N193 on every scaler + bf16 run)
    jobs, _ = _multirun(tmp_path / "scaler", "steps=3", "mp_policy=bf16", "train.grad_scaler.enabled=true")
    assert not jobs[0]["features"].get("stray_collectives"), jobs[0]["features"]
    assert not any("collectives in the standalone copy" in n for n in jobs[0]["notes"]), jobs[0]["notes"]


@pytest.mark.parametrize("framework", ["torch", "mindspore"])
def test_a_forward_that_moves_its_own_statistic_keeps_the_baseline(tmp_path, framework):
    """A new user's model keeps a running mean that its forward moves in every mode (a buffer
    moved in place; MindSpore: ``ops.assign`` of a ``Parameter(requires_grad=False)``) and its
    loss reads it. The twin's probe, a forward of the standalone copy before training, moved it
    once more: the standalone copy's losses differed from step 0 (1e-2 in float32) and the job
    was called float rounding, the twin (built before the probe) agreeing with the distributed
    copy. The probe now puts back what the forward wrote."""
    extra = ["framework=mindspore", "engine=data_parallel"] if framework == "mindspore" else []
    jobs, summary = _multirun(tmp_path, "model._target_=tests.helpers.own_models.hand_running_mean", "steps=3",
                              "order=standalone_first,distributed_first", *extra)
    assert [r["status"] for r in jobs.values()] == ["ok", "ok"], {n: r["reason"] for n, r in jobs.items()}
    assert jobs[0]["losses"]["standalone"] == jobs[0]["losses"]["distributed"] == jobs[1]["losses"]["standalone"]
    assert not culprits_named(summary)


def test_a_rank_whose_standalone_copy_computes_otherwise_is_left_out_of_the_trace(tmp_path):
    """A model that reads its rank (1e-3 more on rank 1): in the tracing rerun every rank trains the
    standalone copy, and rank 1's then matched its distributed copy at step 0, so the trace named a
    later module on every rank as the first place. Rank 1's standalone losses are not the baseline's:
    its trace is left out and the job says so (N194)."""
    jobs, summary = _multirun(tmp_path, "model._target_=tests.helpers.own_models.rank_offset", "steps=4")
    record = jobs[0]
    assert record["status"] == "fail"
    assert any(n.startswith("standalone copy unlike on a rank: in the tracing rerun the standalone copy on rank 1 "
                            "gave other losses than the baseline from step 0") for n in record["notes"]), record["notes"]
    assert record["first_tensor"]["ranks"] == [0] and record["first_module"].get("ranks", [0]) == [0]
