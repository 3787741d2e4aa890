"""The package installs from a wheel (no editable install, no source tree) and runs a
real sweep from an unrelated working directory: the config tree ships inside it.

The fresh venv sees the test environment's packages through a ``.pth`` line (not its
``.pth`` files, so not the editable install): pip resolves the wheel's requirements against
them, under the same constraints, and installs the wheel alone, instead of unpacking
torch again (a minute here)."""

import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_a_wheel_installed_in_a_fresh_venv_runs_a_sweep(tmp_path):
    dist, venv, work = tmp_path / "dist", tmp_path / "venv", tmp_path / "elsewhere"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
                   check=True, capture_output=True, text=True, timeout=600)
    wheel = next(dist.glob("*.whl"))
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    venv_site = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"], check=True,
                               capture_output=True, text=True).stdout.strip()
    (Path(venv_site) / "test_env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints" / "cpu.txt"), f"{wheel}[torch]"],
        capture_output=True, text=True, timeout=900,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    # the wheel, config tree and all, went into the venv
    assert (Path(venv_site) / "sweep" / "config" / "conf" / "config.yaml").is_file()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(
        [python, "-m", "sweep", "-m", "ablation=none", "steps=3", "optimizer=adam,sgd", f"hydra.sweep.dir={work}/s"],
        cwd=work, capture_output=True, text=True, timeout=600, env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Primary config directory not found" not in proc.stderr
    summary = json.loads((work / "s" / "summary.json").read_text())
    assert summary["counts"]["ok"] == 2 and summary["factors"] == ["optimizer"]
    where = subprocess.run([python, "-c", "import sweep; print(sweep.__file__)"], cwd=work, capture_output=True,
                           text=True, env=env, check=True).stdout
    assert str(venv) in where  # the installed copy ran, not the source tree
    assert not list((work / "s" / "0").glob("*.log"))  # no empty per-job Hydra log

    command = str(venv / "bin" / "sweep")  # the console script, its help and Hydra's tab completion
    helped = subprocess.run([command, "--help"], cwd=work, capture_output=True, text=True, env=env, timeout=300)
    assert helped.returncode == 0 and helped.stdout.startswith("sweep: a configuration-sweep ablation")
    assert "mp_policy: bf16, bf16_bf16, cast_forward_inputs, fp16, fp16_batchnorm_fp32, fp32" in helped.stdout
    assert "model: mlp, mlp_norm, transformer" in helped.stdout
    assert "is powered by Hydra" not in helped.stdout and "Examples:" in helped.stdout
    completed = subprocess.run([command, "-sc", "query=bash"], cwd=work, capture_output=True, text=True, timeout=300,
                               env=dict(env, COMP_LINE="sweep mp_policy=", COMP_POINT="16"))
    assert "mp_policy=bf16" in completed.stdout.split() and "mp_policy=fp32" in completed.stdout.split()
