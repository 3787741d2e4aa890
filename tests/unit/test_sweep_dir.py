"""A sweep dir holds one grid and its results are never overwritten silently
(``sweep.run.sweep_dir.claim``): the same grid again is refused with the two ways out."""

import pytest

from sweep.errors import ConfigError
from sweep.run.sweep_dir import REPLACED, claim

GRID = [["optimizer=adam"], ["optimizer=sgd"]]


def _with_results(tmp_path, n=2):
    for i in range(n):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "result.json").write_text('{"status": "ok"}')


def test_the_same_grid_into_a_dir_with_its_results_is_refused_with_the_two_ways_out(tmp_path):
    _with_results(tmp_path)
    with pytest.raises(ConfigError) as caught:
        claim(tmp_path, GRID, GRID)
    message = str(caught.value)
    assert "already holds the results of this grid (2 of 2 jobs)" in message
    assert "resume=true" in message and "replace_grid=true" in message
    assert (tmp_path / "0" / "result.json").exists()  # nothing moved, nothing lost
    (tmp_path / "1" / "result.json").write_text('{"status": "error", "reason": "interrupted"}')
    with pytest.raises(ConfigError, match=r"\(2 of 2 jobs, 1 of them judged\)"):  # an interrupted job's is no result
        claim(tmp_path, GRID, GRID)


def test_resume_runs_into_it_and_replace_grid_moves_the_results_aside(tmp_path):
    _with_results(tmp_path)
    claim(tmp_path, GRID, GRID, resume=True).release()
    assert (tmp_path / "0" / "result.json").exists()
    claim(tmp_path, GRID, GRID, replace_grid=True).release()
    assert not (tmp_path / "0").exists()
    assert len(list((tmp_path / REPLACED).glob("*/0/result.json"))) == 1


def test_a_dir_whose_jobs_never_finished_or_an_unknown_plan_is_taken(tmp_path):
    (tmp_path / "0").mkdir()  # started, no result: nothing to lose
    held = claim(tmp_path, GRID, GRID)
    assert held.fd >= 0 and (tmp_path / "0").is_dir()
    held.release()
    (tmp_path / "other").mkdir()
    _with_results(tmp_path / "other")
    # a sweeper that picks its jobs as it goes (an isolation, a bisection): its plan is not known here, and its
    # results are not overwritten silently either (a new user's isolation, run again, ran every job anew)
    with pytest.raises(ConfigError, match=r"already holds the results of an earlier run of this sweeper \(2 jobs\)"):
        claim(tmp_path / "other", None, GRID)
    held = claim(tmp_path / "other", None, GRID, resume=True)
    assert held.fd >= 0 and (tmp_path / "other" / "0" / "result.json").exists()
    held.release()


def test_replace_grid_moves_the_whole_report_aside(tmp_path):
    _with_results(tmp_path)
    for name in ("summary.md", "summary.html", "junit.xml", "plotly.min.js"):
        (tmp_path / name).write_text("old")
    claim(tmp_path, GRID, GRID, replace_grid=True).release()
    moved = next((tmp_path / REPLACED).iterdir())
    assert all((moved / name).read_text() == "old" for name in ("summary.md", "summary.html", "junit.xml",
                                                                 "plotly.min.js"))
    assert not (tmp_path / "summary.html").exists()


def test_the_same_jobs_in_another_order_are_refused_saying_so(tmp_path):
    _with_results(tmp_path)
    with pytest.raises(ConfigError, match=r"the same jobs in another order: jobs are numbered in the order of the "):
        claim(tmp_path, GRID[::-1], GRID, resume=True)
    assert (tmp_path / "0" / "result.json").exists()
