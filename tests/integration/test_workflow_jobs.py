"""The CI gate, the JUnit file and sweep-against-sweep on real jobs: a sweep with a
planted fault, then its fixed rerun (the same configs: the fault lives outside them)."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.slow

ENGINE = "engine.impl.torch=tests.helpers.faulty_engine.EnvGradScaleFSDP2"
GRID = ["-m", "ablation=none", "steps=6", "optimizer=sgd", "mesh=dp2,hsdp2x2", ENGINE]


def _sweep(args, sweep_dir, scale):
    env = dict(os.environ, SWEEP_TEST_GRAD_SCALE=str(scale))
    return subprocess.run([sys.executable, "-m", "sweep", *args, f"hydra.sweep.dir={sweep_dir}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env=env)


def test_gate_junit_and_against_a_fixed_rerun(tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    broken = _sweep(GRID + ["gate=true"], before, 2.0)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "gate: 2 job(s) not ok; the verdict names a culprit" not in broken.stderr  # no one-factor flip here
    assert "gate: 2 job(s) not ok" in broken.stderr
    suite = ET.parse(before / "junit.xml").getroot().find("testsuite")
    assert suite.get("failures") == "2" and len(suite.findall("testcase/failure")) == 2
    assert "steps outside rtol" in suite.find("testcase/failure").get("message")
    assert _sweep(GRID, tmp_path / "ungated", 2.0).returncode == 0  # without the gate: every job has a result

    fixed = _sweep(GRID + ["gate=true"], after, 1.0)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    proc = subprocess.run([sys.executable, "-m", "sweep.report.summary", str(after), "--against", str(before)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert f"{after} against {before}: fixed: 2; broke: 0; still failing: 0" in proc.stdout
    assert proc.stdout.count("fail -> ok") == 2


def test_a_single_run_tells_fail_from_error_and_writes_its_plot(tmp_path):
    failed = run_cli(["steps=6", "optimizer=sgd", "engine.impl.torch=tests.helpers.faulty_engine.GradScaleFSDP2"],
                     tmp_path / "f")
    assert failed.returncode == 1 and (tmp_path / "f" / "run" / "plot.png").exists()
    record = json.loads((tmp_path / "f" / "run" / "result.json").read_text())
    queue = Path(record["pool"]["dir"]) / "queue"  # the job, then its tracing rerun, in one launch
    assert [(queue / f"{i:06d}").read_text() for i in range(3)] == [str(tmp_path / "f" / "run"),
                                                                   str(tmp_path / "f" / "run" / "trace"), "STOP"]
    assert record["first_tensor"]["step"] == 0
    errored = run_cli(["steps=6", "mesh=dp4", "world_size=2"], tmp_path / "e")
    assert errored.returncode == 2
    assert json.loads((tmp_path / "e" / "run" / "result.json").read_text())["status"] == "error"
