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

    again = run_cli([*ARGS, "resume=true"], tmp_path, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    resumed = json.loads((sweep_dir / "isolate.json").read_text())
    assert resumed["answer"] == state["answer"] and resumed["n_jobs"] == 6
    assert all(job["resumed"] for job in resumed["jobs"])
