"""The fast path: jobs share launches and baselines, with the same losses bit for bit."""

import json

import pytest

from sweep.launch import tagged_processes
from tests.conftest import run_cli

pytestmark = pytest.mark.slow

GRID = ["-m", "ablation=none", "steps=15", "mesh=dp2,hsdp2x2", "optimizer=adam,sgd"]


def _results(sweep_dir, n):
    return [json.loads((sweep_dir / str(i) / "result.json").read_text()) for i in range(n)]


def test_reused_processes_and_baselines_give_the_same_losses(tmp_path):
    fast = run_cli(GRID, tmp_path / "fast")
    slow = run_cli(GRID + ["launcher.reuse_processes=false", "launcher.reuse_baselines=false"], tmp_path / "slow")
    assert fast.returncode == 0 and slow.returncode == 0, fast.stdout + slow.stdout
    a, b = _results(tmp_path / "fast" / "multirun", 4), _results(tmp_path / "slow" / "multirun", 4)
    for x, y in zip(a, b):
        assert x["status"] == y["status"] == "ok"
        assert x["losses"] == y["losses"]
    # jobs 0, 1 (dp2: adam, sgd) ran in one launch, 2, 3 (hsdp2x2: adam, sgd) in another
    assert a[0]["pool"]["dir"] == a[1]["pool"]["dir"] != a[2]["pool"]["dir"] == a[3]["pool"]["dir"]
    assert [r["pool"]["jobs"] for r in a] == [1, 2, 1, 2]
    # the hsdp2x2 jobs took the standalone sequence of the dp2 job with the same optimizer
    assert a[2]["baseline"]["job_dir"].endswith("/0") and a[3]["baseline"]["job_dir"].endswith("/1")
    assert "baseline" not in a[0] and "baseline" not in a[1] and all("pool" not in r for r in b)
    for r in a:  # the pools were stopped at the end of the multirun
        assert tagged_processes(r["launcher"]["job_id"]) == []
    assert "[progress] 4/4 jobs, 0 not ok" in fast.stdout


def test_a_crash_in_a_shared_launch_takes_only_its_job(tmp_path):
    engines = "tests.helpers.faulty_engine.KillRankFSDP2,sweep.engines.torch_fsdp2.TorchFSDP2"
    proc = run_cli(["-m", "ablation=none", "steps=10", f"engine.impl.torch={engines}"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    killed, healthy = _results(tmp_path / "multirun", 2)
    assert killed["status"] == "error" and "-9" in killed["reason"]
    assert healthy["status"] == "ok" and healthy["pool"]["jobs"] == 1  # a new launch after the crash
    assert killed["pool"]["dir"] != healthy["pool"]["dir"]
    assert "2 jobs: 1 ok, 1 error" in proc.stdout
