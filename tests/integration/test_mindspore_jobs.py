"""Real MindSpore jobs through msrun on CPU (data parallel: AllReduce works on CPU)."""

import json
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli

pytest.importorskip("mindspore")
pytestmark = [pytest.mark.slow, pytest.mark.mindspore]

# docs/seed/reference_values.md: the report's standalone losses on MindSpore 2.10, CPU.
REFERENCE = {
    0: 1.0775717496871948, 1: 0.9553347229957581, 2: 0.6933079361915588, 3: 0.9145568013191223,
    4: 1.774917483329773, 99: 0.762568473815918, 199: 1.839326024055481, 499: 1.3644771575927734,
    999: 0.9905454516410828,
}
REFERENCE_MEAN = 0.9977532966434955


@pytest.fixture(scope="module")
def seed_issue(tmp_path_factory):
    """experiment=seed_issue as the report wrote it, on CPU: msrun data parallel over 4 workers."""
    tmp_path = tmp_path_factory.mktemp("ms")
    proc = run_cli(["experiment=seed_issue", "engine=data_parallel", "device=cpu"], tmp_path)
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    return proc, result, tmp_path


def test_standalone_losses_reproduce_the_report(seed_issue):
    _, result, _ = seed_issue
    standalone = result["losses"]["standalone"]
    assert len(standalone) == 1000 and result["world_size"] == 4
    for step, loss in REFERENCE.items():
        assert standalone[step] == loss, f"step {step}"
    assert np.mean(np.asarray(standalone, dtype=np.float64)) == pytest.approx(REFERENCE_MEAN, rel=0, abs=1e-15)


def test_seed_issue_shows_the_reports_pattern_and_its_cause(seed_issue):
    """set_data(param) shares storage: the standalone copy, trained first, drags the
    distributed copy's weights along (reference_values.md: by up to 0.0573), so the
    distributed run starts from trained weights and runs low from step 0."""
    proc, result, _ = seed_issue
    assert proc.returncode == 1 and result["status"] == "fail"
    c = result["comparison"]
    assert c["first_fail_step"] == 0 and c["mean_signed_diff"] < 0
    assert result["weights_moved"]["distributed_during_standalone"] == pytest.approx(0.0573, abs=5e-4)
    assert result["config"]["weights"]["transfer"] == "shared" and result["config"]["zero_grad"] is False
    # on every rank, as in the report's script: each rank trains its standalone copy first, which moves that
    # rank's distributed copy (a launch that trained it on rank 0 only left ranks 1-3 passing, their replicas apart)
    assert [c["first_fail_step"] for c in result["rank_comparisons"]] == [0, 0, 0, 0]
    assert result["ranks_agree"] is True and "replicas disagree" not in result["reason"], result["reason"]


@pytest.fixture(scope="module")
def data_parallel(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("ms_dp")
    proc = run_cli(["framework=mindspore", "engine=data_parallel", "mesh=dp2", "steps=60"], tmp_path)
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    return proc, result, tmp_path


@pytest.mark.exhaustive
def test_data_parallel_over_msrun_matches_standalone(data_parallel):
    proc, result, tmp_path = data_parallel
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["status"] == "ok" and result["ranks_agree"] is True and result["world_size"] == 2
    assert result["losses"]["distributed"] == result["losses"]["standalone"]
    assert result["weights_moved"]["distributed_during_standalone"] == 0.0  # independent copy
    assert result["versions"]["mindspore"].startswith("2.")
    # every observed dtype, the reduction's included (DistributedGradReducer reduces in float32)
    observed = result["dtypes"]["observed"]
    assert {k: observed[k] for k in ("param_forward", "output", "reduce", "grad", "master", "optimizer_state")} == {
        "param_forward": "float32", "output": "float32", "reduce": "float32", "grad": "float32", "master": "float32",
        "optimizer_state": "float32"}
    # and per module, per parameter, and the master weights after every step (issue 51)
    assert {m["output"] for m in observed["modules"]} == {"float32"} and set(observed["grads"].values()) == {"float32"}
    assert observed["master_lower"] is None
    # the job's own worker logs in its dir; msrun's (launcher, scheduler, workers) in its launch's, shared with
    # the tracing rerun (a single run's launch lives under its own dir: run/.pools/<name>/)
    assert {"worker_0.log", "worker_1.log"} <= {p.name for p in (tmp_path / "run" / "logs").iterdir()}
    launch = Path(result["pool"]["dir"])
    assert launch.parent == tmp_path / "run" / ".pools"
    assert {"launcher.log", "scheduler.log", "worker_0.log", "worker_1.log"} <= {p.name for p in (launch / "logs").iterdir()}


@pytest.mark.exhaustive
def test_checkpoint_copy_and_separate_order(tmp_path, data_parallel):
    _, reference, _ = data_parallel
    proc = run_cli(
        ["framework=mindspore", "engine=data_parallel", "mesh=dp2", "steps=60",
         "weights.transfer=checkpoint", "order=separate"], tmp_path,
    )
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["status"] == "ok", proc.stdout + proc.stderr
    assert result["losses"] == reference["losses"]
    assert (tmp_path / "run" / "ranks" / "standalone.json").exists()
    assert (tmp_path / "run" / "ranks" / "init_rank_0.ckpt").exists()


def test_backward_grad_api_is_rejected_before_launch_where_mindspore_lacks_it(tmp_path):
    import mindspore

    if hasattr(mindspore.Tensor, "backward"):
        pytest.skip("this MindSpore has Tensor.backward")
    proc = run_cli(["framework=mindspore", "engine=data_parallel", "framework.grad_api=backward"], tmp_path)
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert proc.returncode == 2 and result["status"] == "error"
    assert "framework.grad_api=backward" in result["reason"] and "no Tensor.backward" in result["reason"]
    assert not (tmp_path / "run" / "logs").exists()


@pytest.mark.exhaustive
def test_a_worker_that_dies_before_it_joins_ends_its_job_at_once_with_its_line(tmp_path):
    """A CANN/driver mismatch kills a worker at start; msrun logs it and waits for the
    others, which wait in init() for it: the job is an error within seconds, in its own
    launch and in a shared one (issue 28), not a timeout at its limit."""
    early = ["framework=mindspore", "engine=data_parallel", "framework.impl=tests.helpers.early_exit.EarlyExitMindSpore",
             "steps=5"]
    began = time.monotonic()
    proc = run_cli(early, tmp_path / "single")
    r = json.loads((tmp_path / "single" / "run" / "result.json").read_text())
    assert proc.returncode == 2 and r["status"] == "error" and time.monotonic() - began < 60
    assert "a rank died at" in r["reason"] and "Worker process" in r["reason"] and "planted:" in r["reason"]
    proc = run_cli(["-m", "ablation=none", *early, "optimizer=adam,sgd"], tmp_path / "shared")
    summary = json.loads((tmp_path / "shared" / "multirun" / "summary.json").read_text())
    assert [j["status"] for j in summary["jobs"]] == ["error", "error"]
    assert all("a rank died at" in j["reason"] and "planted:" in j["reason"] for j in summary["jobs"])
    assert time.monotonic() - began < 120


@pytest.mark.exhaustive
def test_a_dropout_cell_draws_the_same_masks_in_both_copies_in_every_order(tmp_path):
    """An ``nn.Dropout`` Cell fixes its kernel seeds when it is built: both copies are built
    from the same operator seeds, and train in streams of their own, so a correct Dropout
    net passes bit for bit on data parallel and hyper-parallel, in every order, with the
    baseline cache (``sweep.train.mindspore_rank.build_nets``, ``in_own_stream``)."""
    from tests.conftest import multirun_jobs

    # each order computes its own baseline (a baseline role); zero_grad, a no-op for MindSpore's
    # functional gradients and no baseline field, gives each order a second job that takes it from the cache
    engines = "data_parallel,hyper_parallel" if _has_hyper_parallel() else "data_parallel"
    jobs, _ = multirun_jobs(tmp_path, "ablation=none", "framework=mindspore", f"engine={engines}", "steps=6",
                            "order=standalone_first,distributed_first,separate", "zero_grad=true,false",
                            "model._target_=tests.helpers.dropout_model.dropout_mlp")
    assert jobs and all(r["status"] == "ok" for r in jobs.values()), {n: r["reason"] for n, r in jobs.items()}
    for record in jobs.values():
        assert record["random_draws"] is True  # the forward did draw: the test tests something
        assert record["losses"]["standalone"] == record["losses"]["distributed"]
    cached = [r for r in jobs.values() if (r["baseline"] or {}).get("source") == "cache"]
    assert cached and all(jobs[int(Path(r["baseline"]["job_dir"]).name)]["config"]["order"] == r["config"]["order"]
                          for r in cached)  # a cached baseline comes from a job of the same order


def _has_hyper_parallel() -> bool:
    import importlib.util

    return importlib.util.find_spec("hyper_parallel") is not None
