"""Real sweeps with a fault planted through a test-only engine, one kind each (issue 15):
the report names the first differing tensor and step, the onset, and the verdict states
the right conclusion. Faults: ``tests/helpers/planted_divergence.py``. Each sweep is two
small jobs (a correct level and a faulty one) in one shared launch."""

import json

import pytest

from tests.conftest import culprits_named, finding_codes, run_cli
from tests.helpers import planted_divergence as planted

pytestmark = pytest.mark.slow

P = "tests.helpers.planted_divergence."
FSDP2 = "sweep.engines.torch_fsdp2.TorchFSDP2"


def _sweep(tmp_path, *overrides):
    proc = run_cli(["-m", "ablation=none", *overrides], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep_dir = tmp_path / "multirun"
    summary = json.loads((sweep_dir / "summary.json").read_text())
    records = {j["job"]: json.loads((sweep_dir / str(j["job"]) / "result.json").read_text()) for j in summary["jobs"]}
    return summary, {j["job"]: j for j in summary["jobs"]}, records


def _clean(job, record):
    assert job["status"] == "ok" and job["first_diff_step"] is None and job["onset"] == "none"
    assert record["first_tensor"] is None and record["comparison"]["max_abs_diff"] == 0.0


def test_a_fault_on_one_rank_fails_the_job_with_the_ranks_disagreeing(tmp_path):
    faulty = P + "Rank1GradScaleDDP"
    summary, jobs, records = _sweep(tmp_path, "steps=12", "optimizer=sgd", "engine=data_parallel",
                                    f"engine.impl.torch=sweep.engines.data_parallel.TorchDDP,{faulty}")
    _clean(jobs[0], records[0])
    r = records[1]
    assert r["status"] == "fail" and r["judged_rank"] == 1
    assert r["reason"].startswith("rank 1: ") and "ranks disagree: rank 1 against rank 0" in r["reason"]
    assert [(c["rank"], c["passed"]) for c in r["rank_comparisons"]] == [(0, True), (1, False)]
    assert r["ranks_agree"] is False
    # rank 1 applies its doubled gradients at step 0: its weights differ after that step
    t = r["first_tensor"]
    assert (t["rank"], t["step"], t["kind"]) == (1, 0, "weight") and t["weights_identical_before"]
    assert jobs[1]["first_diff_step"] == 1 and jobs[1]["drift"] == "first_update"
    assert jobs[1]["onset"] == "abrupt" and jobs[1]["onset_from"] == "updates"
    assert jobs[1]["first_tensor"].endswith("(rank 1)")
    assert f"Culprit: engine.impl.torch={faulty}" in summary["verdict"]
    assert "first differing tensor: layer0.bias weight at step 0" in summary["verdict"]
    assert "(rank 1)" in summary["verdict"] and "ranks disagree (1 job)" in summary["verdict"]


@pytest.mark.exhaustive
def test_a_fault_in_one_ranks_shard_names_that_shard_and_rank(tmp_path):
    # every rank gathers the same full weights, so all ranks part alike; the rows that differ say whose shard
    faulty = P + "Rank1ShardGradScaleFSDP2"
    summary, jobs, records = _sweep(tmp_path, "steps=6", "optimizer=sgd", "mesh=dp2",
                                    f"engine.impl.torch={FSDP2},{faulty}")
    _clean(jobs[0], records[0])
    t = records[1]["first_tensor"]
    assert (t["step"], t["kind"], t["shards"]) == (0, "weight", {"of": 2, "differ": [1], "ranks": [1]})
    assert jobs[1]["first_tensor"].endswith("; only dim-0 shard 1 of 2 differs, held by rank 1")
    assert "only dim-0 shard 1 of 2 differs, held by rank 1" in summary["verdict"]


@pytest.mark.exhaustive
def test_a_fault_from_a_later_step_is_an_abrupt_onset_there(tmp_path):
    faulty = P + "LateGradScaleFSDP2"
    k = planted.FAULT_STEP
    summary, jobs, records = _sweep(tmp_path, "steps=12", "optimizer=sgd", f"engine.impl.torch={FSDP2},{faulty}")
    _clean(jobs[0], records[0])
    job, t = jobs[1], records[1]["first_tensor"]
    # the weights first differ after step k's update; the losses from step k + 1 on
    assert (t["step"], t["kind"]) == (k, "weight") and t["weights_identical_before"]
    assert job["first_diff_step"] == k + 1 and job["onset"] == "abrupt" and job["drift"] == "from_step"
    assert f"Culprit: engine.impl.torch={faulty}" in summary["verdict"]
    assert f"parts from standalone at step {k + 1} (job 1" in summary["verdict"]
    assert "from_step (a change from a later step on" in summary["verdict"]
    assert "an abrupt onset" in summary["verdict"]
    assert f"first differing tensor: layer0.bias weight at step {k}" in summary["verdict"]
    assert "precision" not in summary["verdict"]  # a late first failure is not called precision


@pytest.mark.exhaustive
def test_a_fault_after_float_rounding_is_classed_from_where_it_goes_beyond_rounding(tmp_path):
    # sharded data: the copies differ by summation order from step 0, the fault from step k
    faulty = P + "LateGradScaleFSDP2"
    k = planted.FAULT_STEP
    summary, jobs, records = _sweep(tmp_path, "steps=14", "optimizer=sgd", "data.split=sharded",
                                    f"engine.impl.torch={FSDP2},{faulty}")
    clean, job = jobs[0], jobs[1]
    assert clean["status"] == "ok" and clean["first_diff_step"] == 0 and clean["first_real_step"] is None
    assert clean["drift"] == "rounding"  # float rounding: within its envelope at every step
    assert job["first_diff_step"] == 0 and job["first_real_step"] == k + 1
    assert job["onset"] == "abrupt" and job["drift"] == "from_step"
    updates = records[1]["first_tensor"]["updates"]
    assert updates["first_step"] == 0 and updates["real_step"] == k and updates["events"] == [k]
    verdict = summary["verdict"]
    assert f"parts from standalone at step 0 (job 1; by float rounding, beyond it from step {k + 1}" in verdict
    assert f"first beyond its rounding envelope: layer0.bias weight at step {k}" in verdict
    assert "scales the drift" not in verdict  # against a job that differs by rounding only: no scale


@pytest.mark.exhaustive
def test_a_periodic_fault_is_periodic_with_its_period(tmp_path):
    # fresh data every step: the loss difference takes each sample's sign and size; the
    # update differences of the traced steps (compare.onset_steps) show the events
    faulty = P + "PeriodicGradScaleFSDP2"
    n = planted.PERIOD
    summary, jobs, records = _sweep(tmp_path, "steps=20", "optimizer=sgd", f"engine.impl.torch={FSDP2},{faulty}")
    _clean(jobs[0], records[0])
    job, t = jobs[1], records[1]["first_tensor"]
    assert (t["step"], t["kind"]) == (n - 1, "weight")
    assert job["first_diff_step"] == n and job["onset"] == "periodic" and job["period"] == n
    assert job["drift"] == "periodic" and summary["drift"]["periodic"] == [1] and job["onset_from"] == "updates"
    assert records[1]["first_tensor"]["updates"]["events"] == list(range(n - 1, 20, n))
    assert f"Culprit: engine.impl.torch={faulty}" in summary["verdict"]
    assert f"parts from standalone at step {n} (job 1" in summary["verdict"]
    assert f"), periodic, every {n} steps (an event every n steps" in summary["verdict"]
    assert f"first differing tensor: layer0.bias weight at step {n - 1}" in summary["verdict"]


@pytest.mark.exhaustive
def test_a_momentum_buffer_cleared_on_a_schedule_is_periodic_though_it_never_goes_away(tmp_path):
    # the update difference peaks at each clearing and decays, each peak above the last
    # cycle's but not above every later step: periodic from the change between steps
    faulty = P + "MomentumResetSGDFSDP2"
    n = planted.MOMENTUM_PERIOD
    summary, jobs, records = _sweep(tmp_path, "steps=30", "optimizer=sgd", "optimizer.momentum=0.9",
                                    f"engine.impl.torch={FSDP2},{faulty}")
    _clean(jobs[0], records[0])
    job, t = jobs[1], records[1]["first_tensor"]
    assert (t["step"], t["kind"]) == (n - 1, "weight") and t["weights_identical_before"]
    assert job["first_diff_step"] == n and job["onset"] == "periodic" and job["period"] == n
    assert records[1]["first_tensor"]["updates"]["events"] == list(range(n - 1, 30, n))
    assert f"Culprit: engine.impl.torch={faulty}" in summary["verdict"]


def test_a_gradient_scale_fault_that_adam_hides_is_exposed_by_sgd_not_caused_by_it(tmp_path):
    summary, jobs, records = _sweep(tmp_path, "steps=12", "optimizer=adam,sgd",
                                    f"engine.impl.torch={P}GradScaleFSDP2")
    adam, sgd = jobs[0], jobs[1]
    assert adam["status"] == "ok" and sgd["status"] == "fail"
    # Adam differs from standalone too, below tolerance, and beyond float rounding
    assert adam["first_diff_step"] is not None and 0 < adam["max_abs_diff"] < 1e-4
    assert "rounding envelope" in adam["first_tensor"]  # the first tensor, or the first beyond, against its envelope
    assert sgd["first_diff_step"] == 1 and sgd["drift"] == "first_update" and sgd["onset"] == "abrupt"
    # Adam's first tensors differ by rounding-sized amounts, its updates beyond it from step 0
    assert adam["first_real_step"] == 1 and adam["drift"] == "first_update"
    assert records[1]["first_tensor"]["step"] == 0 and records[1]["first_tensor"]["kind"] == "weight"
    verdict = summary["verdict"]
    assert "Exposed by, not caused by: optimizer=sgd" in verdict and "Culprit:" not in verdict
    assert [f["code"] for f in summary["findings"]][1] == "V102"
    assert "optimizer=sgd exposes it and optimizer=adam hides it below tolerance" in verdict
    assert "optimizer changes its size, it does not cause it" in verdict
    assert "first differing tensor: layer0.bias weight at step 0" in verdict
    assert summary["culprits"][0]["exposes_only"] is True


@pytest.mark.exhaustive
def test_a_precision_policy_that_does_not_apply_reaches_the_verdict(tmp_path):
    summary, jobs, records = _sweep(tmp_path, "steps=8", "optimizer=sgd", "mp_policy=fp32,bf16",
                                    f"engine.impl.torch={P}IgnorePolicyFSDP2")
    for num in (0, 1):  # bf16 ran as fp32: bit for bit, nothing to trace
        _clean(jobs[num], records[num])
    assert jobs[1]["policy_applied"] is False and jobs[0]["policy_applied"] is not False
    assert records[1]["dtypes"]["observed"]["param_forward"].endswith("float32")
    assert "policy not applied" in jobs[1]["notes"]
    assert not culprits_named(summary) and "policy not applied (1 job)" in summary["verdict"]
    # the ledger says the same from the collectives: the parameters were gathered in float32
    assert any(n.startswith("all_gather ran in float32 over dp, expected bfloat16") for n in records[1]["notes"])


@pytest.mark.exhaustive
def test_a_nondeterministic_fault_is_marked_with_the_spread_of_its_repeats(tmp_path):
    faulty = P + "NondetNoiseFSDP2"
    summary, jobs, records = _sweep(tmp_path, "steps=20", "optimizer=sgd", "repeat=2",
                                    f"engine.impl.torch={FSDP2},{faulty}")
    clean, noisy = records[0], records[1]
    # the correct engine: two launches, bit-identical
    _clean(jobs[0], clean)
    assert clean["nondeterministic"] is False and [e["status"] for e in clean["repeats"]] == ["ok", "ok"]
    assert clean["repeat_spread"]["distributed_max_abs"] == 0.0 and jobs[0]["repeats"] == "2 agree"
    # the noisy one: the launches disagree, by the spread recorded
    assert noisy["nondeterministic"] is True and len(noisy["repeats"]) == 2
    spread = noisy["repeat_spread"]
    assert spread["distributed_max_abs"] > 0.0 and spread["standalone_max_abs"] == 0.0
    assert [e["repeat"] for e in noisy["repeats"]] == [0, 1]
    assert noisy["repeats"][0]["first_fail_step"] == noisy["comparison"]["first_fail_step"]
    assert (noisy["status"] == "fail") == (noisy["repeats"][0]["status"] == "fail")
    assert (tmp_path / "multirun" / "1" / "repeats" / "1" / "ranks").is_dir()  # a launch of its own
    assert jobs[1]["nondeterministic"] is True and jobs[1]["repeats"].startswith("2 differ by")
    assert "nondeterministic: 2 repeats disagree" in jobs[1]["notes"]
    assert noisy["first_tensor"].get("step") is not None  # traced (in another launch: the note says so)
    # noise: from the launch's own update errors, or, whatever pattern one launch draws, from repeats
    # that differ from each other by as much as from standalone
    assert jobs[1]["onset"] == "noise" and jobs[1]["onset_from"] in ("updates", "repeats")
    assert spread["distributed_max_abs"] >= 0.5 * noisy["comparison"]["max_abs_diff"]
    assert [n["job"] for n in summary["nondeterministic"]] == [1]
    verdict = summary["verdict"]
    assert "Nondeterministic: job 1 (2 repeats differ by up to" in verdict
    assert "this verdict rests on it, and a rerun may judge differently" in verdict
    assert "Note: nondeterministic (1 job)." in verdict
    assert "first differing tensor (from another launch of this nondeterministic job): layer0" in verdict
    assert "random-sign noise" in verdict


def test_a_clean_sweep_names_no_culprit_and_no_divergence(tmp_path):
    summary, jobs, records = _sweep(tmp_path, "steps=8", "optimizer=adam,sgd", "mesh=dp2")
    for num, job in jobs.items():
        _clean(job, records[num])
        assert job["drift"] is None and job["notes"] is None
    assert summary["culprits"] == [] and all(v == [] for v in summary["drift"].values())
    assert summary["verdict"] == "2 jobs: 2 ok. No job fails: every job equals standalone bit for bit."
    assert finding_codes(summary) == ["V000", "V114"]


@pytest.mark.exhaustive
def test_a_fault_in_the_reduced_gradient_of_step_0_is_first_update_whatever_the_data_split(tmp_path):
    # with sharded data the losses differ by summation order from step 0: that is rounding, not the class
    summary, jobs, records = _sweep(tmp_path, "steps=8", "optimizer=sgd", "mesh=dp2", f"engine.impl.torch={P}SumReduceFSDP2",
                                    "data.split=replicated,sharded")
    for num in (0, 1):
        t = records[num]["first_tensor"]
        assert jobs[num]["status"] == "fail" and jobs[num]["drift"] == "first_update", jobs[num]
        assert jobs[num]["first_real_step"] == 1
        found = t.get("beyond_rounding") or t
        assert (found["step"], found["kind"]) == (0, "grad") and found["rel_diff"] > 0.5
    assert jobs[1]["first_diff_step"] == 0  # sharded: the step-0 losses differ, by rounding


@pytest.mark.exhaustive
def test_an_lr_that_ran_otherwise_in_one_copy_is_named_with_its_step_and_both_values(tmp_path):
    """A schedule fault whose step 0 is right (issue 38): the distributed copy steps with half
    the lr at step 3. The lrs as they ran are compared copy against copy, also where the job
    took its standalone sequence from the sweep's cache (job 1 reuses job 0's)."""
    engines = "sweep.engines.torch_fsdp2.TorchFSDP2,tests.helpers.planted_step_faults.LateHalvedLrFSDP2"
    summary, jobs, records = _sweep(tmp_path, "steps=8", "train.lr_scheduler=cosine", f"engine.impl.torch={engines}")
    clean, faulty = records[0], records[1]
    assert clean["status"] == "ok" and not any(n.startswith("lr differs") for n in clean["notes"])
    assert faulty["baseline"]["source"] == "cache"  # only one copy trained in its launch
    notes = [n for n in faulty["notes"] if n.startswith("lr differs")]
    assert len(notes) == 1 and notes[0].startswith("lr differs from step 3: distributed "), faulty["notes"]
    lrs = faulty["features"]["lr"]
    assert lrs["distributed"][3] == pytest.approx(0.5 * lrs["standalone"][3], rel=1e-6)
    assert notes[0] == (f"lr differs from step 3: distributed {lrs['distributed'][3]:.6g}, standalone "
                        f"{lrs['standalone'][3]:.6g} (at step 3 only (x0.5), equal again from step 4: the lr was "
                        "changed for that step in one copy, the schedule itself agrees)")
    assert "Note: lr changed for some steps in one copy (N123) (1 job)." in summary["verdict"]  # V154, by code


def test_an_lr_an_engine_moves_without_any_scheduler_is_named(tmp_path):
    """A new user's engine halves the lr from step 3 with no ``train.lr_scheduler`` set: the lr
    each copy's steps read is recorded with a scheduler or without (it was only with one, and
    the job said no more than "from_step")."""
    engine = "engine.impl.torch=tests.helpers.planted_step_faults.LateHalvedLrFSDP2"
    summary, jobs, records = _sweep(tmp_path, "steps=6", "optimizer=sgd", engine)
    record = records[0]
    assert record["status"] == "fail", record["reason"]
    notes = [n for n in record["notes"] if n.startswith("lr differs")]
    assert len(notes) == 1 and notes[0].startswith("lr differs from step 3: distributed 0.005, standalone 0.01"), \
        record["notes"]
    assert record["features"]["lr"]["standalone"] == [0.01] * 6


def test_weight_decay_per_parameter_is_compared_where_the_standalone_copy_came_from_the_cache(tmp_path):
    """A new user's grid named the decay setting (N120) but not the parameters decayed otherwise
    (N121), which a single run names: the job took its standalone sequence from the sweep's cache,
    which did not keep the standalone copy's decay per parameter. It does now."""
    engines = "sweep.engines.torch_fsdp2.TorchFSDP2,tests.helpers.ran_faults.NoDecayBiasFSDP2"
    summary, jobs, records = _sweep(tmp_path, "steps=3", "optimizer=adamw", "optimizer.weight_decay=0.01",
                                    f"engine.impl.torch={engines}")
    faulty = records[1]
    assert faulty["baseline"]["source"] == "cache"  # its standalone copy trained in job 0's launch
    assert any(n.startswith("weight decay differs between the copies for layer0.bias (0 against 0.01)")
               for n in faulty["notes"]), faulty["notes"]
    assert faulty["optimizer"]["decay"]["standalone"]["layer0.bias"] == pytest.approx(0.01)
    assert not any(n.startswith("weight decay differs") for n in records[0]["notes"])


@pytest.mark.exhaustive
def test_a_fault_on_one_mesh_that_adam_hides_names_the_mesh_and_says_sgd_only_exposes_it(tmp_path):
    # gradients summed over the replicas (HSDP only): Adam hides the x2 below tolerance, SGD fails
    summary, jobs, records = _sweep(tmp_path, "steps=12", "mesh=dp4,hsdp2x2", "optimizer=adam,sgd",
                                    "engine.impl.torch=tests.helpers.planted_step_faults.ReplicaSumFSDP2")
    by = {(r["config"]["mesh"]["name"], r["config"]["optimizer"]["name"]): r for r in records.values()}
    assert by[("hsdp2x2", "sgd")]["status"] == "fail" and by[("hsdp2x2", "adam")]["status"] == "ok"
    assert by[("hsdp2x2", "adam")]["comparison"]["first_diff_step"] is not None  # the drift, hidden
    headline, verdict = summary["headline"], summary["verdict"]
    assert "Culprit: mesh=hsdp2x2" in headline and "interaction" not in headline + verdict
    assert "exposed by optimizer=sgd, which optimizer=adam hides below tolerance" in headline
    assert "optimizer=sgd exposes it, it does not cause it" in verdict
    assert "Fix proven by this sweep: mesh=dp4;" in verdict  # optimizer=adam hides it: no fix


def test_with_sync_on_between_micro_batches_the_gradient_before_the_reduction_is_their_sum(tmp_path):
    """A new user's accumulation with gradient sync left on (one reduction per micro-batch): the
    rank's gradient before the reduction is the micro-batches' sum, as the standalone copy's. A
    fault after the optimizer step no longer reads as a forward or backward one (the last
    micro-batch alone was compared), and gradients dropped between the micro-batches are placed
    after the reduction, where they add up."""
    engines = ("engine.impl.torch=tests.helpers.planted_step_faults.SyncOnDecayFSDP2,"
               "tests.helpers.planted_step_faults.SyncOnDroppedMicroFSDP2")
    _, _, records = _sweep(tmp_path, "steps=6", "train.grad_accum_steps=2", "train.batch_size=4",
                             "compare.rtol=1e-6", "compare.atol=1e-6", engines)
    decayed, dropped = records[0], records[1]
    assert decayed["status"] == "fail" and dropped["status"] == "fail", (decayed["reason"], dropped["reason"])
    assert any("gradient sync is not off" in n for n in decayed["notes"]), decayed["notes"]
    assert not any(n.startswith("the gradient norm departs") for n in decayed["notes"]), decayed["notes"]
    norm = [n for n in dropped["notes"] if n.startswith("the gradient norm departs")]
    assert len(norm) == 1 and norm[0].startswith("the gradient norm departs at step 0 after the reduction (equal "
                                                 "before it)"), dropped["notes"]
    assert "where the micro-batches' reduced gradients add up" in norm[0], norm


def test_a_parameter_the_distributed_optimizer_leaves_out_is_named_for_the_job_not_one_rank(tmp_path):
    """A new user's optimizer built from a filtered parameter list: the copies' param groups
    hold other parameters (N131), said for the job (only rank 0 trains the standalone copy, so
    only it compares the copies: not "(rank 0)", as if rank 1 had found otherwise)."""
    engine = "engine.impl.torch=tests.helpers.planted_step_faults.DropLastParamFSDP2"
    _, _, records = _sweep(tmp_path, "steps=4", "compare.rtol=1e-6", "compare.atol=1e-6", engine)
    record = records[0]
    assert record["status"] == "fail", record["reason"]
    held = [n for n in record["notes"] if n.startswith("the distributed copy's optimizer does not hold")]
    assert held == ["the distributed copy's optimizer does not hold layer1.bias, which the standalone copy's steps: "
                    "it never moves there (left out of its param groups)"], record["notes"]
