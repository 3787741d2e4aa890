"""The bisection (sweep.analysis.bisect): at most ceil(log2 n) probes without skips, the
first failing commit whatever its place, skips stepped over, every commit skipped said;
its report (sweep.report.bisect_report); the runtime a job runs under
(sweep.launch.runtime, the runtime section's checks)."""

import math
import os
import sys

import pytest

from sweep.analysis.bisect import FAIL, PASS, SKIP, Bisection
from sweep.config.sections.runtime import RuntimeConfig
from sweep.errors import ConfigError
from sweep.launch import runtime
from sweep.report.bisect_report import render, verdict


def _bisect(n, first_bad, skipped=()):
    b = Bisection([f"c{i}" for i in range(n)])
    probes = []
    while (i := b.next_probe()) is not None:
        probes.append(i)
        b.record(i, SKIP if i in skipped else FAIL if i >= first_bad else PASS)
    return b, probes


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 16, 33])
def test_the_first_failing_commit_in_at_most_ceil_log2_n_probes(n):
    for first_bad in range(n):
        b, probes = _bisect(n, first_bad)
        found = b.result()
        assert found["first_bad"] == first_bad and found["parent"] == first_bad - 1
        assert len(probes) <= math.ceil(math.log2(n)) if n > 1 else not probes
        assert found["proven"] == (first_bad in probes)  # the bad end itself is given, not probed
        assert len(set(probes)) == len(probes)


def test_a_skipped_commit_is_stepped_over_and_all_skipped_leaves_the_candidates():
    b, probes = _bisect(8, first_bad=5, skipped={3})
    assert b.result()["first_bad"] == 5 and 3 in probes and len(probes) <= b.bound + 1
    b, _ = _bisect(8, first_bad=5, skipped={4})  # the parent of the first bad cannot run
    assert b.result() == {"first_bad": None, "candidates": [4, 5], "parent": 3, "proven": False}
    with pytest.raises(ValueError, match="not in doubt"):
        b.record(0, PASS)
    with pytest.raises(ValueError, match="allowed"):
        Bisection(["a", "b"]).record(0, "maybe")
    with pytest.raises(ValueError, match="ancestor"):
        Bisection([])


def test_the_report_names_the_commit_its_subject_and_the_probes_that_prove_it():
    commits = [{"sha": str(i) * 40, "subject": f"step {i}"} for i in range(1, 5)]
    skip = {"probe": 0, "sha": commits[1]["sha"], "subject": "step 2", "verdict": "skip", "jobs": [0],
            "reason": "job 0 error: does not import"}
    state = {"repo": "/r", "good": "g", "bad": "b", "status": "done", "commits": commits, "n_commits": 4, "bound": 2,
             "n_probes": 3, "result": {"first_bad": None, "candidates": [1, 2], "parent": 0},
             "probes": [skip, {"probe": 1, "sha": commits[0]["sha"], "subject": "step 1", "verdict": "pass", "jobs": [1]},
                        {"probe": 2, "sha": commits[2]["sha"], "subject": "step 3", "verdict": "fail", "jobs": [2]}]}
    assert verdict(state) == ("Not decided: the first failing commit is one of 2222222222 'step 2', 3333333333 "
                              "'step 3'; every one left was skipped. 3 probes over 4 commits (ceil(log2 n) = 2).")
    text = render(state)
    assert "| skip " in text and "- 2222222222 'step 2': job 0 error: does not import" in text
    state["probes"][0] = dict(skip, verdict="pass", reason=None)
    state.update(result={"first_bad": 2, "candidates": [2], "parent": 1}, first_bad=commits[2], parent=commits[1])
    assert verdict(state) == ("First failing commit: 3333333333 'step 3': its probe fails (jobs 2); its parent "
                              "2222222222 'step 2' passes (jobs 0). 3 probes over 4 commits (ceil(log2 n) = 2).")
    state.update(result={"first_bad": 3, "candidates": [3], "parent": 2}, first_bad=commits[3], parent=commits[2])
    state["probes"][2] = dict(state["probes"][2], verdict="pass")
    assert "its probe fails" not in verdict(state) and "it is hydra.sweeper.bad=b, given as failing" in verdict(state)
    assert verdict({"status": "error", "reason": "git rev-parse: unknown revision"}) == \
        "Bisection not run: git rev-parse: unknown revision"


def test_the_runtime_goes_into_the_launch_environment_and_the_path_of_this_process(tmp_path):
    assert runtime.launch_env(None, None) == {}
    env = runtime.launch_env("/venvs/b/bin/python", f"{tmp_path}{os.pathsep}~/src", {"PYTHONPATH": "/old"})
    assert env[runtime.PYTHON_ENV] == "/venvs/b/bin/python" and runtime.interpreter(env) == "/venvs/b/bin/python"
    assert env["PYTHONPATH"].split(os.pathsep) == [str(tmp_path), os.path.expanduser("~/src"), runtime.SWEEP_ROOT,
                                                   "/old"]
    assert runtime.interpreter({}) == sys.executable
    (tmp_path / "probe_pkg_x").mkdir()
    (tmp_path / "probe_pkg_x" / "__init__.py").write_text("VALUE = 1\n")
    with runtime.on_path(str(tmp_path)):
        import probe_pkg_x

        assert probe_pkg_x.VALUE == 1 and str(tmp_path) in sys.path
    assert "probe_pkg_x" not in sys.modules and str(tmp_path) not in sys.path  # the next checkout imports afresh


def test_a_runtime_that_is_not_there_is_refused_with_its_value(tmp_path):
    with pytest.raises(ConfigError, match="runtime.python=/no/such/python: no executable file"):
        RuntimeConfig.check(RuntimeConfig(python="/no/such/python"))
    with pytest.raises(ConfigError, match="is not a directory"):
        RuntimeConfig.check(RuntimeConfig(pythonpath=str(tmp_path / "missing")))
    RuntimeConfig.check(RuntimeConfig(python=sys.executable, pythonpath=str(tmp_path)))


def test_a_skip_does_not_pull_the_next_probes_off_the_middle():
    """A tester's 8 commits, the fault at bad, the middle one unimportable: 4 probes
    (ceil(log2 8) + the skip), not 5; every place of the fault and of one skip stays within
    ceil(log2 n) + 1."""
    b, probes = _bisect(8, first_bad=7, skipped={3})
    assert b.result()["first_bad"] == 7 and len(probes) == 4
    for n in (5, 8, 14, 16):
        for first_bad in range(n):
            for skip in range(n - 1):
                if skip in (first_bad - 1, first_bad):
                    continue  # the first bad or its parent skipped: undecidable, said so (above)
                b, probes = _bisect(n, first_bad, skipped={skip})
                assert b.result()["first_bad"] == first_bad
                assert len(probes) <= math.ceil(math.log2(n)) + 1, (n, first_bad, skip, probes)


def test_the_command_line_of_a_bisection_is_checked_before_hydra_starts():
    from sweep.config import CONF_DIR
    from sweep.run.preflight import check_command_line

    missing = check_command_line(["-m", "hydra/sweeper=bisect", "hydra.sweeper.repo=/r"], CONF_DIR)
    assert missing.startswith("hydra/sweeper=bisect needs hydra.sweeper.good, hydra.sweeper.bad")
    tilde = check_command_line(["-m", "hydra/sweeper=bisect", "hydra.sweeper.good=main~3"], CONF_DIR)
    assert tilde.endswith("""(Hydra's grammar takes ~ and ^ only quoted: 'hydra.sweeper.good="main~3"')""")


def test_a_runtime_python_that_is_no_python_is_refused():
    with pytest.raises(ConfigError, match="not a Python 3 interpreter"):
        RuntimeConfig.check(RuntimeConfig(python="/bin/true"))


def test_the_report_of_a_dir_that_is_no_bisection_is_one_line_and_exit_2(tmp_path, capsys):
    from sweep.report.bisect_report import main

    assert main([str(tmp_path)]) == 2  # (a FileNotFoundError's traceback, before)
    assert capsys.readouterr().err.startswith(f"error: no bisect.json in {tmp_path}")
