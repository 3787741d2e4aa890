"""The summary table from a constructed sweep dir (the layout Hydra and sweep.job write)."""

import csv
import re
import json

import pytest
import yaml

from sweep.io import write_json
from sweep.summary import collect, factors, main, write_report


def _job(sweep_dir, num, overrides, status=None, comparison=None, reason=None):
    job_dir = sweep_dir / str(num)
    (job_dir / ".hydra").mkdir(parents=True)
    (job_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if status is not None:
        write_json(job_dir / "result.json", {
            "status": status, "reason": reason, "overrides": overrides,
            "comparison": comparison, "timings_s": {"wall": 1.5},
        })


def _cmp(passed, first, mean):
    return {"passed": passed, "first_fail_step": first, "n_fail": 0 if passed else 3, "n_steps": 10,
            "max_abs_diff": abs(mean), "max_rel_diff": abs(mean), "mean_signed_diff": mean}


@pytest.fixture
def sweep_dir(tmp_path):
    _job(tmp_path, 0, ["steps=10", "optimizer=adam", "mesh=dp2"], "ok", _cmp(True, None, 0.0))
    _job(tmp_path, 1, ["steps=10", "optimizer=sgd", "mesh=dp2"], "fail", _cmp(False, 1, -0.5), "3/10 steps")
    _job(tmp_path, 2, ["steps=10", "optimizer=adam", "mesh=dp4"], "error", None, "launcher exited with code 1")
    _job(tmp_path, 10, ["steps=10", "optimizer=sgd", "mesh=dp4"])  # never finished
    (tmp_path / "multirun.yaml").write_text("{}")
    return tmp_path


def test_factors_are_the_override_keys_that_vary(sweep_dir):
    rows = collect(sweep_dir)
    assert [r["job"] for r in rows] == [0, 1, 2, 10]
    assert factors(rows) == ["optimizer", "mesh"]
    assert [r["status"] for r in rows] == ["ok", "fail", "error", "missing"]
    assert rows[1]["first_fail_step"] == 1 and rows[1]["mean_signed_diff"] == -0.5


def test_report_files_hold_one_row_per_job(sweep_dir):
    text = write_report(sweep_dir, "github")
    assert text.startswith("4 jobs: 1 ok, 1 fail, 1 error, 1 missing")
    assert "job 2 error: launcher exited with code 1" in text and "job 10 missing" in text
    with open(sweep_dir / "summary.csv") as f:
        table = list(csv.DictReader(f))
    assert [(r["job"], r["optimizer"], r["mesh"], r["status"]) for r in table] == [
        ("0", "adam", "dp2", "ok"), ("1", "sgd", "dp2", "fail"), ("2", "adam", "dp4", "error"), ("10", "sgd", "dp4", "missing"),
    ]
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert summary["factors"] == ["optimizer", "mesh"] and len(summary["jobs"]) == 4
    md = (sweep_dir / "summary.md").read_text()
    assert re.search(r"\| job +\| optimizer +\| mesh +\| status", md)


def test_cli_rerenders_in_any_tabulate_format(sweep_dir, capsys):
    assert main([str(sweep_dir), "--format", "grid"]) == 0
    out = capsys.readouterr().out
    assert "+-" in out and "sgd" in out
    assert main([str(sweep_dir / "nope")]) == 2
