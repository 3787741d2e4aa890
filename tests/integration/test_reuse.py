"""The fast path: jobs share launches and baselines, with the same losses bit for bit."""

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli, survivors

pytestmark = pytest.mark.slow

GRID = ["-m", "ablation=none", "steps=15", "mesh=dp2,hsdp2x2", "optimizer=adam,sgd"]


def _results(sweep_dir, n):
    return [json.loads((sweep_dir / str(i) / "result.json").read_text()) for i in range(n)]


def test_reused_processes_and_baselines_give_the_same_losses(tmp_path):
    fast = run_cli(GRID, tmp_path / "fast")
    slow = run_cli(GRID + ["execution.reuse_processes=false", "execution.reuse_baselines=false"], tmp_path / "slow")
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
    assert a[0]["baseline"] is None and a[1]["baseline"] is None and all(r["pool"] is None for r in b)
    for r in a:  # the pools were stopped at the end of the multirun
        assert survivors(r["launch"]["kill_tag"]) == []
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


@pytest.mark.exhaustive
def test_pools_forked_from_the_fork_server_match_their_own_process_and_torchrun(tmp_path):
    # elastic_fork with the multirun's environment: forked from the fork server;
    # elastic_fork with another OMP_NUM_THREADS: its own fork_launch process; torchrun pools.
    grid = ["-m", "ablation=none", "steps=12", "framework.pool_launcher=elastic_fork,torchrun",
            "execution.omp_num_threads=1,2"]
    proc = run_cli(grid, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = _results(tmp_path / "multirun", 4)
    assert all(r["status"] == "ok" for r in records)
    assert all(r["losses"] == records[0]["losses"] for r in records)
    first_lines = [(Path(r["pool"]["dir"]) / "logs" / "launcher.log").read_text().splitlines()[0] for r in records]
    assert first_lines[0].startswith("$ (forked from the fork server)")
    assert "-m sweep.launch.fork_launch --nproc-per-node=2" in first_lines[1]
    assert not first_lines[1].startswith("$ (forked")
    assert all("-m torch.distributed.run" in line for line in first_lines[2:])
    assert records[0]["launch"]["kill_tag"].startswith("forkserver-")
    for r in records:
        assert survivors(r["launch"]["kill_tag"]) == []


@pytest.mark.exhaustive
def test_ranks_of_a_pool_whose_launcher_died_leave(tmp_path, compose_cfg):
    import psutil
    from omegaconf import OmegaConf

    from sweep.config.schema import to_container
    from sweep.frameworks.torch import TorchFramework
    from sweep.run.pool import RankPool, rank_env

    cfg = compose_cfg(["steps=5", "framework.pool_launcher=torchrun"])
    config = to_container(cfg)
    rank_pool = RankPool(tmp_path / "pool", config, TorchFramework, 2, rank_env(cfg))
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    OmegaConf.save(OmegaConf.create(config), job_dir / "job.yaml")
    assert rank_pool.run_job(job_dir, timeout_s=300).returncode == 0  # the ranks are up and idle now
    root = psutil.Process(rank_pool.handle.pid)
    ranks = [p for p in root.children(recursive=True) if "sweep.train" in " ".join(p.cmdline())]
    assert len(ranks) == 2
    root.kill()  # the launcher alone, as an OOM killer or a stray `kill -9` would
    gone, alive = psutil.wait_procs(ranks, timeout=30)
    for proc in alive:
        proc.kill()
    rank_pool.handle.kill()
    assert alive == [], "orphaned ranks kept waiting for jobs"


@pytest.mark.exhaustive
def test_separate_standalone_copies_share_one_process_with_the_same_losses(tmp_path):
    """order=separate: the standalone copies train in the sweep's standalone pool (one
    process apart from the ranks, started once, running while the ranks run), with the
    losses of a process of their own per job; MindSpore, whose start-up it saves."""
    pytest.importorskip("mindspore")
    grid = ["-m", "ablation=none", "framework=mindspore", "engine=data_parallel", "mesh=dp2", "steps=8",
            "order=separate", "optimizer=adam,sgd"]
    fast = run_cli(grid, tmp_path / "fast")
    slow = run_cli(grid + ["execution.reuse_processes=false"], tmp_path / "slow")
    assert fast.returncode == 0 and slow.returncode == 0, fast.stdout + slow.stdout
    a, b = _results(tmp_path / "fast" / "multirun", 2), _results(tmp_path / "slow" / "multirun", 2)
    for x, y in zip(a, b):
        assert x["status"] == y["status"] == "ok" and x["baseline"] is None  # each job's own standalone copy
        assert x["losses"] == y["losses"]
    alone = [r["pool"]["standalone"] for r in a]
    assert alone[0]["dir"] == alone[1]["dir"] != a[0]["pool"]["dir"] and [s["jobs"] for s in alone] == [1, 2]
    assert "--phase standalone" in (Path(alone[0]["dir"]) / "logs" / "launcher.log").read_text()
    for n in range(2):  # each job's standalone output in its own dir, as from a process of its own
        assert (tmp_path / "fast" / "multirun" / str(n) / "logs" / "standalone.log").exists()
    assert all(r["pool"] is None for r in b)
    for r in a:
        assert survivors(r["launch"]["kill_tag"]) == []
    import psutil  # the standalone pool's process was stopped with the multirun

    assert not [p for p in psutil.process_iter(["cmdline"]) if alone[0]["dir"] in " ".join(p.info["cmdline"] or [])]


@pytest.mark.exhaustive
def test_a_standalone_process_that_fails_is_named_and_the_next_job_starts_another(tmp_path):
    pytest.importorskip("mindspore")
    proc = run_cli(["-m", "ablation=none", "framework=mindspore", "engine=data_parallel", "mesh=dp2", "steps=4",
                    "order=separate", "optimizer=adam,sgd", "model._target_=tests.helpers.standalone_crash.mlp"],
                   tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    records = _results(tmp_path / "multirun", 2)
    for r in records:
        assert r["status"] == "error"
        assert r["reason"].startswith("no result from the standalone process (order=separate): "
                                      "the standalone process exited with code 1"), r["reason"]
        assert "planted: the standalone process fails" in r["reason"]
    assert records[0]["pool"]["dir"] == records[1]["pool"]["dir"]  # the ranks' launch served both


@pytest.mark.exhaustive
def test_each_order_computes_its_own_baseline(tmp_path):
    """The baseline cache keys on ``order`` (a baseline role): each order trains its own
    standalone copy (the cache once gave order=separate standalone_first's sequence). A model
    that branches on the distributed state: its standalone copy sees one device in either order
    (``sweep.train.observers.single_device``: it trained inside the rank under standalone_first,
    took the distributed branch and passed), so both jobs fail at step 0 with one standalone
    sequence, as a single device's run and the distributed one part."""
    grid = ["-m", "ablation=none", "model._target_=tests.helpers.branchy_model.branchy_mlp", "steps=5",
            "order=standalone_first,separate", "gate=true"]
    proc = run_cli(grid, tmp_path)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    first, separate = _results(tmp_path / "multirun", 2)
    assert first["status"] == separate["status"] == "fail"
    assert separate["baseline"] is None or separate["baseline"].get("source") != "cache"
    assert first["comparison"]["first_fail_step"] == separate["comparison"]["first_fail_step"] == 0
    assert first["losses"]["standalone"] == separate["losses"]["standalone"]
