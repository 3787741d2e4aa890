import sys
from pathlib import Path

import pytest

import sweep.train
from sweep.cluster import topology_from_env
from sweep.launch import build_spec, elastic_fork_argv, msrun_argv, torchrun_argv


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
    with pytest.raises(ValueError, match="torchrun, msrun, elastic_fork"):
        build_spec("mpirun", 2, tmp_path, env={}, timeout_s=1)


def test_elastic_fork_runs_the_fork_launcher_on_one_node_only(tmp_path):
    assert elastic_fork_argv(4, Path("/tmp/pool"), python="/py/bin/python") == [
        "/py/bin/python", "-m", "sweep.train.fork_launch", "--nproc-per-node=4", "/tmp/pool",
    ]
    assert build_spec("elastic_fork", 2, tmp_path, env={}, timeout_s=1).argv == elastic_fork_argv(2, tmp_path)
    two_nodes = {"SLURM_JOB_ID": "7", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "a[1-2]", "SLURM_NODEID": "0"}
    with pytest.raises(ValueError, match="one node only"):
        build_spec("elastic_fork", 4, tmp_path, env={}, timeout_s=1, topology=topology_from_env(two_nodes, 4))


def test_build_spec_for_msrun_picks_a_port(tmp_path):
    spec = build_spec("msrun", 2, tmp_path, env={"A": "1"}, timeout_s=5)
    port = int(next(a for a in spec.argv if a.startswith("--master_port=")).split("=")[1])
    assert 1024 <= port <= 65535
    assert spec.log_path == tmp_path / "logs" / "launcher.log" and spec.env == {"A": "1"}
    assert spec.argv[0] == str(Path(sys.executable).parent / "msrun")
