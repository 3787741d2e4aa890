"""runner=command end to end: the user's own training command swept like a built-in job.

Every command here is real distributed training (torchrun and gloo, msrun), except the
three faults, which are commands that crash, hang or print nothing. One example sweep is
shared by the tests that read it (module fixture).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli, survivors, sweep_jobs, flat

pytestmark = pytest.mark.slow

THREE_FACTORS = ["mp_policy=fp32,bf16", "reshard_after_forward=true,false", "runner.args.reduce=mean,sum"]


def _sweep(tmp_path: Path, *overrides: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return run_cli(["-m", *overrides], tmp_path, timeout=timeout)


@pytest.fixture(scope="module")
def example_sweep(tmp_path_factory):
    """The example script (examples/torch_repro.py) over three factors, with the gate on."""
    tmp = tmp_path_factory.mktemp("example")
    proc = _sweep(tmp, "experiment=example_command", "steps=6", "gate=true", *THREE_FACTORS)
    return proc, tmp / "multirun"


def test_the_example_swept_over_three_factors_gives_the_table_verdict_and_files(example_sweep):
    proc, sweep_dir = example_sweep
    jobs = sweep_jobs(sweep_dir)
    assert len(jobs) == 8, proc.stdout[-3000:] + proc.stderr[-3000:]
    by_level = {(j["config"]["mp_policy"]["name"], j["config"]["runner"]["args"]["reduce"]): [] for j in jobs.values()}
    for j in jobs.values():
        by_level[(j["config"]["mp_policy"]["name"], j["config"]["runner"]["args"]["reduce"])].append(j)
    # fp32 FSDP2 on replicated data is the standalone copy bit for bit; the planted sum fails from step 1
    assert all(j["status"] == "ok" and j["comparison"]["max_abs_diff"] == 0.0 for j in by_level[("fp32", "mean")])
    assert all(j["status"] == "fail" and j["comparison"]["first_fail_step"] == 1 for j in by_level[("fp32", "sum")])
    for j in jobs.values():  # each rank the command reported is judged; what it cannot see is said so
        assert [r["rank"] for r in j["rank_comparisons"]] == [0, 1]
        assert j["first_tensor"] == {"note": "not observed (runner=command)"}
        assert j["collectives"]["unchecked"].startswith("not observed") and j["launch"]["losses_from"] == "output"
        assert j["random_draws"] is None and j["not_observed"]["random_draws"].startswith("not observed (runner=command)")
        assert j["replicas"] is None and j["not_observed"]["replicas"].startswith("not observed (runner=command)")
        assert "--reduce " + j["config"]["runner"]["args"]["reduce"] in j["launch"]["argv"][-1]
    assert "runner.args.reduce" in proc.stdout and "Jobs (failing first)" in proc.stdout
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert any(c["factor"] == "runner.args.reduce" and c["level"] == "sum" for c in summary["culprits"])
    for name in ("summary.md", "summary.html", "summary.csv", "junit.xml"):
        assert (sweep_dir / name).stat().st_size > 0
    assert (sweep_dir / "0" / "logs" / "command.log").exists() and (sweep_dir / "0" / "ranks" / "rank_1.json").exists()


def test_the_gate_fails_a_command_sweep_with_a_failing_job(example_sweep):
    proc, sweep_dir = example_sweep
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "gate:" in proc.stderr and "job(s) not ok" in proc.stderr
    assert 'failures="' in (sweep_dir / "junit.xml").read_text()


@pytest.mark.exhaustive
def test_the_isolation_sweeper_isolates_the_scripts_flag(tmp_path):
    proc = _sweep(tmp_path, "hydra/sweeper=isolate", "experiment=example_command", "steps=4",
                  'hydra.sweeper.passing=["reshard_after_forward=true","runner.args.reduce=mean"]',
                  'hydra.sweeper.failing=["reshard_after_forward=false","runner.args.reduce=sum"]')
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Minimal failure-inducing change: runner.args.reduce=sum." in flat(proc.stdout)


@pytest.mark.exhaustive
def test_a_script_in_its_own_format_is_judged_per_rank_and_its_faulty_flag_is_named(tmp_path):
    script = ROOT / "tests" / "helpers" / "foreign_ddp.py"
    proc = _sweep(tmp_path, "runner=command", "steps=5",
                  f"runner.command='torchrun --standalone --nproc-per-node=${{world_size}} --tee 3 {script} "
                  "--iters ${steps} --average ${runner.args.average} --bucket-mb ${runner.args.bucket_mb}'",
                  r"runner.parse.standalone='\[r(?P<rank>\d+)\] it=(?P<step>\d+) ref=(?P<loss>\S+)'",
                  r"runner.parse.distributed='\[r(?P<rank>\d+)\] it=(?P<step>\d+) .* dist=(?P<loss>\S+)'",
                  "+runner.args.average=true,false", "+runner.args.bucket_mb=2,4")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    jobs = sweep_jobs(tmp_path / "multirun")
    assert sorted((j["config"]["runner"]["args"]["average"], j["status"]) for j in jobs.values()) == [
        (False, "fail"), (False, "fail"), (True, "ok"), (True, "ok")]
    assert all([r["rank"] for r in j["rank_comparisons"]] == [0, 1] for j in jobs.values())
    summary = json.loads((tmp_path / "multirun" / "summary.json").read_text())
    assert [(c["factor"], c["level"].lower()) for c in summary["culprits"]] == [("runner.args.average", "false")]
    assert "runner.args.average=false" in summary["headline"].lower() and "bucket" not in summary["headline"]


FAULTS = """import os, socket, subprocess, sys, time
fault = sys.argv[1]
if fault == "crash":
    print("step: 0, standalone loss: 0.5", flush=True)
    raise SystemExit("NPU driver mismatch")
if fault == "hang":  # a port held and a child of its own, then no end
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    open(os.environ["SWEEP_JOB_DIR"] + "/port", "w").write(str(s.getsockname()[1]))
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    time.sleep(600)
if fault == "late":  # every loss reported, then a crash at exit (a checkpoint that fails to save)
    for step in range(3):
        print(f"step: {step}, standalone loss: 0.5", flush=True)
        print(f"step: {step}, fully_shard loss: 0.5", flush=True)
    raise RuntimeError("could not save the checkpoint")
print("training done", flush=True)
"""


def test_a_command_that_crashes_hangs_or_reports_nothing_is_recorded_with_its_cause_and_leaves_nothing(tmp_path):
    script = tmp_path / "faults.py"
    script.write_text(FAULTS)
    proc = _sweep(tmp_path, "runner=command", "steps=3", "execution.timeout_s=8",
                  f"runner.command='{sys.executable} {script} ${{runner.args.fault}}'", "+runner.args.fault=crash,hang,quiet")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]  # nothing could be judged
    crashed, hung, silent = sweep_jobs(tmp_path / "multirun").values()
    assert crashed["status"] == "error" and "the command exited with code 1" in crashed["reason"]
    assert "NPU driver mismatch" in crashed["reason"] and "no distributed loss reported" in crashed["reason"]
    assert hung["status"] == "timeout" and "ran past its limit of 8 s" in hung["reason"]
    assert survivors(hung["launch"]["kill_tag"]) == []  # the shell, the script and its child: all gone
    port = int((tmp_path / "multirun" / "1" / "port").read_text())
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # its port is free again
    assert silent["status"] == "error" and silent["reason"].startswith(
        "the command exited with code 0; no distributed loss reported; expected sweep.log_loss(step, loss)")
    assert "step:" in silent["reason"] and "logs/command.log" in silent["reason"]
    assert silent["reason"].endswith("command.log ends: training done")  # its exit code and last lines
    assert "training done" in silent["log_tails"]["command.log"]
    assert "no job of the sweep could be judged" in proc.stderr

    late = run_cli(["runner=command", "steps=3", f"runner.command='{sys.executable} {script} late'"], tmp_path / "late")
    record = json.loads((tmp_path / "late" / "run" / "result.json").read_text())
    assert late.returncode == 0 and record["status"] == "ok"  # judged by its losses, as a built-in job would be
    assert ("the command exited with code 1; command.log: RuntimeError: could not save the checkpoint, after "
            "reporting every loss: judged by the losses") in record["notes"]


@pytest.mark.exhaustive
def test_log_loss_a_cached_baseline_command_and_repeats(tmp_path):
    example = "examples/torch_repro.py --steps ${steps} --report log_loss"
    proc = _sweep(tmp_path, "experiment=example_command", "steps=4", "repeat=2", "reshard_after_forward=true,false",
                  f"runner.command='torchrun --standalone --nproc-per-node=${{world_size}} {example} --copy distributed "
                  "--reshard-after-forward ${reshard_after_forward}'",
                  f"runner.baseline_command='python {example} --copy standalone'")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    first, second = sweep_jobs(tmp_path / "multirun").values()
    assert first["baseline"]["source"] == "baseline_command" and second["baseline"]["source"] == "cache"
    for j in (first, second):
        assert j["status"] == "ok" and j["comparison"]["max_abs_diff"] == 0.0 and j["launch"]["losses_from"] == \
            "loss file"
        assert [r["status"] for r in j["repeats"]] == ["ok", "ok"] and j["nondeterministic"] is False


@pytest.mark.exhaustive
def test_a_golden_file_stands_for_the_standalone_run_of_command_and_built_in_jobs(example_sweep, tmp_path):
    _, sweep_dir = example_sweep
    jobs = sweep_jobs(sweep_dir)
    num, job = next((n, j) for n, j in jobs.items() if j["config"]["runner"]["args"]["reduce"] == "sum"
                    and j["config"]["mp_policy"]["name"] == "fp32")
    golden = tmp_path / "golden.json"
    out = subprocess.run([sys.executable, "-m", "sweep.report", str(sweep_dir), "--job", str(num), "--export-golden",
                          str(golden)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and "use it with baseline.file=" in out.stdout, out.stderr
    rows = json.loads(golden.read_text())["rows"]
    assert {(r["copy"], r["rank"]) for r in rows} == {("standalone", None), ("distributed", 0), ("distributed", 1)}
    overrides = [o for o in job["overrides"] if not o.startswith("gate")]
    rerun = run_cli([*overrides, f"baseline.file={golden}"], tmp_path / "command")
    record = json.loads((tmp_path / "command" / "run" / "result.json").read_text())
    assert rerun.returncode == 1 and record["baseline"]["source"] == "file"
    assert record["comparison"] == job["comparison"]  # the same as against its standalone run
    refused = run_cli([*overrides, "steps=3", f"baseline.file={golden}"], tmp_path / "refused")
    assert refused.returncode == 2 and "holds 6 steps, the job trains steps=3" in flat(refused.stdout)

    # a built-in job: export, then the same job against the file
    built = run_cli(["steps=5", "mp_policy=bf16"], tmp_path / "builtin")
    built_dir = tmp_path / "builtin" / "run"
    assert subprocess.run([sys.executable, "-m", "sweep.report", str(built_dir), "--export-golden",
                           str(tmp_path / "b.json")], cwd=ROOT).returncode == 0
    again = run_cli(["steps=5", "mp_policy=bf16", f"baseline.file={tmp_path / 'b.json'}"], tmp_path / "again")
    first, second = (json.loads((d / "run" / "result.json").read_text()) for d in (tmp_path / "builtin",
                                                                                  tmp_path / "again"))
    assert built.returncode == again.returncode and second["baseline"]["source"] == "file"
    assert second["comparison"] == first["comparison"] and second["losses"] == first["losses"]
    # a job that rounds in another dtype than the file's twin was nudged in trains its own twin, and says so
    fp32 = run_cli(["steps=5", "mp_policy=fp32", f"baseline.file={tmp_path / 'b.json'}"], tmp_path / "fp32")
    third = json.loads((tmp_path / "fp32" / "run" / "result.json").read_text())
    assert fp32.returncode == 0 and third["envelope"]["dtype"] == "float32", third["envelope"]
    assert third["envelope"]["source"] == "twin" and "the golden file's twin was nudged in bfloat16, this job rounds " \
        "in float32: its rounding envelope comes from a twin trained here" in third["notes"], third["notes"]


@pytest.mark.exhaustive
@pytest.mark.mindspore
def test_the_reports_mindspore_shape_under_msrun_is_read_from_the_worker_logs(tmp_path):
    pytest.importorskip("mindspore")
    script = ROOT / "tests" / "helpers" / "ms_report_shape.py"
    proc = run_cli(["runner=command", "mesh=dp2", "steps=3",
                    "runner.command='msrun --worker_num=${world_size} --local_worker_num=${world_size} "
                    f"--master_port=$SWEEP_MASTER_PORT --log_dir=$SWEEP_JOB_DIR/msrun_log --join=True {script} "
                    "${steps}'", "runner.parse.files=[msrun_log/worker_*.log]"], tmp_path)
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    assert proc.returncode == 0, record.get("reason")
    assert [r["rank"] for r in record["rank_comparisons"]] == [0, 1] and record["comparison"]["n_steps"] == 3


@pytest.mark.parametrize("layout", ["one stream", "a file per rank"])
def test_a_crash_under_torchrun_is_blamed_on_the_rank_that_raised(tmp_path, layout):
    script = ROOT / "tests" / "helpers" / "crash_rank.py"
    per_rank = layout == "a file per rank"  # torchrun --log-dir --redirects 3, as experiment=example_command does
    launch = "--log-dir $SWEEP_JOB_DIR/tl --redirects 3 " if per_rank else ""
    extra = ["runner.parse.files=[tl/**/stdout.log,tl/**/stderr.log]",
             r"runner.parse.rank_from_path='attempt_\d+/(?P<rank>\d+)/std(?:out|err)\.log$'"] if per_rank else []
    proc = run_cli(["runner=command", "steps=2", *extra,
                    f"runner.command='torchrun --standalone --nproc-per-node=2 {launch}{script}'"], tmp_path)
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    assert record["status"] == "error", proc.stdout[-2000:]
    where = "stderr.log" if per_rank else "command.log"
    assert record["reason"].startswith(f"the command exited with code 1; {where}: rank 1: ValueError: planted: "
                                       "rank 1 cannot read its shard"), record["reason"]
    assert "Connection closed" not in record["reason"] and "--tee" not in record["reason"]


@pytest.mark.exhaustive
def test_printed_losses_rank_zero_logging_and_per_rank_data_are_said(tmp_path):
    script = ROOT / "tests" / "helpers" / "report_shapes.py"
    proc = _sweep(tmp_path, "ablation=none", "runner=command", "steps=4", "+runner.args.mode=printed,per_rank_data",
                  f"runner.command='torchrun --standalone --nproc-per-node=2 {script} ${{runner.args.mode}} 4'")
    printed, per_rank = sweep_jobs(tmp_path / "multirun").values()
    # four decimals: equal to the printed precision, never "bit for bit"; only rank 0 logged
    assert printed["status"] == "ok" and printed["resolution"] == {"standalone": 1e-4, "distributed": 1e-4}
    assert printed["comparison"]["resolution"] == 1e-4
    assert any(n.startswith("printed precision: the losses were read from text rounded to 1e-04") and
               "a difference under 5e-05 cannot be seen" in n for n in printed["notes"]), printed["notes"]
    assert printed["ranks_reported"] == [0] and printed["ranks_agree"] is None
    # its lines name no rank: one sequence, and which ranks printed it is not claimed
    assert any(n.startswith("ranks reported: the lines name no rank, so they are read as one sequence (as rank "
                            "0's) of 2 ranks") for n in printed["notes"]), printed["notes"]
    # every rank its own batch: said, from step 0
    assert per_rank["status"] == "fail" and per_rank["ranks_reported"] == [0, 1] and per_rank["resolution"] is None
    assert any(n.startswith("different inputs: before any update the ranks' step-0 losses differ from each other")
               and "rank 1 from the standalone copy's" in n for n in per_rank["notes"]), per_rank["notes"]
    assert "bit for bit" not in proc.stdout.splitlines()[-2]


@pytest.mark.exhaustive
def test_the_readme_example_gives_its_headline_every_time(tmp_path):
    """The README's example (experiment=example_command: each rank's lines in a file of its
    own, never glued), run three times: the same documented headline each time."""
    headlines = set()
    for i in range(3):
        proc = _sweep(tmp_path / str(i), "experiment=example_command", "mp_policy=fp32,bf16",
                      "runner.args.reduce=mean,sum", "steps=8")
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]  # (no gate: failing jobs are findings)
        jobs = sweep_jobs(tmp_path / str(i) / "multirun")
        assert all(r["status"] in ("ok", "fail") for r in jobs.values()), {n: r["reason"] for n, r in jobs.items()}
        tail = proc.stdout[proc.stdout.rindex("\n4 jobs:") + 1:]  # the headline, last: up to the summary line
        headlines.add(flat(tail[:tail.index("\nsummary: ")]))
    assert headlines == {"4 jobs: 1 ok, 3 fail. Culprits, weighed alike: mp_policy=bf16 and runner.args.reduce=sum, "
                         "each failing in 1 of 1 one-factor pairs where its other level passes. They part from "
                         "standalone: mp_policy=bf16 from step 0 (step0) and runner.args.reduce=sum from step 1 "
                         "(first_update)."}


def test_a_command_that_cannot_start_says_why(tmp_path):
    proc = run_cli(["experiment=example_command", "steps=2", "runner.cwd=/"], tmp_path)  # examples/ is not under /
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    assert record["status"] == "error", proc.stdout[-2000:]
    assert "stderr.log: " in record["reason"] and "can't open file" in record["reason"]
    assert "examples/torch_repro.py': [Errno 2] No such file or directory" in record["reason"]
