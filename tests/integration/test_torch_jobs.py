"""Real jobs: torchrun + gloo on CPU, FSDP2 against the standalone baseline."""

import json

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow


def _result(tmp_path):
    return json.loads((tmp_path / "run" / "result.json").read_text())


def test_fsdp2_fp32_is_bit_identical_to_standalone(tmp_path):
    # a launch of its own (execution.reuse_processes=false): torchrun, its log in the job's logs/
    proc = run_cli(["steps=40", "mesh=dp2", "mp_policy=fp32", "execution.reuse_processes=false"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r = _result(tmp_path)
    assert r["status"] == "ok" and r["world_size"] == 2 and r["ranks_agree"] is True
    assert r["losses"]["standalone"] == r["losses"]["distributed"]  # bit for bit on CPU
    assert len(r["losses"]["standalone"]) == 40
    assert r["comparison"]["max_abs_diff"] == 0.0 and r["comparison"]["passed"] is True
    assert r["versions"]["torch"].startswith("2.")
    assert sorted(p.name for p in (tmp_path / "run" / "ranks").iterdir()) == ["rank_0.json", "rank_1.json"]
    assert r["pool"] is None and "torch.distributed.run" in " ".join(r["launch"]["argv"])
    assert (tmp_path / "run" / "logs" / "launcher.log").exists() and not (tmp_path / "run" / ".pools").exists()


def test_reduced_precision_params_give_a_nonzero_difference(tmp_path):
    proc = run_cli(["steps=40", "mesh=dp2", "mp_policy=fp16", "optimizer=sgd"], tmp_path)
    r = _result(tmp_path)
    assert r["status"] in ("ok", "fail"), proc.stdout + proc.stderr
    assert r["comparison"]["max_abs_diff"] > 0.0
    assert r["losses"]["standalone"] != r["losses"]["distributed"]
    assert r["losses"]["standalone"][0] != r["losses"]["distributed"][0]  # fp16 forward from step 0


def test_a_faulty_engine_plugged_in_by_config_fails_the_comparison(tmp_path):
    proc = run_cli(
        ["steps=20", "optimizer=sgd", "engine.impl.torch=tests.helpers.faulty_engine.GradScaleFSDP2"], tmp_path
    )
    assert proc.returncode == 1
    r = _result(tmp_path)
    assert r["status"] == "fail", r["reason"]
    c = r["comparison"]
    assert c["first_fail_step"] == 1  # step 0's loss is taken before any update
    assert c["n_fail"] > c["n_steps"] // 2  # the scaled gradient moves nearly every later step
    assert c["mean_signed_diff"] < 0  # the doubled SGD step lowers the loss faster
    assert "first at step 1" in r["reason"]
    assert "[   fail]" in proc.stdout


def test_bad_mesh_is_rejected_before_any_process_starts(tmp_path):
    proc = run_cli(["mesh=hsdp2x2", "world_size=2"], tmp_path)
    assert proc.returncode == 2
    r = _result(tmp_path)
    assert r["status"] == "error"
    assert r["reason"].startswith("invalid config: mesh.mesh_shape=[2, 2] needs world_size=4")
    assert r["launch"] is None
    assert not (tmp_path / "run" / "logs").exists() and not (tmp_path / "run" / "ranks").exists()


def test_unknown_dtype_is_rejected_before_hydra_runs_with_the_allowed_values(tmp_path):
    proc = run_cli(["mp_policy.param_dtype=fp8"], tmp_path)
    assert proc.returncode == 2  # an input error, not a numerics failure (issue 28)
    assert "fp8" in proc.stderr and "bfloat16" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "result.json").exists()
