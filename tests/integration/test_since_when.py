"""Versions as axes (issue 39), on real jobs: a library's checkouts swept through
``runtime.pythonpath`` (attribution names the runtime; the record gives the file that ran),
the bisect sweeper over a history whose fault enters at one commit (named with its subject
in at most ceil(log2 n) + 1 probes, a commit that does not import skipped with its reason),
the same with ``install`` into a venv per commit, and a runtime that cannot run."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import flat, multirun_jobs, run_cli
from tests.helpers.toy_history import make_repo

pytestmark = pytest.mark.slow

COMMON = ["engine.impl.torch=toyeng.Engine", "optimizer=sgd", "steps=6"]


def _export(repo: Path, sha: str, where: Path) -> Path:
    where.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", sha], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return where


def _bisect(tmp_path, repo, shas, *extra):
    proc = run_cli(["-m", "hydra/sweeper=bisect", f"hydra.sweeper.repo={repo}", f"hydra.sweeper.good={shas[0]}",
                    f"hydra.sweeper.bad={shas[-1]}", *extra, *COMMON], tmp_path)
    out = tmp_path / "multirun"
    assert (out / "bisect.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "bisect.json").read_text()), (out / "bisect.md").read_text(), proc


@pytest.mark.exhaustive
def test_two_checkouts_swept_through_runtime_pythonpath_name_the_runtime(tmp_path):
    repo = tmp_path / "toyeng-repo"
    shas = make_repo(repo, n=2, fault_at=1)
    good, bad = _export(repo, shas[0], tmp_path / "good"), _export(repo, shas[1], tmp_path / "bad")
    jobs, _ = multirun_jobs(tmp_path, f"runtime.pythonpath={good},{bad}", *COMMON)
    by_path = {r["config"]["runtime"]["pythonpath"]: r for r in jobs.values()}
    assert by_path[str(good)]["status"] == "ok" and by_path[str(bad)]["status"] == "fail"
    for where, record in by_path.items():  # the checkout that ran, and what it ran under
        assert record["versions"]["engine_file"] == f"{where}/toyeng/__init__.py"
        assert record["versions"]["interpreter"] and record["versions"]["numpy"] and record["versions"]["torch"]
    summary = json.loads((tmp_path / "multirun" / "summary.json").read_text())
    assert f"Culprit: runtime.pythonpath={bad}" in flat(summary["headline"])


def test_bisect_names_the_commit_that_breaks_it_and_skips_one_that_does_not_import(tmp_path):
    repo = tmp_path / "toyeng-repo"
    shas = make_repo(repo, n=9, fault_at=6, broken_at=4)  # good = shas[0]; 8 commits in doubt
    state, text, proc = _bisect(tmp_path, repo, shas)
    assert state["n_commits"] == 8 and state["first_bad"]["sha"] == shas[6]
    assert state["first_bad"]["subject"] == "step 6: double the gradients before the step"
    assert state["n_probes"] <= math.ceil(math.log2(8)) + 1
    skipped = [p for p in state["probes"] if p["verdict"] == "skip"]
    assert [p["sha"] for p in skipped] == [shas[4]] and "does not import" in skipped[0]["reason"]
    assert "SyntaxError" in skipped[0]["reason"]
    by = {p["sha"]: p["verdict"] for p in state["probes"]}
    assert by[shas[6]] == "fail" and by[shas[5]] == "pass"  # the proof: the step itself
    assert "First failing commit: " + shas[6][:10] + " 'step 6: double the gradients before the step': its probe " \
        "fails" in flat(text)
    assert "First failing commit: " + shas[6][:10] in flat(proc.stdout)
    summary = json.loads((tmp_path / "multirun" / "summary.json").read_text())  # the probes' grid report
    assert summary["findings"][0]["code"] == "V003"  # the bisection's answer leads it
    assert "runtime.pythonpath" in summary["verdict"]  # and the grid's own findings name the probes' factor


@pytest.mark.exhaustive
def test_bisect_with_install_runs_each_commit_from_its_own_venv(tmp_path):
    repo = tmp_path / "toyeng-repo"
    shas = make_repo(repo, n=4, fault_at=2, packaged=True)
    state, _, proc = _bisect(tmp_path, repo, shas,
                             'hydra.sweeper.install="pip install -q --no-deps --no-build-isolation ."')
    assert state.get("first_bad", {}).get("sha") == shas[2], proc.stdout[-2000:]
    job = json.loads((tmp_path / "multirun" / str(state["probes"][0]["jobs"][0]) / "result.json").read_text())
    venv = tmp_path / "multirun" / ".bisect" / "venvs" / state["probes"][0]["sha"]
    assert job["versions"]["interpreter"] == str(venv / "bin" / "python")
    assert job["versions"]["engine_file"].startswith(str(venv / "lib"))


def test_a_runtime_that_cannot_run_is_an_error_with_its_cause(tmp_path):
    proc = run_cli(["runtime.python=/no/such/python", "steps=3"], tmp_path / "missing")
    assert "runtime.python=/no/such/python: no executable file there" in proc.stdout + proc.stderr
    base = Path(sys.base_prefix) / "bin" / "python3"
    if subprocess.run([str(base), "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip(f"{base} imports torch: no interpreter without it here")
    proc = run_cli([f"runtime.python={base}", "steps=3"], tmp_path / "bare")
    record = json.loads(next((tmp_path / "bare").rglob("result.json")).read_text())
    assert record["status"] == "error" and "ModuleNotFoundError: No module named 'torch'" in record["reason"]


@pytest.mark.exhaustive
def test_a_bisection_that_names_no_commit_exits_2_and_says_why(tmp_path):
    """A bad that passes is probed before it would be named (nothing to bisect); a repo
    that is not there is refused before any probe; both exit 2 (input that cannot be judged)."""
    repo = tmp_path / "toyeng-repo"
    shas = make_repo(repo, n=4, fault_at=9)  # no commit doubles the gradients
    state, text, proc = _bisect(tmp_path / "passes", repo, shas)
    assert proc.returncode == 2 and state["status"] == "bad_passes"
    assert shas[-1] in [p["sha"] for p in state["probes"]] and "first_bad" not in state
    assert f"Nothing to bisect: hydra.sweeper.bad={shas[-1]}, given as failing, passes when probed" in flat(text)
    state, text, proc = _bisect(tmp_path / "norepo", tmp_path / "missing", shas)
    assert proc.returncode == 2 and state["status"] == "error" and "no such directory" in state["reason"]
    assert not state["probes"] and "Each probe ran" not in text
    assert "Traceback" not in proc.stderr and "not a multirun dir" not in proc.stderr
