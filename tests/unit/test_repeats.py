"""repeat=N: the record of a job's repeats, their spread, and how the report and the
verdict show a config whose repeats disagree, on constructed records (issue 15)."""

import json
import math

import numpy as np
import pytest

from sweep.report.findings import attribute
from sweep.config import schema
from sweep.config.schema import to_container
from sweep.errors import RecordError
from sweep.records import JobRecord
from sweep.report.summary import collect, write_report
from sweep.run import checks
from sweep.report.job_line import summary_line
from sweep.run.job import _comparable
from sweep.run.repeats import nondeterminism_note, repeat_spread
from tests.helpers.records import make_record, write_job

SPREAD = {"repeats": 3, "distributed_max_abs": 2e-3, "standalone_max_abs": 0.0, "statuses": ["ok", "fail", "fail"],
          "first_diff_steps": [50, 50, 50], "first_fail_steps": [None, 66, 78], "first_fail_range": [66, 78]}
NOTE = nondeterminism_note(SPREAD, traced=True)


def _entry(i, status, first_fail=None):
    return {"repeat": i, "status": status, "first_diff_step": 50, "first_fail_step": first_fail,
            "max_abs_diff": 0.0, "final_abs_diff": 0.0, "reason": None}


def _agree(n=2):
    return dict(repeats=[_entry(i, "ok") for i in range(n)], nondeterministic=False,
                repeat_spread={"repeats": n, "distributed_max_abs": 0.0, "standalone_max_abs": 0.0,
                               "statuses": ["ok"] * n, "first_diff_steps": [None] * n,
                               "first_fail_steps": [None] * n, "first_fail_range": None})


def _disagree(status="ok"):
    return dict(repeats=[_entry(0, status), _entry(1, "fail", 66), _entry(2, "fail", 78)], nondeterministic=True,
                repeat_spread=SPREAD, notes=[NOTE])


def _cmp(passed, msd=0.0, first_fail=None, first_diff=None):
    return {"n_steps": 10, "n_fail": 0 if passed else 3, "first_fail_step": first_fail, "first_diff_step": first_diff,
            "max_abs_diff": abs(msd), "max_rel_diff": abs(msd), "mean_signed_diff": msd}


def test_the_note_of_a_nondeterministic_job_is_one_note():
    assert NOTE == ("nondeterministic: 3 repeats disagree (distributed losses differ by up to 0.002, standalone by "
                    "up to 0, status ok/fail/fail, first failing step 66-78, the first differing tensor is from the "
                    "tracing rerun, another launch)")
    assert "; " not in NOTE


def test_a_record_with_repeats_round_trips_and_an_older_one_still_loads(tmp_path):
    record = make_record("ok", ["optimizer=adam"], _cmp(True), **_disagree())
    record.write(tmp_path / "r.json")
    back = JobRecord.read(tmp_path / "r.json")
    assert back == record and back.nondeterministic is True and back.repeat_spread == SPREAD
    old = {k: v for k, v in record.to_dict().items() if k not in ("repeats", "nondeterministic", "repeat_spread")}
    old["schema_version"] = 2
    older = JobRecord.from_dict(old)
    assert older.repeats is None and older.nondeterministic is None and older.repeat_spread is None


@pytest.mark.parametrize("key, value", [("repeats", {"0": 1}), ("repeats", [{"repeat": 0}]),
                                        ("nondeterministic", "yes"), ("repeat_spread", [1.0])])
def test_ill_typed_repeat_fields_are_refused(key, value):
    data = make_record("ok", [], _cmp(True)).to_dict()
    data[key] = value
    with pytest.raises(RecordError, match=key):
        JobRecord.from_dict(data)


def test_the_spread_is_the_largest_difference_between_two_repeats_at_one_step():
    a = {"standalone": np.array([1.0, 1.0, 1.0]), "rank0": np.array([1.0, 2.0, math.nan]),
         "rank1": np.array([1.0, 2.0, 3.0])}
    b = {"standalone": np.array([1.0, 1.0, 1.0]), "rank0": np.array([1.0, 2.5, math.nan]),
         "rank1": np.array([1.0, 2.0, 3.25])}
    entries = [_entry(0, "ok"), _entry(1, "fail", 2)]
    spread = repeat_spread([a, b], entries)
    assert spread["distributed_max_abs"] == 0.5 and spread["standalone_max_abs"] == 0.0  # NaN == NaN at one step
    assert spread["statuses"] == ["ok", "fail"] and spread["first_fail_range"] == [2, 2]
    c = dict(b, rank0=np.array([1.0, 2.0, 3.0]))  # a number where the others have NaN
    assert repeat_spread([a, c], entries)["distributed_max_abs"] == math.inf
    assert repeat_spread([a, dict(a)], [_entry(0, "ok")] * 2)["distributed_max_abs"] == 0.0


def test_repeat_is_a_verdict_field_checked_on_resume_and_at_least_one(compose_cfg):
    assert "repeat" in schema.fields_with(schema.VERDICT)
    assert _comparable(to_container(compose_cfg(["repeat=3"]))) != _comparable(to_container(compose_cfg()))
    with pytest.raises(schema.ConfigError, match="repeat=0: must be >= 1"):
        checks.check(compose_cfg(["repeat=0"]))


def test_a_verdict_resting_on_a_nondeterministic_config_says_so(tmp_path):
    # o=b fails; its job's three repeats gave ok, fail, fail: the culprit rests on it
    write_job(tmp_path, 0, ["o=a"], make_record("ok", ["o=a"], _cmp(True), **_agree(3)))
    write_job(tmp_path, 1, ["o=b"], make_record("fail", ["o=b"], _cmp(False, 2e-3, 66, 50), **_disagree("fail")))
    write_report(tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [n["job"] for n in summary["nondeterministic"]] == [1]
    assert summary["nondeterministic"][0]["spread"] == SPREAD
    jobs = summary["jobs"]
    assert [j["nondeterministic"] for j in jobs] == [False, True]
    assert jobs[0]["repeats"] == "3 agree" and jobs[1]["repeats"] == "3 differ by 0.002 (ok/fail/fail)"
    assert jobs[1]["repeat_spread"] == SPREAD
    verdict = summary["verdict"]
    assert "Culprit: o=b" in verdict
    assert ("Nondeterministic: job 1 (3 repeats differ by up to 0.002, status ok/fail/fail, first failing step "
            "66-78); this verdict rests on it, and a rerun may judge differently.") in verdict
    assert "Note: nondeterministic (1 job)." in verdict  # the note counts as one kind, not split apart
    md = (tmp_path / "summary.md").read_text()
    assert "3 differ by 0.002" in md and "Nondeterministic: job 1" in md


def test_a_passing_sweep_with_a_nondeterministic_config_is_no_clean_bill(tmp_path):
    write_job(tmp_path, 0, ["o=a"], make_record("ok", ["o=a"], _cmp(True), **_agree()))
    write_job(tmp_path, 1, ["o=b"], make_record("ok", ["o=b"], _cmp(True), **_disagree("ok")))
    verdict = attribute(collect(tmp_path))["verdict"]
    assert verdict.startswith("2 jobs: 2 ok. No job fails")
    assert "Nondeterministic: job 1 (3 repeats differ by up to 0.002, status ok/fail/fail" in verdict
    assert "this verdict rests on it" in verdict


def test_a_nondeterministic_config_outside_the_evidence_is_named_as_such(tmp_path):
    # the culprit o=b rests on jobs 0 and 1 (pairs along o); job 2 differs from job 0 in p only
    write_job(tmp_path, 0, ["o=a", "p=x"], make_record("ok", ["o=a", "p=x"], _cmp(True), **_agree()))
    write_job(tmp_path, 1, ["o=b", "p=x"], make_record("fail", ["o=b", "p=x"], _cmp(False, 2e-3, 3, 1), **_agree()))
    write_job(tmp_path, 2, ["o=a", "p=y"], make_record("ok", ["o=a", "p=y"], _cmp(True), **_disagree("ok")))
    verdict = attribute(collect(tmp_path))["verdict"]
    assert "Culprit: o=b" in verdict
    assert "Nondeterministic, but not part of the evidence above: job 2 (3 repeats differ" in verdict
    assert "rests on" not in verdict


def test_repeats_that_agree_are_said_to_agree_and_no_repeats_say_nothing(tmp_path):
    write_job(tmp_path, 0, ["o=a"], make_record("ok", ["o=a"], _cmp(True), **_agree()))
    write_job(tmp_path, 1, ["o=b"], make_record("ok", ["o=b"], _cmp(True), **_agree()))
    att = attribute(collect(tmp_path))
    assert "Repeats agree: each of the 2 repeated jobs gave the same losses in every launch." in att["verdict"]
    assert att["nondeterministic"] == []
    plain = tmp_path / "plain"
    write_job(plain, 0, ["o=a"], make_record("ok", ["o=a"], _cmp(True)))
    write_job(plain, 1, ["o=b"], make_record("ok", ["o=b"], _cmp(True)))
    rows = collect(plain)
    assert [r["repeats"] for r in rows] == [None, None] and "epeat" not in attribute(rows)["verdict"]


def test_the_terminal_line_of_a_job_says_whether_its_repeats_agree():
    assert summary_line(make_record("ok", ["o=a"], _cmp(True), **_agree())).count("2 repeats agree") == 1
    line = summary_line(make_record("fail", ["o=b"], _cmp(False, 2e-3, 66, 50), **_disagree("fail")))
    assert "NONDETERMINISTIC: 3 repeats differ by up to 0.002" in line
    assert "repeat" not in summary_line(make_record("ok", ["o=a"], _cmp(True)))


def test_a_job_line_says_what_its_status_alone_does_not():
    # passing the tolerance with losses far beyond their rounding envelope: a fault the tolerance is too coarse for
    ok = make_record("ok", ["o=a"], _cmp(True), envelope={"measured": True, "loss": {
        "within": False, "first_beyond_step": 0, "ratio": 481.0}})
    assert "[within tolerance, yet the losses leave their rounding envelope from step 0 (up to 481x it): more than " \
           "float rounding]" in summary_line(ok)
    ok.envelope["loss"]["within"] = True
    assert "envelope" not in summary_line(ok)
    # failing with the losses within tolerance: what it fails on, each clause's head
    fail = make_record("fail", ["o=b"], _cmp(True), reason="replicas disagree from step 0: rank 0 and rank 1 hold "
                       "different values; the copies end apart: rank 1: buffer bn.running_mean after the last step")
    assert "mean diff=+0 fails on: replicas disagree from step 0; the copies end apart  (" in summary_line(fail)
