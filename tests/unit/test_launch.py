import sys
from pathlib import Path

import pytest

import sweep.train
from sweep.launch import build_spec, msrun_argv, torchrun_argv


def test_torchrun_argv_runs_the_rank_module_on_n_local_processes():
    argv = torchrun_argv(4, Path("/tmp/job"), python="/py/bin/python")
    assert argv == [
        "/py/bin/python", "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc-per-node=4",
        "-m", "sweep.train", "/tmp/job",
    ]


def test_msrun_argv_uses_the_venv_msrun_and_the_rank_script():
    argv = msrun_argv(2, Path("/tmp/job"), 12345, python="/py/bin/python")
    script = str(Path(sweep.train.__file__).parent / "__main__.py")
    assert argv == [
        "/py/bin/msrun", "--worker_num=2", "--local_worker_num=2", "--master_port=12345",
        "--log_dir=/tmp/job/logs", "--join=True", script, "/tmp/job",
    ]


def test_build_spec_rejects_unknown_launcher(tmp_path):
    with pytest.raises(ValueError, match="torchrun, msrun"):
        build_spec("mpirun", 2, tmp_path, env={}, timeout_s=1)


def test_build_spec_for_msrun_picks_a_port(tmp_path):
    spec = build_spec("msrun", 2, tmp_path, env={"A": "1"}, timeout_s=5)
    port = int(next(a for a in spec.argv if a.startswith("--master_port=")).split("=")[1])
    assert 1024 <= port <= 65535
    assert spec.log_path == tmp_path / "logs" / "launcher.log" and spec.env == {"A": "1"}
    assert spec.argv[0] == str(Path(sys.executable).parent / "msrun")
