"""Real MindSpore jobs through msrun on CPU (data parallel: AllReduce works on CPU)."""

import json

import numpy as np
import pytest

from tests.conftest import run_cli

pytest.importorskip("mindspore")
pytestmark = [pytest.mark.slow, pytest.mark.mindspore]

# shared/notes/reference_values.md: the report's standalone losses on MindSpore 2.10, CPU.
REFERENCE = {
    0: 1.0775717496871948, 1: 0.9553347229957581, 2: 0.6933079361915588, 3: 0.9145568013191223,
    4: 1.774917483329773, 99: 0.762568473815918, 199: 1.839326024055481, 499: 1.3644771575927734,
    999: 0.9905454516410828,
}
REFERENCE_MEAN = 0.9977532966434955


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory):
    """The report's setup, 1000 steps, with data parallelism over 2 msrun workers."""
    tmp_path = tmp_path_factory.mktemp("ms")
    proc = run_cli(["framework=mindspore", "engine=data_parallel", "mesh=dp2", "steps=1000"], tmp_path)
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    return proc, result, tmp_path


def test_standalone_losses_reproduce_the_report(seed_run):
    _, result, _ = seed_run
    standalone = result["losses"]["standalone"]
    assert len(standalone) == 1000
    for step, loss in REFERENCE.items():
        assert standalone[step] == loss, f"step {step}"
    assert np.mean(np.asarray(standalone, dtype=np.float64)) == pytest.approx(REFERENCE_MEAN, rel=0, abs=1e-15)


def test_data_parallel_over_msrun_matches_standalone(seed_run):
    proc, result, tmp_path = seed_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["status"] == "ok" and result["ranks_agree"] is True and result["world_size"] == 2
    assert result["losses"]["distributed"] == result["losses"]["standalone"]
    assert result["versions"]["mindspore"].startswith("2.")
    logs = sorted(p.name for p in (tmp_path / "run" / "logs").iterdir())
    assert {"launcher.log", "scheduler.log", "worker_0.log", "worker_1.log"} <= set(logs)
