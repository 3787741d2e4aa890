"""The summary table from a constructed sweep dir (the layout Hydra and sweep.run.job write)."""

import csv
import json
import re

import pytest

from tests.conftest import flat
import yaml

from sweep.report.summary import MAX_ROWS, collect, factors, main, write_report
from tests.helpers.records import make_record, write_job


def _job(sweep_dir, num, overrides, status=None, comparison=None, reason=None, **extra):
    """A job dir as Hydra and sweep.run.job write it; ``extra`` adds record fields
    (``losses``, ``ranks_agree``, ``dtypes``)."""
    record = None if status is None else make_record(status, overrides, comparison, reason, **extra)
    write_job(sweep_dir, num, overrides, record)


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


def test_report_leads_with_the_headline_then_the_findings_with_their_codes_and_the_jobs(sweep_dir):
    text = write_report(sweep_dir, "simple")
    headline, findings = (part for part in text.split("\n\n")[:2])
    assert all(len(line) <= 120 for line in findings.splitlines())
    headline = flat(headline)
    assert headline.startswith("4 jobs: 1 ok, 1 fail, 1 error, 1 missing. Culprit: optimizer=sgd, failing in 1 of 1 "
                               "one-factor pairs where optimizer=adam passes.")
    assert headline.count(". ") <= 2 and "(" not in headline  # three short sentences at most, no parentheses
    assert findings.startswith("Findings (codes: python -m sweep explain CODE):\n- V101 culprit: Culprit: "
                               "optimizer=sgd, failing in 1 of 1")
    assert "- V161 not judged: Not judged: job 2 error: launcher exited with code 1." in flat(findings)
    assert "- drift:" not in text  # the columns' legend is the files' and the page's, not the terminal's
    md = (sweep_dir / "summary.md").read_text()
    titles = ["## Findings", "## Factor levels", "## One-factor contrasts", "## Jobs"]
    positions = [md.index(t) for t in titles]
    assert positions == sorted(positions) and "- drift:" in md  # the legend once, in the file
    assert "**V101** culprit: Culprit: optimizer=sgd" in md and "job 10 missing" in md
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert set(summary) == {
        "sweep_dir", "findings", "headline", "verdict", "factors", "counts", "judged", "not_judged", "culprits",
        "interactions", "levels", "contrasts", "drift", "drift_rule", "plots", "jobs", "ties", "scalers",
        "onset_rule", "confounded", "nondeterministic", "fixes",
    }
    codes = [f["code"] for f in summary["findings"]]
    assert codes[:2] == ["V000", "V101"] and codes.count("V161") == 2
    culprit = summary["findings"][1]
    assert culprit["levels"] == ["optimizer=sgd"] and culprit["jobs"] == [1] and culprit["values"]["to_fail"] == 1
    assert culprit["sentence"] in summary["verdict"] and summary["headline"] == headline
    assert summary["culprits"][0]["level"] == "sgd"
    assert [j["job"] for j in summary["not_judged"]] == [2, 10]
    assert summary["drift"]["step0"] == [1] and summary["plots"] == ["plots/job_1.png", "plots/factor_effects.png"]


def test_job_metrics_come_from_the_losses_and_the_dtypes_that_ran(tmp_path):
    losses = {"standalone": [1.0, 1.0, 1.0], "distributed": [1.0, 0.99, "nan"]}
    cmp = {**_cmp(False, 1, -0.01), "atol": 1e-4, "rtol": 1e-4}
    _job(tmp_path, 0, ["mp_policy=bf16"], "fail", cmp, "2/3 steps", losses=losses, ranks_agree=False, dtypes={
        "configured": {"param_dtype": "bfloat16", "reduce_dtype": "float32", "output_dtype": None},
        "observed": {"param_forward": "float32", "grad": "float32", "output": None},
    })
    same = {"standalone": [1.0], "distributed": [1.0]}
    _job(tmp_path, 1, ["mp_policy=fp32"], "ok", _cmp(True, None, 0.0), losses=same)
    failing, older = collect(tmp_path)
    assert failing["step0_diff"] == 0.0 and failing["runs_low_pct"] == 50.0 and failing["drift"] == "first_update"
    assert failing["dtypes_configured"] == "bfloat16/float32/-" and failing["dtypes_ran"] == "float32/?/float32/?/?/?"
    assert failing["policy_applied"] is False
    assert failing["notes"] == (
        "ranks disagree; policy not applied (configured/ran bfloat16/float32/- vs float32/?/float32/?/?/?)"
    )
    assert older["dtypes_ran"] is None and older["policy_applied"] is None and older["notes"] is None  # no "dtypes" key
    text = write_report(tmp_path, "simple")
    assert "policy not applied" in text
    with open(tmp_path / "summary.csv") as f:
        assert next(csv.DictReader(f))["dtypes_ran"] == "float32/?/float32/?/?/?"
    assert (tmp_path / "plots" / "job_0.png").exists() and not (tmp_path / "plots" / "job_1.png").exists()


@pytest.fixture
def large_sweep(tmp_path):
    """300 jobs: a (10 levels) x b (10 levels) x c (3 levels); c=z fails, 5 jobs errored."""
    num = 0
    for a in range(10):
        for b in range(10):
            for c in "xyz":
                if num % 60 == 7:
                    _job(tmp_path, num, [f"a={a}", f"b={b}", f"c={c}"], "error", None, "rank 1 crashed")
                elif c == "z":
                    _job(tmp_path, num, [f"a={a}", f"b={b}", f"c={c}"], "fail", _cmp(False, 20, -0.01 * (num + 1)), "x")
                else:
                    _job(tmp_path, num, [f"a={a}", f"b={b}", f"c={c}"], "ok", _cmp(True, None, 0.0))
                num += 1
    return tmp_path


def test_a_large_sweep_keeps_a_short_first_screen_failing_jobs_first(large_sweep):
    text = write_report(large_sweep, "simple", plots=False)  # 100 drifting jobs' plots: a minute (test_plots)
    assert not list(large_sweep.glob("plots/*.png")) and json.loads((large_sweep / "summary.json").read_text())[
        "plots"] == []
    assert text.startswith("300 jobs: 195 ok, 100 fail, 5 error") and "Culprit: c=z" in text
    jobs = text[text.index("Jobs (failing first):"):]
    body = [line for line in jobs.splitlines()[3:] if line[:1].isdigit()]
    assert len(body) == MAX_ROWS and all(" fail " in line for line in body)
    assert body[0].split()[0] == "299"  # the largest drift first
    assert "... 260 more rows: see summary.md" in jobs
    assert len(text.splitlines()) < 4 * MAX_ROWS + 60  # every table and list is cut
    md = (large_sweep / "summary.md").read_text()
    assert "more rows" not in md and "| 299 " in md and "| 0 " in md  # the files are complete
    with open(large_sweep / "summary.csv") as f:
        assert len(list(csv.DictReader(f))) == 300


def test_cli_max_rows_option(sweep_dir, capsys):
    assert main([str(sweep_dir), "--max-rows", "1"]) == 0
    out = capsys.readouterr().out
    assert "... 3 more rows: see summary.md" in out
    assert main([str(sweep_dir), "--max-rows", "0"]) == 0
    assert "more rows" not in capsys.readouterr().out


def test_cli_no_plots_keeps_and_links_the_plots_drawn_before(sweep_dir, capsys):
    assert main([str(sweep_dir)]) == 0
    drawn = json.loads((sweep_dir / "summary.json").read_text())["plots"]
    html = (sweep_dir / "summary.html").read_text()
    assert drawn
    stamps = {p: (sweep_dir / p).stat().st_mtime_ns for p in drawn}
    assert main([str(sweep_dir), "--no-plots"]) == 0
    assert json.loads((sweep_dir / "summary.json").read_text())["plots"] == sorted(drawn)
    assert {p: (sweep_dir / p).stat().st_mtime_ns for p in drawn} == stamps  # not drawn again
    assert (sweep_dir / "summary.html").read_text() == html  # the same plots, shown alike


def test_an_empty_sweep_dir_renders(tmp_path):
    (tmp_path / "multirun.yaml").write_text("{}")  # Hydra writes it before the first job
    assert write_report(tmp_path).startswith("0 jobs: nothing to judge.")
    assert json.loads((tmp_path / "summary.json").read_text())["jobs"] == []


def test_a_dir_that_is_no_sweep_is_refused(tmp_path):
    (tmp_path / "result.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="not a multirun dir"):
        write_report(tmp_path)


def test_a_single_runs_dir_is_rendered_again_as_the_run_printed_it(tmp_path, capsys):
    record = make_record("fail", ["optimizer=sgd", "steps=4"], {"n_steps": 4, "first_fail_step": 1, "n_fail": 3,
                                                                  "max_abs_diff": 0.5, "mean_signed_diff": 0.5})
    record.write(tmp_path / "result.json")
    assert main([str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0].startswith("[   fail] optimizer=sgd steps=4  max|diff|=0.5"), out
    assert "not a multirun dir" not in out + err and "written: " in err
    assert (tmp_path / "report.html").exists() and not (tmp_path / "summary.md").exists()
    (tmp_path / "report.html").unlink()
    assert main([str(tmp_path), "--print-only"]) == 0 and not (tmp_path / "report.html").exists()
    (tmp_path / "result.json").write_text("{}")
    assert main([str(tmp_path)]) == 2 and "result.json" in capsys.readouterr().err


def test_jobs_the_multirun_planned_but_never_started_are_listed(tmp_path):
    """multirun.yaml (written by Hydra before any job) gives the whole grid: jobs without
    a dir (cancelled before they started) are rows too, with their overrides."""
    (tmp_path / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {
        "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                    "params": {"steps": "10", "mesh": "dp2,dp4"}},
        "overrides": {"task": ["optimizer=adam,sgd"]},
    }}))
    _job(tmp_path, 0, ["steps=10", "mesh=dp2", "optimizer=adam"], "ok", _cmp(True, None, 0.0))
    rows = collect(tmp_path)
    assert [r["job"] for r in rows] == [0, 1, 2, 3]
    assert [r["status"] for r in rows] == ["ok", "missing", "missing", "missing"]
    assert rows[3]["overrides"] == {"steps": "10", "mesh": "dp4", "optimizer": "sgd"}
    assert rows[1]["reason"] == "never started (no job dir)"
    assert factors(rows) == ["mesh", "optimizer"]


@pytest.mark.parametrize("content, reason", [
    ("[1, 2, 3]", "holds a list, not a job record"),
    ('{"reason": "x"}', "status None"),
    ('{"status": "splendid"}', "status 'splendid'"),
    ('{"status": "ok"}', "status ok without a comparison"),
    ("{", "not JSON"),
    ("", "not JSON"),
])
def test_a_result_file_of_the_wrong_shape_makes_its_job_missing_with_the_reason(tmp_path, content, reason):
    _job(tmp_path, 0, ["optimizer=adam"], "ok", _cmp(True, None, 0.0))
    _job(tmp_path, 1, ["optimizer=sgd"])
    (tmp_path / "1" / "result.json").write_text(content)
    (tmp_path / "1" / ".hydra" / "overrides.yaml").write_text("{not: [a list")  # an unreadable overrides file too
    text = write_report(tmp_path)
    rows = collect(tmp_path)
    assert [r["status"] for r in rows] == ["ok", "missing"]
    assert reason in rows[1]["reason"] and "unreadable result.json" in rows[1]["reason"]
    assert "1 missing" in text.splitlines()[0]


def test_a_report_covers_the_planned_jobs_only_and_no_stale_result(tmp_path):
    (tmp_path / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {
        "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper", "params": None},
        "overrides": {"task": ["optimizer=adam,sgd", "resume=true"]},
    }}))
    _job(tmp_path, 0, ["optimizer=adam", "resume=true"], "ok", _cmp(True, None, 0.0))
    _job(tmp_path, 1, ["mesh=dp4"], "ok", _cmp(True, None, 0.0))  # another grid's job in this number
    _job(tmp_path, 5, ["mesh=dp2"], "ok", _cmp(True, None, 0.0))  # beyond this grid
    rows = collect(tmp_path)
    assert [r["job"] for r in rows] == [0, 1]
    assert rows[1]["status"] == "missing" and "another grid's job (mesh=dp4)" in rows[1]["reason"]
    assert factors(rows) == ["optimizer"]  # resume is a switch of the run, not a factor


def test_nothing_judged_is_said(tmp_path):
    _job(tmp_path, 0, ["device=npu"], "error", None, "invalid config: device=npu needs torch_npu")
    _job(tmp_path, 1, ["device=cuda"], "timeout", None, "no result after 30 s")
    outcome = {}
    text = write_report(tmp_path, outcome=outcome)
    assert text.startswith("2 jobs: 1 error, 1 timeout")
    assert "Nothing could be judged: no job produced a comparison (1 x invalid config: device=npu" in text
    assert outcome == {"counts": {"ok": 0, "fail": 0, "error": 1, "timeout": 1, "missing": 0}, "judged": 0,
                       "culprit": False}


def test_the_time_left_leaves_out_the_start_up():
    from sweep.run.callbacks import ProgressCallback

    progress = ProgressCallback()
    progress.total, progress.done, progress.failed = 10, 2, 0
    progress.durations = [30.0, 2.0]  # the first job paid for starting the shared launch
    assert progress.line(32.0).endswith("~0m16s left")
    # a resumed sweep's jobs taken from disk take no time: they neither count toward the rate nor give one
    resumed = ProgressCallback()
    resumed.total, resumed.done, resumed.failed, resumed.durations = 12, 5, 0, []
    assert resumed.line(1.0) == "[progress] 5/12 jobs, 0 not ok, 0m01s elapsed"
    import time

    resumed.began, resumed.job_began = time.monotonic() - 5.0, time.monotonic() - 1.0
    resumed.on_job_end(None, type("R", (), {"_return_value": {"status": "ok", "resumed": True}})())
    assert resumed.durations == [] and resumed.done == 6


def test_the_terminal_job_table_fits_120_columns_and_wide_shows_the_rest(tmp_path, capsys):
    """The default grid's five factors (issue 28): factors, status, drift class, first step,
    max difference; the first tensor and the notes only with --wide and in the files."""
    grids = (["mp_policy=fp32", "reshard_after_forward=false", "mesh=hsdp2x2", "deterministic=false", "optimizer=adam"],
             ["mp_policy=bf16", "reshard_after_forward=true", "mesh=dp2", "deterministic=true", "optimizer=sgd"])
    for num, overrides in enumerate(grids):
        _job(tmp_path, num, overrides, "ok", _cmp(True, None, 6.01e-5 * num),
             first_tensor={"description": "layer0.bias grad at step 0, abs 4.31e-05, rel 0.00395; the first gradient "
                                          "(initial weights equal)", "step": 0, "kind": "grad", "rel_diff": 4e-3})
    (tmp_path / "multirun.yaml").write_text("{}")
    text = write_report(tmp_path)
    table = text[text.index("Jobs (failing first):"):]
    assert max(len(line) for line in table.splitlines()) <= 120, table
    assert "layer0.bias" not in table and "reshard after" in table
    assert main([str(tmp_path), "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "first_tensor" in wide and "layer0.bias grad at step 0" in wide


def test_terminal_prose_wraps_at_120_columns_and_tables_stay_whole():
    from sweep.report.terminal import fit, fit_job_line

    prose = "Details: " + " ".join(["the copies part at step 0"] * 20)
    table = "factor     level    jobs    judged" + " " * 100 + "x"
    out = fit(f"{prose}\n\n{table}\n- " + "a culprit's evidence " * 10)
    lines = out.splitlines()
    assert all(len(line) <= 120 for line in lines if line != table) and table in lines
    assert flat(out) == flat(f"{prose} {table} - " + "a culprit's evidence " * 10)  # nothing lost, only wrapped
    assert lines[1].startswith("  ")  # a hanging indent under the paragraph's first line
    job = "[   fail] #3 " + " ".join(f"key{i}=value{i}" for i in range(12)) + "  max|diff|=0.0019 mean diff=-0.00085"
    assert all(len(line) <= 120 for line in fit_job_line(job).splitlines())
    assert flat(fit_job_line(job)) == flat(job)


def test_a_single_runs_lines_say_when_its_replicas_disagree(tmp_path):
    """A single run (no sweep) whose replicas disagree says so under its status line, as a
    sweep's details do (a tester's HSDP engine without the replicate reduce printed nothing)."""
    from sweep.report.summary import job_headline
    from tests.helpers.records import make_record, write_job

    comparison = {"first_fail_step": None, "n_fail": 0, "n_steps": 2, "max_abs_diff": 0.0, "max_rel_diff": 0.0,
                  "mean_signed_diff": 0.0}
    record = make_record("fail", ["mesh=hsdp2x2"], comparison,
                         replicas={"first_step": 0, "pairs": [[1, 3]], "ranks": [1, 3]})
    write_job(tmp_path, 0, ["mesh=hsdp2x2"], record)
    lines = job_headline(tmp_path / "0")
    assert any(line.startswith("replicas disagree from step 0: rank 1 and rank 3") for line in lines), lines


def test_the_terminals_factor_table_names_a_long_dotted_level_by_its_last_part():
    from sweep.report.summary import _level_name

    engine = "tests.helpers.planted_step_faults.NoReplicateReduceFSDP2"
    assert _level_name(engine, True) == "…NoReplicateReduceFSDP2" and _level_name(engine, False) == engine
    assert _level_name("bf16", True) == "bf16"


def _files(root):
    return sorted((str(p.relative_to(root)), p.stat().st_mtime_ns) for p in root.rglob("*"))


def test_print_only_prints_the_report_and_writes_nothing(sweep_dir, capsys):
    before = _files(sweep_dir)
    assert main([str(sweep_dir), "--print-only"]) == 0
    out = capsys.readouterr()
    assert "Culprit" in out.out and "Jobs (failing first)" in out.out and "written:" not in out.err
    assert _files(sweep_dir) == before


def _read_only(directory, argv):
    """``argv`` run with ``directory`` read-only: as root (whom permission bits do not stop) in
    a mount namespace of its own where ``directory`` is a read-only bind mount; else with
    its write bits off. Skips where neither can be made."""
    import os
    import stat
    import subprocess

    if os.geteuid() != 0:
        for path in [directory, *directory.rglob("*")]:
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=300)
        finally:
            for path in [directory, *directory.rglob("*")]:
                path.chmod(path.stat().st_mode | stat.S_IWUSR)
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("root without a mount namespace of its own: no read-only dir to try")
    script = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'
    return subprocess.run(["unshare", "--mount", "sh", "-c", script, "sh", str(directory), *argv],
                          capture_output=True, text=True, timeout=300)


def test_a_read_only_sweep_dir_prints_its_report_and_exits_0(sweep_dir):
    """Issue 52: ``python -m sweep.report DIR`` on a shared, read-only sweep dir printed a
    traceback and exited 1. It prints the report, says in one line that it wrote nothing,
    and exits 0; so does the isolation's report."""
    import sys

    from tests.conftest import ROOT

    state = {"status": "isolated", "answer": "optimizer=sgd", "n_jobs": 2, "probes": [], "jobs": [],
             "changes": [{"key": "optimizer", "passing": "adam", "failing": "sgd"}],
             "minimal": [{"key": "optimizer", "passing": "adam", "failing": "sgd"}],
             "proof": {"passing": [0], "failing": [1]}, "passing": {"optimizer": "adam"},
             "failing": {"optimizer": "sgd"}}
    (sweep_dir / "isolate.json").write_text(json.dumps(state))
    before = _files(sweep_dir)
    for module, says in (("sweep.report", "Jobs (failing first)"), ("sweep.report.isolate_report", "optimizer=sgd")):
        proc = _read_only(sweep_dir, [sys.executable, "-m", module, str(sweep_dir)])
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert says in proc.stdout
        notes = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(notes) == 1 and notes[0].startswith(f"note: {sweep_dir} is not writable ("), proc.stderr
        assert "no file written" in notes[0]
    assert _files(sweep_dir) == before



def test_a_terminal_header_keeps_a_keys_own_underscores():
    """``model._target_`` rendered as ``model. target`` (a new user's report): only an underscore
    between two words becomes a space."""
    from sweep.report.summary import _terminal_header

    assert _terminal_header("model._target_") == "model._target_"
    assert _terminal_header("mp_policy") == "mp policy" and _terminal_header("first_diff_step") == "first\nstep"


def test_the_terminal_table_gives_the_step_beyond_rounding_beside_the_first_differing_step(tmp_path, capsys):
    """A fault from step 5 under bf16 (the copies differ by rounding from step 0): the headline
    gives step 5, and so does the terminal's job table, beside the first differing step 0 (a
    new user read 0 in the table and 5 in the headline); a column left out where every
    difference is rounding."""
    cmp = dict(_cmp(False, 5, 0.01), first_diff_step=0)
    envelope = {"measured": True, "dtype": "bfloat16", "loss": {"first_beyond_step": 5, "within": False}}
    _job(tmp_path, 0, ["mp_policy=bf16", "optimizer=adam"], "fail", cmp, "3/10 steps", envelope=envelope)
    _job(tmp_path, 1, ["mp_policy=fp32", "optimizer=adam"], "ok", _cmp(True, None, 0.0))
    (tmp_path / "multirun.yaml").write_text("{}")
    text = write_report(tmp_path)
    table = text[text.index("Jobs (failing first):"):].split("\n\n")[0]
    header, row = table.splitlines()[1:3], table.splitlines()[4]
    assert "beyond" in header[0] and "rounding" in header[1], table
    beyond = header[1].index("rounding")
    assert row.split()[:4] == ["0", "bf16", "fail", "from_step"] and row[beyond:].split()[0] == "5", table
    assert row.split()[4] == "0", table  # the first differing step stays beside it
    assert main([str(tmp_path), "--wide"]) == 0
    assert "first_real_step" in capsys.readouterr().out
    (tmp_path / "0" / "result.json").unlink()  # every difference rounding, or none: no such column
    assert "rounding" not in write_report(tmp_path).split("Jobs (failing first):")[1].split("\n\n")[0].splitlines()[2]


def test_report_flags_that_would_do_nothing_are_refused(tmp_path, capsys):
    """A new user's ``--job 0`` without ``--export-golden`` and ``--against`` on a single run's dir
    were ignored silently (the whole report printed)."""
    from sweep.report.summary import main

    (tmp_path / "result.json").write_text("{}")  # a single run's dir: refused before it is read
    with pytest.raises(SystemExit) as code:
        main([str(tmp_path), "--job", "0"])
    assert code.value.code == 2 and "without --export-golden there is nothing to pick it for" in capsys.readouterr().err
    with pytest.raises(SystemExit) as code:
        main([str(tmp_path), "--against", str(tmp_path)])
    assert code.value.code == 2 and "is a single run's dir" in capsys.readouterr().err


def test_the_beyond_rounding_column_shows_every_jobs_step_or_none():
    # a new user read a blank 'beyond rounding' as "within rounding" for a job beyond it from its first step
    from sweep.report.summary import _later_only

    same = {"job": 3, "first_diff_step": 1, "first_real_step": 1}
    later = {"job": 2, "first_diff_step": 2, "first_real_step": 1}
    within = {"job": 0, "first_diff_step": 2, "first_real_step": None}
    assert [r["first_real_step"] for r in _later_only([same, later, within])] == [1, 1, None]
    assert [r["first_real_step"] for r in _later_only([same, within])] == [None, None]  # no column
