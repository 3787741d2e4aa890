"""One run, one set of files (issue 37): a run into a dir that holds an earlier run's files
clears them first (sweep.run.job.clear_earlier), and --export-golden --job N exports job N
whatever the sweep dir's root holds."""

import json

from sweep.run.job import clear_earlier


def test_an_earlier_runs_files_are_cleared_and_hydras_and_the_launches_stay(compose_cfg, tmp_path):
    cfg = compose_cfg(["runner=command", "runner.command=true", "runner.parse.files=[msrun_log/worker_*.log]"])
    for rel in ("result.json", "plot.png", "job.json", "ranks/rank_0.json", "logs/worker_0.log",
                "trace/ranks/rank_0.json", "losses.jsonl", "msrun_log/worker_0.log", ".hydra/config.yaml",
                ".pools/torch_w2/launcher.log", "notes.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("earlier")
    removed = clear_earlier(tmp_path, cfg)
    assert sorted(removed) == sorted(["result.json", "plot.png", "job.json", "ranks", "logs", "trace",
                                      "losses.jsonl", "msrun_log/worker_0.log"])
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == [".hydra/config.yaml", ".pools/torch_w2/launcher.log", "notes.txt"]
    assert clear_earlier(tmp_path, cfg) == []  # nothing of an earlier run left


def test_export_golden_with_a_job_exports_that_job_not_a_stray_root_result(tmp_path, capsys):
    from sweep.analysis.compare import compare_losses
    from sweep.records import JobRecord
    from sweep.report.summary import main

    def job(path, losses, overrides):
        path.mkdir(parents=True, exist_ok=True)
        record = JobRecord(config={"steps": 2, "seed": 42}, overrides=overrides, status="ok",
                           losses={"standalone": losses, "distributed": losses}, world_size=1,
                           comparison=compare_losses(losses, losses, rtol=1e-4, atol=1e-4).to_dict())
        record.write(path / "result.json")

    job(tmp_path / "0", [1.0, 0.5], ["steps=2"])
    job(tmp_path, [9.0, 9.0], ["stray"])  # a single run written into the sweep dir's root
    out = tmp_path / "golden.json"
    assert main([str(tmp_path), "--job", "0", "--export-golden", str(out)]) == 0
    content = json.loads(out.read_text())
    assert [r["loss"] for r in content["rows"] if r["copy"] == "standalone"] == [1.0, 0.5], content


def test_a_single_run_and_a_multirun_never_share_a_dir(compose_cfg, tmp_path):
    # a single run into a sweep dir, or a grid into a single run's dir, mixed both sets of files
    # (the report then read the grid and the stray result.json together): each is refused, nothing moved
    import pytest

    from sweep.errors import ConfigError
    from sweep.run.job import refused_over_earlier
    from sweep.run.sweep_dir import claim

    grid, single = tmp_path / "grid", tmp_path / "single"
    (grid / "0").mkdir(parents=True)
    (grid / "0" / "result.json").write_text('{"status": "ok"}')
    (grid / "multirun.yaml").write_text("hydra: {}\n")
    refused = refused_over_earlier(compose_cfg([]), grid)
    assert refused.startswith(f"hydra.run.dir={grid} holds a multirun's sweep (1 job dirs, multirun.yaml)")
    single.mkdir()
    assert refused_over_earlier(compose_cfg([]), single) is None  # an empty dir is anyone's
    (single / "result.json").write_text('{"status": "ok"}')
    with pytest.raises(ConfigError, match=r"holds a single run \(result.json, from python -m sweep without -m\)"):
        claim(single, [["optimizer=adam"]], None)
    assert sorted(p.name for p in single.iterdir() if p.name != ".lock") == ["result.json"]
