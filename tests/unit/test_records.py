"""The record types accept what the writers write and refuse files of the wrong shape."""

import pytest

from sweep.errors import RecordError
from sweep.records import SCHEMA_VERSION, JobRecord, RankResult
from tests.helpers.records import make_record


def test_a_record_round_trips(tmp_path):
    record = make_record("fail", ["optimizer=sgd"], {"n_steps": 3, "mean_signed_diff": -0.1}, "x")
    record.write(tmp_path / "result.json")
    back = JobRecord.read(tmp_path / "result.json")
    assert back == record and back.schema_version == SCHEMA_VERSION and not back.resumed


@pytest.mark.parametrize(
    "content, match",
    [
        ([1, 2, 3], "holds a list, not a job record"),
        ({"reason": "x"}, "status None"),
        ({"status": "great"}, "status 'great'"),
        ({"status": "ok"}, "status ok without a comparison"),
        ({"status": "ok", "comparison": {"passed": False}, "losses": {"standalone": [1.0], "distributed": [1.0]}},
         "status ok but comparison.passed=False"),
        ({"status": "fail", "comparison": {"passed": False}, "losses": {"standalone": [1.0]}},
         r"losses\['distributed'\] must be a non-empty list"),
        ({"status": "fail", "comparison": {"passed": False}, "losses": {"standalone": [1.0], "distributed": ["x"]}},
         "the string 'x', not a loss"),
        ({"status": "error", "schema_version": 99}, "newer than this sweep reads"),
        ({"status": "error", "overrides": "a=1"}, "overrides is a str"),
    ],
)
def test_a_job_record_of_the_wrong_shape_is_refused(content, match):
    with pytest.raises(RecordError, match=match):
        JobRecord.from_dict(content)


def test_an_old_record_without_a_version_still_reads():
    old = {"status": "error", "reason": "x", "launcher": {"job_id": "abc"}}  # schema 1: "launcher", no version
    assert JobRecord.from_dict(old).reason == "x"


def test_rank_results_are_checked_too():
    with pytest.raises(RecordError, match="has no 'framework'"):
        RankResult.from_dict({"rank": 0, "world_size": 2})
    r = RankResult.from_dict({"rank": 1, "world_size": 2, "framework": "torch", "distributed": [1.0, "nan"]})
    assert r.distributed == [1.0, "nan"] and r.engine_notes == []
