"""Shared fixtures: compose the real config tree, and run the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"


@pytest.fixture
def compose_cfg():
    """compose_cfg(overrides) -> the job config exactly as `python -m sweep overrides` gets it."""
    from sweep.config.schema import register_configs

    register_configs()

    def _compose(overrides: List[str] = ()):
        with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
            return compose(config_name="config", overrides=list(overrides))

    return _compose


def run_cli(args: List[str], tmp_path: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    """`python -m sweep ARGS` from the project root, outputs under tmp_path."""
    cmd = [
        sys.executable, "-m", "sweep", *args,
        f"hydra.run.dir={tmp_path}/run", f"hydra.sweep.dir={tmp_path}/multirun",
    ]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=dict(os.environ))


def survivors(job_id: str) -> list:
    """Live processes tagged ``SWEEP_JOB_ID=job_id``. A multirun's fork server (tag
    ``forkserver-...``, ``sweep.launch.forkserver``) leaves by itself once the sweep's process
    has exited, after tearing down its imports, so it is given up to 20 s to do so."""
    import psutil

    from sweep.launch.supervise import tagged_processes

    grace_s = 20 if job_id.startswith("forkserver-") else 0
    _, alive = psutil.wait_procs(tagged_processes(job_id), timeout=grace_s)
    return alive



def sweep_jobs(sweep_dir: Path) -> dict:
    """``{job number: result.json as a dict}`` of a sweep dir."""
    import json

    return {int(p.parent.name): json.loads(p.read_text()) for p in sorted(Path(sweep_dir).glob("*/result.json"))}


def multirun_jobs(tmp_path: Path, *overrides: str, exit_codes: tuple = (0, 1)) -> tuple:
    """`python -m sweep -m ablation=none OVERRIDES` under tmp_path: ``(jobs by number, the
    finished process)``, after asserting that it exited with one of ``exit_codes`` and wrote
    its report (the tail of its output otherwise)."""
    proc = run_cli(["-m", "ablation=none", *overrides], tmp_path)
    assert proc.returncode in exit_codes and (tmp_path / "multirun" / "summary.json").exists(), \
        proc.stdout[-3000:] + proc.stderr[-3000:]
    return sweep_jobs(tmp_path / "multirun"), proc
