"""The isolate sweeper (hydra_plugins/sweep_isolate) end to end on a stand-in app whose
jobs judge themselves by a rule (tests/helpers/fake_app): discovery, the three ways to
give endpoints, repeats, errors, the budget, and deterministic job numbering."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from tests.conftest import flat

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "tests" / "helpers" / "fake_app" / "app.py"
ALL0 = '["a=0","b=0","c=0","d=0","e=0"]'
ALL1 = '["a=1","b=1","c=1","d=1","e=1"]'


def isolate(args: List[str], sweep_dir: Path, sweeper: str = "isolate") -> dict:
    cmd = [sys.executable, str(APP), "-m", f"hydra/sweeper={sweeper}", *args, f"hydra.sweep.dir={sweep_dir}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    if sweeper != "isolate":
        return {}
    state = json.loads((sweep_dir / "isolate.json").read_text())
    state["stdout"] = proc.stdout
    return state


def endpoints(passing: str = ALL0, failing: str = ALL1) -> List[str]:
    return [f"hydra.sweeper.passing={passing}", f"hydra.sweeper.failing={failing}"]


def test_discovery():
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins
    from hydra.plugins.sweeper import Sweeper

    from hydra_plugins.sweep_isolate.isolate_sweeper import IsolateSweeper

    assert IsolateSweeper.__name__ in [x.__name__ for x in Plugins.instance().discover(Sweeper)]
    assert "isolate.yaml" in ConfigStore.instance().list("hydra/sweeper")


def test_interaction_from_endpoints(tmp_path):
    state = isolate(["cause=[a,c]", *endpoints()], tmp_path)
    assert state["status"] == "isolated"
    assert state["answer"] == "a=1 + c=1" and state["interaction"] and state["one_minimal"]
    assert state["removals"] == {"a": "pass", "c": "pass"}
    assert state["n_jobs"] == 11 and state["grid_jobs"] == 32  # ddmin's 10, and every other change without it
    # the proof: the passing endpoint and the probe of exactly {a, c}
    jobs = {j["job"]: j for j in state["jobs"]}
    good, bad = jobs[state["proof"]["passing"][0]], jobs[state["proof"]["failing"][0]]
    assert good["status"] == "ok" and bad["status"] == "fail"
    assert set(bad["overrides"]) - set(good["overrides"]) == {"a=1", "c=1"}
    # every job dir ran the overrides the report says
    for job in state["jobs"]:
        assert (tmp_path / str(job["job"]) / "job.txt").read_text().split() == job["overrides"]
    text = (tmp_path / "isolate.md").read_text()
    assert "Minimal failure-inducing change: a=1 + c=1" in text and "Interaction" in text
    assert "| cause=[a,c] a=0 b=1 c=1 d=0 e=0 |" in text  # every probe's full overrides
    assert "Minimal failure-inducing change: a=1 + c=1" in flat(state["stdout"])
    # the answer is printed again last, after whatever the multirun's callbacks print
    last = state["stdout"].rstrip().split("\n\n")[-1].splitlines()  # the answer goes last, then where it is
    assert last[0].startswith("Isolation: 11 jobs") and last[-1].startswith("isolation: ")


def test_one_of_two_independent_causes_is_never_said_to_decide_it(tmp_path):
    state = isolate(["cause=[]", "either=[b,d]", *endpoints()], tmp_path / "two")
    assert state["answer"] in ("b=1", "d=1")
    other = "d=1" if state["answer"] == "b=1" else "b=1"
    assert state["others"]["verdict"] == "fail" and state["others"]["answer"] == other
    text = (tmp_path / "two" / "isolate.md").read_text()
    assert f"Not the only cause: also fails alone: {other}" in text and "One change decides it" not in text
    one = isolate(["cause=[b]", *endpoints()], tmp_path / "one")
    assert one["answer"] == "b=1" and one["others"]["verdict"] == "pass"
    assert "One change decides it: every other change together passes without it (job" in \
        (tmp_path / "one" / "isolate.md").read_text()


def test_report_re_renders_from_isolate_json(tmp_path, capsys):
    from sweep.report.isolate_report import main

    isolate(["cause=[b]", *endpoints()], tmp_path)
    (tmp_path / "isolate.md").unlink()
    assert main([str(tmp_path), "--format", "github"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Isolation: ") and "Minimal failure-inducing change: b=1" in out and "| probe" in out
    assert (tmp_path / "isolate.md").exists()
    assert main([str(tmp_path / "nowhere")]) == 2


def test_grid_is_scouted_for_endpoints(tmp_path):
    state = isolate(["cause=[d]", "a=0,1", "b=0,1", "c=0,1", "d=0,1"], tmp_path)
    assert state["answer"] == "d=1" and not state["interaction"] and state["deciding"] == ["d"]
    # 2 scouted endpoints, ddmin over 4 changes, 3 context probes (a, b, c moved): all still fail
    assert [p["phase"] for p in state["probes"][:2]] == ["scout", "scout"]
    assert [(c["key"], c["verdict"]) for c in state["context"]] == [("a", "fail"), ("b", "fail"), ("c", "fail")]
    assert state["grid_jobs"] == 16 and state["n_jobs"] <= 2 + 4 + 3
    assert "Under every other level of a, b, c it still fails" in flat(state["stdout"])


def test_from_sweep_nearest_and_farthest(tmp_path):
    grid = tmp_path / "grid"
    isolate(["cause=[a,b]", "a=0,1", "b=0,1"], grid, sweeper="basic")
    near = isolate([f"hydra.sweeper.from_sweep={grid}"], tmp_path / "near")
    # the nearest passing job differs in one override; the context probe finds the other factor
    assert near["answer"] in ("a=1", "b=1") and near["n_jobs"] == 3
    assert sorted(near["deciding"]) == ["a", "b"] and near["interaction"]
    other = "b" if near["answer"] == "a=1" else "a"
    assert near["conditions"] == {other: {"fails": ["1"], "passes": ["0"], "unknown": []}}
    assert f"it fails only with {other}=1; with {other}=0 it passes" in near["stdout"]
    far = isolate([f"hydra.sweeper.from_sweep={grid}", "hydra.sweeper.pick=farthest",
                   "hydra.sweeper.context=false"], tmp_path / "far")
    assert far["answer"] == "a=1 + b=1" and far["interaction"] and far["n_jobs"] == 4


def test_from_sweep_with_nothing_to_isolate_is_refused_when_the_sweeper_is_built(tmp_path):
    """A new user's from_sweep named a grid where every job passes: Hydra's traceback and exit 1
    (numerics); the sweeper refuses it as it is built, so the command line's check says it in one
    line, exit 2."""
    from hydra_plugins.sweep_isolate.isolate_sweeper import IsolateSweeper

    grid = tmp_path / "grid"
    isolate(["cause=[]", "a=0,1"], grid, sweeper="basic")
    with pytest.raises(ValueError, match=r"needs a failing and a passing job \(0 fail, 2 ok\): nothing to isolate"):
        IsolateSweeper(from_sweep=str(grid))


def test_from_sweep_runs_every_probe_with_its_grid_jobs_config(tmp_path):
    """Issue 52: the grid set steps=20 and added a key (+tag); the isolating process's own
    default grid (as ablation=report's params in the real tree) says steps=200. Every probe
    stands for a grid job and must run its resolved config, not the default grid's."""
    import yaml

    grid = tmp_path / "grid"
    isolate(["cause=[a,b]", "steps=20", "+tag=x", "a=0,1", "b=0,1"], grid, sweeper="basic")
    state = isolate([f"hydra.sweeper.from_sweep={grid}", "+ablation=report"],
                    tmp_path / "iso")
    assert state["answer"] in ("a=1", "b=1") and state["n_jobs"] == 3

    def config(job_dir):
        return yaml.safe_load((job_dir / "job.yaml").read_text())

    ran = {(c["a"], c["b"]): c for c in map(config, sorted(p for p in grid.iterdir() if p.name.isdigit()))}
    assert len(ran) == 4 and {c["steps"] for c in ran.values()} == {20}
    for job in state["jobs"]:
        probe = config(tmp_path / "iso" / str(job["job"]))
        assert probe == ran[(probe["a"], probe["b"])], job["overrides"]  # steps, +tag and every other value
    assert "each probe with the overrides its grid job ran with" in state["endpoints_from"]
    # a value the command line fixes goes on top of every probe, and the report says so
    fixed = isolate([f"hydra.sweeper.from_sweep={grid}", "steps=5"], tmp_path / "fixed")
    assert {config(tmp_path / "fixed" / str(j["job"]))["steps"] for j in fixed["jobs"]} == {5}
    assert "on top of every probe, steps=5" in fixed["endpoints_from"]


def test_disagreeing_repeats_are_unresolved(tmp_path):
    # probes where exactly a, b, c are 1 pass on odd job numbers and fail on even ones
    state = isolate(["cause=[a]", "flaky=[a,b,c]", "hydra.sweeper.repeat=2", *endpoints()], tmp_path)
    assert state["answer"] == "a=1" and state["one_minimal"]
    flaky = [p for p in state["probes"] if p["applied"] == "a=1 + b=1 + c=1"]
    assert flaky and flaky[0]["verdict"] == "unresolved" and len(flaky[0]["jobs"]) == 2
    assert state["n_jobs"] == 2 * len(state["probes"])
    assert "unresolved: its repeats disagree" in (tmp_path / "isolate.md").read_text()


def test_errored_probes_are_reported_and_routed_around(tmp_path):
    state = isolate(["cause=[b]", "crash=[a,b,c]", *endpoints()], tmp_path)
    assert state["answer"] == "b=1" and state["one_minimal"]
    errored = [j for j in state["jobs"] if j["status"] == "error"]
    assert len(errored) == 1 and "planted crash" in errored[0]["reason"]
    assert "planted crash" in (tmp_path / "isolate.md").read_text()


def test_budget_stops_with_best_so_far_and_numbering_is_deterministic(tmp_path):
    cut = isolate(["cause=[a,c]", "hydra.sweeper.max_jobs=5", *endpoints()], tmp_path / "cut")
    assert cut["status"] == "budget" and cut["n_jobs"] == 5
    assert cut["answer"] == "a=1 + b=1 + c=1"  # the smallest failing set after 5 jobs
    assert "Stopped by the budget" in (tmp_path / "cut" / "isolate.md").read_text()
    full = isolate(["cause=[a,c]", *endpoints()], tmp_path / "full")
    # the same probes get the same job numbers: what resume=true relies on
    assert [(j["job"], j["overrides"]) for j in cut["jobs"]] == [(j["job"], j["overrides"]) for j in full["jobs"][:5]]


def test_endpoints_that_do_not_flip(tmp_path):
    state = isolate(["cause=[a]", *endpoints(failing='["b=1"]')], tmp_path)
    assert state["status"] == "endpoints" and "failing config is pass" in state["reason"]
    assert "Nothing isolated" in flat(state["stdout"])


def test_bad_settings_fail_fast(tmp_path):
    cmd = [sys.executable, str(APP), "-m", "hydra/sweeper=isolate", "hydra.sweeper.repeat=0", *endpoints(),
           f"hydra.sweep.dir={tmp_path}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "repeat=0 must be >= 1" in proc.stderr


def test_a_probe_that_already_ran_is_not_launched_again(tmp_path):
    # scouts: job 0 (0,0,0) passes, job 1 (1,1,1) fails; ddmin finds a=1 + b=1, i.e. (1,1,0);
    # its context probe c=1 is (1,1,1), the failing scout: its job is reused
    state = isolate(["cause=[a,b]", "a=0,1", "b=0,1", "c=0,1"], tmp_path)
    assert state["answer"] == "a=1 + b=1" and state["deciding"] == ["a", "b"]
    assert state["context"] == [{"key": "c", "level": "1", "verdict": "fail", "jobs": [1]}]
    assert state["n_jobs"] == len(state["jobs"]) == 6


def test_runs_under_the_submitit_local_launcher(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    state = isolate(["hydra/launcher=submitit_local", "cause=[b]", *endpoints('["a=0","b=0"]', '["a=1","b=1"]')],
                    tmp_path)
    assert state["answer"] == "b=1" and state["n_jobs"] == 4  # endpoints, then a=1 and b=1 together
    assert [p["phase"] for p in state["probes"]] == ["endpoints", "endpoints", "subsets", "subsets"]


def test_a_probe_that_passes_only_within_an_envelope_too_wide_to_show_the_fault_has_no_verdict():
    """A new user's isolation called a bf16 probe a pass: the fault moved the fp32 job by 2e-4, inside
    bfloat16's band of 5e-3. Such a probe is unresolved (ddmin routes around it), and the
    report does not call the changes an interaction."""
    from types import SimpleNamespace

    from hydra_plugins.sweep_isolate._core import Isolation, job_row
    from sweep.analysis.isolate import FAIL, PASS, UNRESOLVED
    from sweep.report.isolate_report import verdict

    def record(status, diff, within, band):
        losses = {"standalone": [1.0, 0.9, 0.8], "distributed": [1.0, 0.9 + diff, 0.8 + diff]}
        return {"status": status, "losses": losses,
                "comparison": {"passed": status == "ok", "first_diff_step": 1 if diff else None, "max_abs_diff": diff,
                               "noise_floor": 0.0, "rtol": 1e-4, "atol": 1e-4},
                "envelope": {"measured": True, "loss": {"within": within, "band": band,
                                                        "first_beyond_step": None if within else 1}}}

    state = SimpleNamespace(departures=[])
    failing = job_row(1, ["mp_policy=fp32"], record("fail", 2e-4, False, 3e-7))
    coarse = dict(job_row(2, ["mp_policy=bf16"], record("fail", 2e-3, True, 5e-3)), rounding_fail=True)
    equal = job_row(0, [], record("ok", 0.0, True, 3e-7))
    assert coarse["resolution"] == 5e-3 and equal["resolution"] is None and failing["resolution"] is None
    assert Isolation.verdict(state, [coarse]) == PASS  # no failing probe yet: nothing it could hide
    assert Isolation.verdict(state, [failing]) == FAIL and state.departures == [2e-4]
    assert Isolation.verdict(state, [coarse]) == UNRESOLVED and Isolation.verdict(state, [equal]) == PASS
    text = verdict({"status": "done", "minimal": [0, 1], "answer": "a=1 + b=2", "probes": [], "jobs": [],
                         "removals": {"a": "pass", "b": "unresolved"}})
    assert "not proven an interaction" in text and "fail only together" not in text


def test_from_sweep_takes_no_passing_endpoint_that_carries_a_drift_below_the_tolerance():
    """A new user's grid: the fault under Adam passes but leaves its rounding envelope; the nearest
    passing job by overrides was that one, so the isolation's minimal change was the optimizer and
    the fault only a condition. A passing job equal to standalone (or within rounding) is taken
    first; one beyond its envelope only where no other passes."""
    from types import SimpleNamespace

    from hydra_plugins.sweep_isolate._core import clean_passes

    def row(job, first_diff, first_real, measured=True):
        return {"job": job, "status": "ok", "first_diff_step": first_diff, "first_real_step": first_real,
                "result": SimpleNamespace(envelope={"measured": measured})}

    hidden, equal, rounding = row(1, 1, 1), row(2, None, None), row(3, 0, None)
    assert clean_passes([hidden, equal, rounding]) == [equal, rounding]
    assert clean_passes([hidden]) == [hidden]
    unmeasured = row(4, 1, 1, measured=False)  # nothing measured: not told from rounding, kept
    assert clean_passes([hidden, unmeasured]) == [unmeasured]
