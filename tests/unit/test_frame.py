"""sweep.load / sweep.load_steps on a constructed sweep dir, and the summary.csv columns."""

import csv
import subprocess
import sys

import pytest

from sweep.layout import JobDir
from sweep.records import RankResult
from sweep.report.summary import write_report
from tests.helpers.records import make_record, write_job

pd = pytest.importorskip("pandas", reason="pandas is not installed: pip install -e '.[pandas]'")

CONFIG = {"optimizer": {"name": "adam", "lr": 1e-4, "betas": [0.9, 0.999]}, "mesh": {"mesh_shape": [2]}, "steps": 3}
VERSIONS = {"sweep": "0.1.0", "torch": "2.13.0+cpu"}


def _cmp(passed, first, mean):
    return {"passed": passed, "first_fail_step": first, "n_fail": 0 if passed else 3, "n_steps": 3,
            "max_abs_diff": abs(mean), "max_rel_diff": abs(mean), "mean_signed_diff": mean}


@pytest.fixture
def sweep_dir(tmp_path):
    for num, (opt, status, mean) in enumerate([("adam", "ok", 0.0), ("sgd", "fail", -0.5)]):
        config = {**CONFIG, "optimizer": {**CONFIG["optimizer"], "name": opt}}
        record = make_record(status, [f"optimizer={opt}", "steps=3"], _cmp(status == "ok", None if status == "ok" else 0, mean),
                             None if status == "ok" else "3/3 steps", config=config, versions=VERSIONS)
        job = write_job(tmp_path, num, [f"optimizer={opt}", "steps=3"], record)
        job.ranks.mkdir()
        for rank in (0, 1):
            RankResult(rank=rank, world_size=2, framework="torch", standalone=[1.0, 0.9, 0.8] if rank == 0 else None,
                       distributed=[1.0 + mean, 0.9 + mean + rank, 0.8 + mean]).write(job.rank_result(rank))
    write_job(tmp_path, 2, ["optimizer=adamw", "steps=3"], make_record("error", ["optimizer=adamw", "steps=3"],
                                                                      reason="launcher exited with code 1"))
    write_job(tmp_path, 3, ["optimizer=lamb", "steps=3"])  # no result: missing
    (tmp_path / "multirun.yaml").write_text("{}")
    return tmp_path


def test_load_has_one_row_per_job_with_every_config_value(sweep_dir):
    import sweep

    frame = sweep.load(sweep_dir)
    assert list(frame["job"]) == [0, 1, 2, 3]
    assert list(frame["status"]) == ["ok", "fail", "error", "missing"]
    assert frame.loc[1, "reason"] == "3/3 steps" and frame.loc[2, "reason"] == "launcher exited with code 1"
    assert list(frame.columns[:4]) == ["job", "status", "reason", "job_dir"]
    assert frame.loc[0, "optimizer.lr"] == 1e-4 and frame.loc[1, "optimizer.name"] == "sgd"
    assert frame.loc[0, "optimizer.betas"] == (0.9, 0.999) and frame.loc[0, "mesh.mesh_shape"] == (2,)
    assert frame.loc[3, "optimizer"] == "lamb"  # a missing job: its overrides
    assert frame.loc[1, "mean_signed_diff"] == -0.5 and frame.loc[1, "first_fail_step"] == 0
    assert frame.loc[1, "drift"] == "step0" and frame.loc[0, "versions.torch"] == "2.13.0+cpu"
    assert frame.groupby("optimizer.name")["max_abs_diff"].max()["sgd"] == 0.5


def test_load_steps_is_long_format_per_rank(sweep_dir):
    import sweep

    steps = sweep.load_steps(sweep_dir)
    assert list(steps.columns) == ["job", "step", "rank", "standalone", "distributed", "difference"]
    assert len(steps) == 2 * 2 * 3  # two jobs with losses x two ranks x three steps
    row = steps[(steps.job == 1) & (steps["rank"] == 1) & (steps.step == 1)].iloc[0]
    assert row.standalone == pytest.approx(0.9) and row.distributed == pytest.approx(1.4)
    assert row.difference == pytest.approx(0.5)
    assert steps[steps["rank"] == 1].standalone.tolist() == steps[steps["rank"] == 0].standalone.tolist()


def test_load_of_a_single_run_dir(sweep_dir):
    import sweep

    frame = sweep.load(sweep_dir / "1")
    assert list(frame["job"]) == [0] and frame.loc[0, "status"] == "fail" and frame.loc[0, "job_dir"] == str(sweep_dir / "1")
    assert len(sweep.load_steps(sweep_dir / "1")) == 6


def test_load_of_no_sweep_raises(tmp_path):
    import sweep

    with pytest.raises(FileNotFoundError):
        sweep.load(tmp_path / "nope")


def test_import_sweep_does_not_import_pandas():
    code = "import sys, sweep; sweep.load; assert 'pandas' not in sys.modules, 'pandas imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_pandas_names_the_extra(sweep_dir):
    code = ("import sys; sys.modules['pandas'] = None\nimport sweep\n"
            f"try:\n    sweep.load({str(sweep_dir)!r})\nexcept ImportError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install" in out and "[pandas]" in out


def test_summary_csv_has_reason_constant_overrides_and_versions(sweep_dir):
    write_report(sweep_dir)
    with open(sweep_dir / "summary.csv") as f:
        table = list(csv.DictReader(f))
    header = list(table[0])
    assert header[:3] == ["job", "optimizer", "steps"]  # factor, then the constant override
    assert [r["steps"] for r in table] == ["3"] * 4
    assert table[2]["reason"] == "launcher exited with code 1" and table[0]["reason"] == ""
    assert table[0]["versions.torch"] == "2.13.0+cpu" and table[3]["versions.torch"] == ""
    assert JobDir(sweep_dir / "0").result.exists()


@pytest.mark.parametrize("status, extra, says", [
    # a failing runner=command job: its copies differ, but its tensors run inside the command (issue 52)
    ("fail", {"config": {"runner": {"name": "command"}}, "first_tensor": {"note": "not observed (runner=command)"}},
     "not observed (runner=command): its tensors run inside your command"),
    ("fail", {"config": {"runner": {"name": "command"}}}, "runner=command: its tensors run inside your command"),
    ("fail", {"config": {"runner": {"name": "builtin"}}, "first_tensor": {"note": "not traced: order=separate trains "
                                                                                  "the copies apart"}},
     "not traced: order=separate"),
    ("error", {"config": {}}, "the job did not finish (error: boom)"),
    ("ok", {"config": {}}, "its copies never differed"),
])
def test_a_job_without_a_tracing_rerun_says_why(tmp_path, status, extra, says):
    import sweep

    mean = -0.5 if status == "fail" else 0.0
    comparison = None if status == "error" else {**_cmp(status == "ok", 0 if status == "fail" else None, mean),
                                                 "first_diff_step": 0 if mean else None}
    write_job(tmp_path, 0, ["steps=3"], make_record(status, ["steps=3"], comparison, "boom" if status == "error" else None,
                                                    **extra))
    with pytest.raises(FileNotFoundError, match="no tracing rerun in .*: " + says.replace("(", r"\(").replace(")", r"\)")):
        sweep.load_trace(tmp_path / "0")
