"""CI gate pieces, sweep-against-sweep, the HTML report and row limits, on constructed sweeps."""

import json
import xml.etree.ElementTree as ET

import pytest

from sweep.report import against
from sweep.report.summary import collect, main, write_report
from tests.helpers.records import make_record, write_job


def _cmp(passed, mean):
    return {"first_fail_step": None if passed else 2, "n_fail": 0 if passed else 3, "n_steps": 10,
            "max_abs_diff": abs(mean), "max_rel_diff": abs(mean), "mean_signed_diff": mean}


@pytest.fixture
def sweeps(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    for num, (opt, mesh) in enumerate([("adam", "dp2"), ("sgd", "dp2"), ("adam", "dp4"), ("sgd", "dp4")]):
        overrides = [f"optimizer={opt}", f"mesh={mesh}"]
        old_ok = opt == "adam"
        write_job(old, num, overrides, make_record("ok" if old_ok else "fail", overrides, _cmp(old_ok, 0.0 if old_ok
                                                                                               else -0.5), "x"))
        new_ok = opt == "adam" or mesh == "dp2"  # the fix helped dp2 only
        write_job(new, num, overrides, make_record("ok" if new_ok else "fail", overrides,
                                                   _cmp(new_ok, 0.0 if new_ok else -0.2), "y"))
    write_job(new, 4, ["optimizer=adamw", "mesh=dp2"], make_record("error", [], reason="boom"))
    return new, old


def test_against_names_what_was_fixed_broke_and_what_matches_nothing(sweeps):
    new, old = sweeps
    found = against.match(collect(new), collect(old))
    assert found["counts"]["fixed"] == 1 and found["counts"]["broke"] == 0
    assert found["counts"]["still failing"] == 1 and found["counts"]["still passing"] == 2
    assert [r["job"] for r in found["only_new"]] == [4] and found["only_old"] == []
    text = against.render(found, "new", "old")
    assert text.startswith("new against old: fixed: 1; broke: 0; still failing: 1; still passing: 2; "
                           "only in the new sweep: 1; only in the old: 0")
    assert "fail -> ok" in text and "+0.3" in text  # the signed drift of the still-failing job shrank by 0.3


def test_against_from_the_command_line(sweeps, capsys):
    new, old = sweeps
    assert main([str(new), "--against", str(old)]) == 0
    assert "fixed: 1; broke: 0; still failing: 1" in capsys.readouterr().out


@pytest.mark.parametrize("old, new, expected", [
    ("fail", "ok", "fixed"), ("ok", "fail", "broke"), ("error", "ok", "fixed"), ("ok", "error", "broke"),
    ("fail", "fail", "still failing"), ("fail", "error", "still failing"), ("error", "timeout", "other"),
    ("ok", "ok", "still passing"),
])
def test_change_classes(old, new, expected):
    assert against.change(old, new) == expected


def test_junit_xml_has_one_case_per_job_with_its_reason(sweeps):
    new, _ = sweeps
    write_report(new)
    root = ET.parse(new / "junit.xml").getroot()
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("5", "1", "1")
    cases = suite.findall("testcase")
    assert [c.get("name").split(":")[0] for c in cases] == ["job 0", "job 1", "job 2", "job 3", "job 4"]
    failed = cases[3].find("failure")
    assert failed is not None and failed.get("message") == "y" and "first_fail_step: 2" in failed.text
    assert cases[4].find("error").get("message") == "boom" and cases[0].find("failure") is None


def test_junit_carries_the_same_findings_as_summary_json(sweeps):
    new, _ = sweeps
    write_report(new)
    summary = json.loads((new / "summary.json").read_text())
    suite = ET.parse(new / "junit.xml").getroot().find("testsuite")
    props = [(p.get("name"), p.get("value")) for p in suite.find("properties")]
    assert props[0] == ("headline", summary["headline"])
    assert props[1:] == [(f"finding.{f['code']}", f["sentence"]) for f in summary["findings"]]
    out = suite.find("system-out").text.splitlines()
    assert out[0] == summary["headline"] and len(out) == len([f for f in summary["findings"] if f["code"] != "V000"]) + 1


def test_junit_is_read_by_a_junit_parser(sweeps):
    junitparser = pytest.importorskip("junitparser")
    new, _ = sweeps
    write_report(new)
    xml = junitparser.JUnitXml.fromfile(str(new / "junit.xml"))
    results = {case.name.split(":")[0]: [type(r).__name__ for r in case.result] for suite in xml for case in suite}
    assert results == {"job 0": [], "job 1": [], "job 2": [], "job 3": ["Failure"], "job 4": ["Error"]}


def test_html_report_links_its_plots_and_ships_plotly_beside_it(sweeps):
    new, _ = sweeps
    write_report(new)
    page = (new / "summary.html").read_text()
    assert page.startswith("<!doctype html>") and '<table class="jobs">' in page
    assert page.count('href="plots/') == 2  # the failing job and the factor effects, linked
    assert "5 jobs: 3 ok, 1 fail, 1 error" in page
    assert '<script src="plotly.min.js"' in page and (new / "plotly.min.js").stat().st_size > 1_000_000


@pytest.mark.parametrize("flag", ["-1", "0"])
def test_max_rows_minus_one_or_zero_shows_every_row(sweeps, capsys, flag):
    new, _ = sweeps
    assert main([str(new), "--max-rows", flag]) == 0
    out = capsys.readouterr().out
    start = out.index("Jobs (failing first)")
    end = out.find("\n\n", start)
    jobs = out[start:end if end >= 0 else len(out)]
    assert "more rows" not in out and all(f"\n{n} " in jobs for n in "01234")


def test_against_pairs_jobs_by_their_resolved_config_not_the_spelling_of_their_overrides(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    config = {"mesh": {"mesh_shape": [2], "mesh_dim_names": ["dp"]}, "steps": 10, "gate": False}
    write_job(old, 0, ["mesh=dp2"], make_record("fail", ["mesh=dp2"], _cmp(False, -0.5), "x", config=config))
    # the same job spelled otherwise, run with the gate on: one job
    write_job(new, 0, ["mesh.mesh_shape=[2]", "gate=true"],
              make_record("ok", ["mesh.mesh_shape=[2]"], _cmp(True, 0.0), config=dict(config, gate=True)))
    # the same overrides, another config (a default changed between the two sweeps): two jobs
    sgd = dict(config, optimizer={"name": "sgd"})
    write_job(old, 1, ["optimizer=sgd"], make_record("ok", ["optimizer=sgd"], _cmp(True, 0.0), config=sgd))
    write_job(new, 1, ["optimizer=sgd"], make_record("ok", ["optimizer=sgd"], _cmp(True, 0.0),
                                                     config=dict(sgd, steps=20)))
    found = against.match(collect(new), collect(old))
    assert [(n["job"], o["job"], c) for n, o, c in found["pairs"]] == [(0, 0, "fixed")]
    assert [r["job"] for r in found["only_new"]] == [1] and [r["job"] for r in found["only_old"]] == [1]
