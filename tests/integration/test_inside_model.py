"""Inside the model (issue 25), on real FSDP2 jobs with faults planted through test-only
engines (tests/helpers/inside_faults.py and friends): the first module that differs, the
ledger of collectives against the config, the optimizer as it ran, the trace as a
DataFrame. One multirun per mesh, shared by the tests (the product's fast path)."""

import json

import pytest

import sweep
from tests.conftest import multirun_jobs, flat

pytestmark = pytest.mark.slow

HELPERS = "tests.helpers."
DP2 = {  # job number in the multirun -> engine
    0: "inside_faults.LaterLayerForwardFSDP2", 1: "inside_faults.Bf16ReduceFSDP2",
    2: "inside_faults.EpsOverrideFSDP2", 3: "planted_divergence.SumReduceFSDP2",
}
CLEAN = "sweep.engines.torch_fsdp2.TorchFSDP2"


def _multirun(tmp_path, *overrides):
    return multirun_jobs(tmp_path, *overrides)


@pytest.fixture(scope="module")
def dp2(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dp2")
    engines = ",".join([HELPERS + e for e in DP2.values()] + [CLEAN])
    jobs, proc = _multirun(tmp, f"engine.impl.torch={engines}", "steps=4")
    return jobs, tmp / "multirun", proc


@pytest.fixture(scope="module")
def hsdp(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hsdp")
    jobs, proc = _multirun(tmp, f"engine.impl.torch={HELPERS}copy_engines.NoReplicaReduceHSDP,{CLEAN}",
                           "mesh=hsdp2x2", "data.split=sharded", "steps=3")
    return jobs, tmp / "multirun", proc


def test_a_forward_fault_in_a_later_layer_is_named_by_module(dp2):
    jobs, _, proc = dp2
    found = jobs[0]["first_module"]
    assert found["module"] == "layer1" and found["phase"] == "forward" and found["step"] == 0, found
    assert found["description"].startswith("layer1 forward output at step 0, inputs agree, rel 0.01")
    assert found["ranks"] == [0, 1]
    # the first tensor by cause: autograd produces layer1's gradients first
    assert jobs[0]["first_tensor"]["name"].startswith("layer1."), jobs[0]["first_tensor"]
    assert "first differing module: layer1 forward output" in flat(proc.stdout)


def test_a_bf16_reduce_scatter_under_an_fp32_policy_is_named_with_its_dtype(dp2):
    jobs, _, _ = dp2
    notes = jobs[1]["notes"]
    assert any(n.startswith("reduce_scatter ran in bfloat16 over dp, expected float32") for n in notes), notes
    calls = jobs[1]["collectives"]["calls"]
    assert {"op": "reduce_scatter_single", "dtype": "bfloat16", "group": "dp (ranks 0, 1)"}.items() <= \
        next(c for c in calls if c["op"].startswith("reduce_scatter")).items()


def test_an_optimizer_hyper_parameter_that_differs_from_the_config_is_named_with_both_values(dp2):
    jobs, _, _ = dp2
    notes = jobs[2]["notes"]
    assert "optimizer eps ran 1e-05 in the distributed copy (param group 0), configured 1e-08" in notes, notes
    assert jobs[2]["optimizer"]["distributed"][0]["eps"] == pytest.approx(1e-5)  # as the optimizer held it


def test_a_sum_where_a_mean_was_expected_is_named_from_the_ledger_and_the_gradient(dp2):
    jobs, _, _ = dp2
    job = jobs[3]
    assert any("divides by 1, expected a mean (divide by 2)" in n and "a sum where a mean was expected" in n
               for n in job["notes"]), job["notes"]
    assert "x2 = world_size: a sum where a mean was expected" in job["first_tensor"]["description"]


def test_a_clean_job_names_nothing_and_its_ledger_matches_the_config(dp2, hsdp):
    for jobs, number in ((dp2[0], 4), (hsdp[0], 1)):
        job = jobs[number]
        assert job["config"]["engine"]["impl"]["torch"] == CLEAN
        assert job["status"] == "ok" and job["notes"] == [] and job["collectives"]["notes"] == []
        assert (job["first_module"] or {}).get("module") is None  # (sharded hsdp: rounding only, traced)
        ops = {c["op"] for c in job["collectives"]["calls"]}
        assert {"all_gather_single", "reduce_scatter_single"} <= ops
    hsdp_calls = hsdp[0][1]["collectives"]["calls"]
    assert any(c["op"] == "all_reduce" and c["group"].startswith("dp_replicate") for c in hsdp_calls), hsdp_calls


def test_a_missing_replicate_all_reduce_is_named(hsdp):
    jobs, _, _ = hsdp
    notes = jobs[0]["notes"]
    assert "no all_reduce over dp_replicate in step 0: the replicas' gradients are never reduced across the " \
           "replicate dim" in notes, notes
    assert jobs[0]["status"] == "fail"


def test_the_trace_loads_as_a_dataframe_and_the_observer_changes_nothing(dp2):
    jobs, sweep_dir, _ = dp2
    frame = sweep.load_trace(sweep_dir / "0")
    assert frame.equals(sweep.load_trace(sweep_dir / "0" / "trace"))  # the trace dir itself reads as its job's
    modules = frame[(frame.what == "module") & (frame["rank"] == 0) & (frame.step == 0) & (frame.phase == "forward")]
    assert list(modules.name) == ["layer0", "layer1", "(model)"]
    assert modules.set_index("name").loc["layer0", "rel"] == 0.0
    assert modules.set_index("name").loc["layer1", "rel"] == pytest.approx(0.01, rel=1e-3)
    assert set(frame[frame.what == "tensor"].phase) >= {"grad", "weight"}
    for n in (0, 3):  # the traced rerun's losses are the job's, bit for bit, with every hook on
        traced = json.loads((sweep_dir / str(n) / "trace" / "ranks" / "rank_0.json").read_text())
        steps = len(traced["distributed"])
        assert traced["distributed"] == jobs[n]["losses"]["distributed"][:steps]
        assert traced["standalone"] == jobs[n]["losses"]["standalone"][:steps]
    with pytest.raises(FileNotFoundError, match="no tracing rerun"):
        sweep.load_trace(sweep_dir / "4")


def test_a_forward_fault_under_bf16_is_named_with_a_policy_baseline(tmp_path):
    # against an fp32 baseline the bf16 casts part the copies, and a 1% fault in the second
    # block's up projection (2.6 units of bf16) is within the bf16 job's rounding envelope; with
    # the policy in both copies the copies compute the forward alike, the twin is nudged where
    # they part (the float32 reduction: sweep.analysis.rounding.twin_dtype) and the fault
    # moves the losses beyond their envelope from step 0 (output_dtype=float32: a bf16 loss
    # rounds the fault away at 2 steps)
    jobs, _ = _multirun(tmp_path, f"engine.impl.torch={HELPERS}inside_faults.LaterLayerForwardFSDP2",
                        "model=transformer", "mp_policy=bf16", "mp_policy.output_dtype=float32",
                        "baseline.precision=float32,policy", "steps=2")
    fp32, policy = jobs[0], jobs[1]
    assert fp32["envelope"]["dtype"] == "bfloat16" and fp32["envelope"]["loss"]["within"], fp32["envelope"]["loss"]
    assert policy["envelope"]["dtype"] == "float32"
    assert not policy["envelope"]["loss"]["within"] and policy["envelope"]["loss"]["first_beyond_step"] == 0, \
        policy["envelope"]["loss"]
    if "module" in policy["first_module"]:  # where the module trace tells it from the twin's flipped bf16 casts
        assert policy["first_module"]["module"] == "layers.1.up", policy["first_module"]


def test_a_compiled_jobs_module_trace_compares_every_module_on_every_rank(tmp_path):
    # compile=true: the copies of one class share dynamo's compiled code; a rank whose twin trained before its
    # standalone copy once ran the twin's hooks on the standalone copy, and the job named "(rank 0)" alone
    jobs, _ = multirun_jobs(tmp_path, f"engine.impl.torch={HELPERS}inside_faults.LaterLayerForwardFSDP2", "steps=4",
                            "compile.enabled=true", "compile.backend=aot_eager", "wrap=per_layer")
    found = jobs[0]["first_module"]
    assert (found["module"], found["step"], found["ranks"]) == ("layer1", 0, [0, 1]), found
    assert "uncompared" not in found and found["description"].endswith("(every rank)"), found["description"]


def test_an_engine_that_swaps_in_its_own_config_is_held_to_the_jobs(tmp_path):
    # a new user's engine rebuilt its config with reduce_dtype=bfloat16: the contract was read from that config,
    # so the bf16 reduce-scatter under a float32 policy went unsaid
    jobs, _ = multirun_jobs(tmp_path, f"engine.impl.torch={HELPERS}inside_faults.OwnConfigBf16ReduceFSDP2", "steps=3")
    notes = jobs[0]["notes"]
    assert any(n.startswith("reduce_scatter ran in bfloat16 over dp, expected float32") for n in notes), notes
