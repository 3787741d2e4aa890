"""A real multirun: one Hydra job per combination, then the summary table."""

import csv
import json

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow


def test_multirun_of_four_jobs_yields_one_row_per_combination(tmp_path):
    proc = run_cli(
        ["-m", "ablation=none", "steps=15", "optimizer=adam,sgd", "mp_policy=fp32,fp16"], tmp_path, timeout=900
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sweep_dir = tmp_path / "multirun"
    with open(sweep_dir / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["job"], r["optimizer"], r["mp_policy"]) for r in rows] == [
        ("0", "adam", "fp32"), ("1", "adam", "fp16"), ("2", "sgd", "fp32"), ("3", "sgd", "fp16"),
    ]
    assert list(rows[0])[:3] == ["job", "optimizer", "mp_policy"]  # steps is fixed: not a factor
    for row in rows:
        result = json.loads((sweep_dir / row["job"] / "result.json").read_text())
        assert result["status"] == row["status"] in ("ok", "fail")
        assert len(result["losses"]["distributed"]) == 15
    assert float(rows[0]["max_abs_diff"]) == 0.0 and float(rows[2]["max_abs_diff"]) == 0.0
    assert float(rows[1]["max_abs_diff"]) > 0.0 and float(rows[3]["max_abs_diff"]) > 0.0
    # the table is printed at the end and the files exist
    assert "4 jobs:" in proc.stdout and "summary.md" in proc.stdout
    assert json.loads((sweep_dir / "summary.json").read_text())["factors"] == ["optimizer", "mp_policy"]


def test_one_bad_job_does_not_take_the_others_with_it(tmp_path):
    proc = run_cli(["-m", "ablation=none", "steps=10", "world_size=2", "mesh=dp2,dp4"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sweep_dir = tmp_path / "multirun"
    first = json.loads((sweep_dir / "0" / "result.json").read_text())
    second = json.loads((sweep_dir / "1" / "result.json").read_text())
    assert first["status"] == "ok"
    assert second["status"] == "error" and "needs world_size=4" in second["reason"]
    assert "2 jobs: 1 ok, 1 error" in proc.stdout


def test_a_planted_fault_is_named_first_with_its_drift_class(tmp_path):
    """A real sweep where one level of one factor is a faulty engine (gradients doubled
    before the SGD step) next to a factor that does not matter: the report names the
    faulty level first, classifies the drift as first_update and names the first tensor that differs."""
    faulty = "tests.helpers.faulty_engine.GradScaleFSDP2"
    proc = run_cli(
        ["-m", "ablation=none", "steps=12", "optimizer=sgd", "reshard_after_forward=true,false",
         f"engine.impl.torch=sweep.engines.torch_fsdp2.TorchFSDP2,{faulty}"], tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "multirun" / "summary.json").read_text())
    top = summary["culprits"][0]
    assert (top["factor"], top["level"]) == ("engine.impl.torch", faulty)
    assert top["to_fail"] == 2 and len(summary["culprits"]) == 1
    assert summary["drift"]["first_update"] == [1, 3] and summary["drift"]["step0"] == []
    assert summary["verdict"].startswith("4 jobs: 2 ok, 2 fail") and f"Culprit: engine.impl.torch={faulty}" in summary["verdict"]
    where = next(f["sentence"] for f in summary["findings"] if f["code"] == "V121")  # where they part
    assert "parts from standalone at step 1 (job 1" in where and "first_update (the first update differs" in where
    # the tracing rerun names the first tensor: the gradients are equal, the step doubles them
    assert "first differing tensor: layer0.bias weight at step 0" in where
    assert "gradients of that step identical" in where
    assert (tmp_path / "multirun" / "plots").is_dir() and len(list((tmp_path / "multirun" / "plots").glob("*.png"))) >= 3


@pytest.mark.exhaustive
def test_the_default_grid_prints_in_120_columns(tmp_path):
    """The README's main command (the default 32-job grid, here 5 steps a job): no line of its
    terminal output is over 120 columns (tabs expanded), but the summary's paths, which are
    copied into a shell whole; the job lines show the swept values only (issue 38)."""
    proc = run_cli(["-m", "steps=5"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [line.expandtabs() for line in (proc.stdout + proc.stderr).splitlines()]
    wide = [line for line in lines if len(line) > 120 and not line.startswith("summary: ")]
    assert wide == [], wide[:3]
    assert "[every job] steps=5" in lines
    jobs = [line for line in lines if line.startswith("[     ok] #")]
    assert len(jobs) == 32 and not any("steps=5" in line for line in jobs)
