"""The report's hypotheses as factors, each on real torchrun jobs with few steps: one
multirun of every case (the product's fast path: shared launches), asserted by the tests."""

import pytest

from tests.conftest import case_jobs

pytestmark = pytest.mark.slow

STEPS = 12
CASES = {
    "baseline": ["engine=data_parallel"],
    "shared": ["engine=data_parallel", "weights.transfer=shared"],
    "checkpoint": ["engine=data_parallel", "weights.transfer=checkpoint"],
    "fsdp_shared": ["engine=torch_fsdp2", "weights.transfer=shared"],
    "distributed_first": ["engine=data_parallel", "order=distributed_first"],
    "separate": ["engine=data_parallel", "order=separate"],
    "shared_distributed_first": ["engine=data_parallel", "weights.transfer=shared", "order=distributed_first"],
    "no_zero_grad": ["engine=torch_fsdp2", "zero_grad=false"],
    "sharded": ["engine=torch_fsdp2", "mesh=dp2", "data.split=sharded"],
    "bf16": ["mp_policy=bf16"],
    "sharded_separate": ["engine=torch_fsdp2", "mesh=dp2", "data.split=sharded", "order=separate"],
}


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    # every job trains both copies, as a run of its own would (no cached baseline): the
    # order, storage and process of the standalone copy are what these cases test
    found, _ = case_jobs(tmp_path_factory.mktemp("factors"), CASES, f"steps={STEPS}", "execution.reuse_baselines=false")
    for name, (r, _) in found.items():
        assert r["status"] in ("ok", "fail"), f"{name}: {r.get('reason')}"
    return found


@pytest.fixture(scope="module")
def baseline(cases):
    return cases["baseline"][0]


def test_shared_storage_is_shared(cases, baseline):
    """DDP trains the module's own parameters, so with shared storage the standalone
    copy (trained first) moves the distributed copy's weights: it starts trained and runs low."""
    r = cases["shared"][0]
    assert r["weights_moved"]["distributed_during_standalone"] > 0
    assert r["weights_moved"]["standalone_during_distributed"] > 0
    assert r["status"] == "fail" and r["comparison"]["first_fail_step"] == 0
    assert r["comparison"]["mean_signed_diff"] < 0
    assert r["losses"]["standalone"] == baseline["losses"]["standalone"]  # the copy trained first is unaffected


def test_independent_copy_is_independent(baseline):
    assert baseline["weights_moved"] == {"distributed_during_standalone": 0.0, "standalone_during_distributed": 0.0}
    assert baseline["status"] == "ok"
    assert baseline["losses"]["distributed"] == baseline["losses"]["standalone"]


def test_checkpoint_round_trip_gives_the_same_weights(cases, baseline):
    r, job_dir = cases["checkpoint"]
    assert r["status"] == "ok" and r["weights_moved"]["distributed_during_standalone"] == 0.0
    assert (job_dir / "ranks" / "init_rank_0.pt").exists()
    assert r["losses"] == baseline["losses"]


def test_fully_shard_copies_its_shards_so_shared_storage_does_not_leak(cases):
    r = cases["fsdp_shared"][0]
    assert r["weights_moved"]["distributed_during_standalone"] == 0.0
    assert r["status"] == "ok"


@pytest.mark.parametrize("order", ["distributed_first", "separate"])
def test_order_does_not_change_independent_copies(cases, baseline, order):
    r, job_dir = cases[order]
    assert r["losses"] == baseline["losses"]
    if order == "separate":
        assert (job_dir / "ranks" / "standalone.json").exists()
        assert r["weights_moved"] == {}  # nothing to move: the copies live in different processes
    else:
        assert list(r["weights_moved"]) == ["standalone_during_distributed", "distributed_during_standalone"]


def test_shared_storage_with_distributed_first_makes_the_standalone_run_low(cases):
    r = cases["shared_distributed_first"][0]
    assert r["status"] == "fail" and r["comparison"]["mean_signed_diff"] > 0  # distributed - standalone


def test_without_zero_grad_gradients_accumulate(cases, baseline):
    r = cases["no_zero_grad"][0]
    assert r["zero_grad_effective"] is False
    assert r["losses"]["distributed"][:2] == baseline["losses"]["standalone"][:2]  # steps 0 and 1 see one gradient
    assert r["losses"]["distributed"] != baseline["losses"]["standalone"]
    assert r["comparison"]["max_abs_diff"] > 0


def test_sharded_data_matches_the_global_batch_within_tolerance(cases):
    import json

    r, job_dir = cases["sharded"]
    assert r["status"] == "ok" and r["ranks_agree"] is True
    ranks = [json.loads((job_dir / "ranks" / f"rank_{i}.json").read_text()) for i in range(2)]
    assert ranks[0]["distributed"] != ranks[1]["distributed"]  # each rank saw its own half
    mean = [(a + b) / 2 for a, b in zip(ranks[0]["distributed"], ranks[1]["distributed"])]
    assert r["losses"]["distributed"] == pytest.approx(mean, rel=1e-12)


def test_observed_dtypes_show_the_policy_that_ran(cases):
    r = cases["bf16"][0]
    assert r["dtypes"]["configured"]["param_dtype"] == "bfloat16"
    observed = r["dtypes"]["observed"]
    assert {k: observed[k] for k in ("param_forward", "output", "grad", "reduce", "master", "optimizer_state")} == {
        "param_forward": "bfloat16", "output": "bfloat16", "grad": "float32", "reduce": "float32", "master": "float32",
        "optimizer_state": "float32"}
    assert {m["params"] for m in observed["modules"] if m["params"]} == {"bfloat16"}  # every module, as it ran


def test_separate_standalone_process_sees_the_global_batch(cases):
    """The standalone-only process has no ranks, but its global batch is the job's:
    batch_size x world_size rows."""
    r = cases["sharded_separate"][0]
    assert r["status"] == "ok" and r["comparison"]["max_abs_diff"] < 1e-6
