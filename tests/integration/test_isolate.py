"""A real isolation (hydra/sweeper=isolate): FSDP2 jobs on CPU (gloo) with a fault
planted through a test-only engine among four factors; then resumed."""

import json

import pytest

from tests.conftest import run_cli, flat

pytestmark = pytest.mark.slow

PASSING = '["optimizer=adam","reshard_after_forward=true","mesh=dp2","deterministic=true"]'
FAILING = '["optimizer=sgd","reshard_after_forward=false","mesh=dp4","deterministic=false"]'
ARGS = [
    "-m", "hydra/sweeper=isolate", "ablation=none", "steps=10",
    "engine.impl.torch=tests.helpers.planted_faults.NoReshardGradScaleFSDP2",
    f"hydra.sweeper.passing={PASSING}", f"hydra.sweeper.failing={FAILING}",
]


def test_isolation_names_the_interaction_then_resumes(tmp_path):
    proc = run_cli(ARGS, tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep_dir = tmp_path / "multirun"
    state = json.loads((sweep_dir / "isolate.json").read_text())
    # the fault needs sgd and no resharding: an interaction of two of the four factors
    assert state["answer"] == "optimizer=sgd + reshard_after_forward=false"
    assert state["interaction"] and state["one_minimal"] and state["status"] == "isolated"
    # endpoints (2), halves (2), then each of the two alone (2); the grid has 16
    assert state["n_jobs"] == 6 and state["grid_jobs"] == 16
    assert "Minimal failure-inducing change: optimizer=sgd + reshard_after_forward=false" in flat(proc.stdout)
    last = proc.stdout.rstrip().split("\n\n")[-1].splitlines()  # the answer goes last, then where it is
    assert last[0].startswith("Isolation: 6 jobs") and last[-1].startswith("isolation: ")
    assert all(len(line) <= 120 for line in last[:-1])  # wrapped prose; the paths' line stays whole
    for n in range(6):
        assert json.loads((sweep_dir / str(n) / "result.json").read_text())["status"] in ("ok", "fail")
    assert (sweep_dir / "summary.md").exists() and (sweep_dir / "isolate.md").exists()

    # run again without resume: refused, its results kept (a new user's isolation was run anew over them)
    kept = (sweep_dir / "0" / "result.json").read_text()
    refused = run_cli(ARGS, tmp_path, timeout=300)
    assert refused.returncode == 2 and "already holds the results of an earlier run" in flat(refused.stderr), \
        refused.stdout[-2000:] + refused.stderr[-2000:]
    assert (sweep_dir / "0" / "result.json").read_text() == kept
    again = run_cli([*ARGS, "resume=true"], tmp_path, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    resumed = json.loads((sweep_dir / "isolate.json").read_text())
    assert resumed["answer"] == state["answer"] and resumed["n_jobs"] == 6
    assert all(job["resumed"] for job in resumed["jobs"])


def test_a_failing_config_that_fails_only_its_tolerance_by_rounding_has_nothing_to_isolate(tmp_path):
    # a new user's case: a bfloat16 model fails rtol = atol = 1e-4 within its own rounding envelope; the
    # isolation named "the minimal failure-inducing change is model.init_dtype=bfloat16" and a sign
    proc = run_cli(["-m", "hydra/sweeper=isolate", "ablation=none", "steps=200", "optimizer.lr=1e-3",
                    "data.split=sharded", "train.batch_size=8",
                    'hydra.sweeper.failing=["model.init_dtype=bfloat16","reshard_after_forward=false"]',
                    'hydra.sweeper.passing=["model.init_dtype=float32","reshard_after_forward=true"]'],
                   tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    state = json.loads((tmp_path / "multirun" / "isolate.json").read_text())
    failing = [j for j in state["jobs"] if j["status"] == "fail"]
    assert failing and all(j["rounding_fail"] for j in failing), state["jobs"]
    assert state["status"] == "endpoints" and not state["minimal"], state
    assert "fails its tolerance only, within its rounding envelope" in state["reason"]
    text = flat(proc.stdout)
    assert "failure-inducing change is" not in text and "runs high" not in text and "runs low" not in text
