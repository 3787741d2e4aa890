"""Multi-node launches from a SLURM environment: node lists, topology, exact command lines."""

import os
import shlex
import sys
from pathlib import Path

import pytest

from sweep.config.schema import ConfigError
from sweep.frameworks.base import rank_script
from sweep.frameworks.mindspore import MindSporeFramework, msrun_argv
from sweep.frameworks.torch import TorchFramework, torchrun_argv
from sweep.run import cluster
from sweep.run.cluster import (
    Topology,
    hostnames,
    node_address,
    node_argv,
    parse_nodelist,
    parse_tasks_per_node,
    srun_argv,
    topology_from_env,
)

PY = "/py/bin/python"


@pytest.fixture(autouse=True)
def no_slurm_on_path(monkeypatch):
    """Every test here holds whether or not SLURM is installed on this machine: PATH holds
    this interpreter's dir only, so no real ``scontrol`` answers (a test that wants one puts
    its own first, :func:`fake_scontrol`)."""
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))


FAKE_SCONTROL = r"""
import re, sys
args = sys.argv[1:]
if args[:2] == ["show", "hostnames"]:
    m = re.fullmatch(r"([a-z]+)\[(\d+)-(\d+)\]", args[2])
    print("\n".join(m.group(1) + str(i) for i in range(int(m.group(2)), int(m.group(3)) + 1)) if m
          else args[2].replace("[", "]"))
elif args[:2] == ["show", "node"]:
    print("NodeName=%s NodeAddr=10.9.8.%s NodeHostName=h" % (args[-1], re.sub(r"\D", "", args[-1]) or "1"))
else:
    sys.exit(1)
"""


def fake_scontrol(bin_dir: Path) -> Path:
    """An ``scontrol`` that answers as SLURM 22.05's does without asking a controller:
    ``show hostnames`` expands (here: only ``name[a-b]``; anything else echoed with ``[``
    turned into ``]``, as the real one prints ``bad]`` for ``bad[`` and exits 0) and
    ``show node N`` reports ``NodeAddr=10.9.8.<digits of N>``."""
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / "scontrol"
    path.write_text(f"#!{sys.executable}\n" + FAKE_SCONTROL)
    path.chmod(0o755)
    return path


SCRIPT = rank_script()
TORCH, MINDSPORE = {"framework": TorchFramework}, {"framework": MindSporeFramework}

# What `srun --nodes=2 --ntasks-per-node=1` gives the task on the second node of job 4242.
STEP_NODE1 = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NODELIST": "gpu[07-08]",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    "SLURM_NODEID": "1",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
}
# The batch script of a 4-node job (sbatch --nodes=4 --ntasks-per-node=1): no step variables.
BATCH_4 = {
    "SLURM_JOB_ID": "123456",
    "SLURM_JOB_NUM_NODES": "4",
    "SLURM_NNODES": "4",
    "SLURM_JOB_NODELIST": "npu-a[1-2],npu-b[09-10]",
    "SLURM_NODEID": "0",
    "SLURM_TASKS_PER_NODE": "1(x4)",
}


@pytest.mark.parametrize(
    "nodelist, hosts",
    [
        ("node07", ["node07"]),
        ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
        ("gpu[8-10]", ["gpu8", "gpu9", "gpu10"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("a[1-2],b3", ["a1", "a2", "b3"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("cn[1,3]-ib,login", ["cn1-ib", "cn3-ib", "login"]),
    ],
)
def test_parse_nodelist_expands_slurm_compressed_forms(nodelist, hosts):
    assert parse_nodelist(nodelist) == hosts


@pytest.mark.parametrize("nodelist", ["", "node[01-03", "node01]", "node[3-1]", "node[a-b]", "a,,b", "node[]"])
def test_parse_nodelist_rejects_malformed_lists(nodelist):
    with pytest.raises(ValueError):
        parse_nodelist(nodelist)


def test_hostnames_prefers_scontrol_and_falls_back_to_the_parser(tmp_path):
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\necho first-host\necho second-host\n")
    fake.chmod(0o755)
    assert hostnames("node[1-2]", scontrol=str(fake)) == ["first-host", "second-host"]
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\nexit 1\n")
    broken.chmod(0o755)
    assert hostnames("node[1-2]", scontrol=str(broken)) == ["node1", "node2"]
    assert hostnames("node[1-2]", scontrol="") == ["node1", "node2"]


def test_parse_tasks_per_node():
    assert parse_tasks_per_node("1(x4)") == [1, 1, 1, 1]
    assert parse_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert parse_tasks_per_node("8") == [8]
    with pytest.raises(ValueError):
        parse_tasks_per_node("two")


def test_no_slurm_or_one_node_is_the_single_node_topology():
    single = Topology(nnodes=1, node_rank=0, nproc_per_node=4, master_addr=None, master_port=None)
    assert topology_from_env({}, 4) == single
    one_node = {"SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "gpu07", "SLURM_NODEID": "0"}
    assert topology_from_env(one_node, 4) == single
    # an srun step on one node of a larger allocation: that node only
    assert topology_from_env(dict(BATCH_4, SLURM_STEP_NUM_NODES="1", SLURM_STEP_NODELIST="npu-a1"), 4) == single
    assert not single.multi_node and single.world_size == 4


def test_topology_of_a_batch_script_on_four_nodes():
    topo = topology_from_env(BATCH_4, 16)
    port = 15000 + 123456 % 15000
    assert topo == Topology(nnodes=4, node_rank=0, nproc_per_node=4, master_addr="npu-a1", master_port=port)
    assert topo.multi_node and topo.world_size == 16


def test_topology_of_a_step_task_uses_the_step_variables_and_node_id():
    assert topology_from_env(STEP_NODE1, 8) == Topology(
        nnodes=2, node_rank=1, nproc_per_node=4, master_addr="gpu07", master_port=15000 + 4242
    )


def test_master_addr_and_port_from_the_environment_win():
    env = dict(STEP_NODE1, MASTER_ADDR="10.0.0.7", MASTER_PORT="29400")
    topo = topology_from_env(env, 8)
    assert (topo.master_addr, topo.master_port) == ("10.0.0.7", 29400)


def test_old_variable_names_are_read_too():
    env = {"SLURM_NNODES": "2", "SLURM_NODELIST": "cn[3-4]", "SLURM_JOBID": "7", "SLURM_NODEID": "1"}
    assert topology_from_env(env, 2) == Topology(2, 1, 1, "cn3", 15007)


def test_world_size_must_split_evenly_over_the_nodes():
    with pytest.raises(ConfigError, match=r"world_size=6 ranks do not split evenly over 4 nodes \(SLURM_JOB_NUM"):
        topology_from_env(BATCH_4, 6)
    with pytest.raises(ConfigError, match="world_size=2 ranks do not split evenly over 4 nodes"):
        topology_from_env(BATCH_4, 2)


def test_a_step_with_several_tasks_per_node_is_refused():
    env = dict(STEP_NODE1, SLURM_STEP_NUM_TASKS="8", SLURM_STEP_TASKS_PER_NODE="4(x2)")
    with pytest.raises(ConfigError, match="exactly one task per node"):
        topology_from_env(env, 8)


@pytest.mark.parametrize("scontrol", ["absent", "on PATH"])
def test_missing_node_list_is_an_error(scontrol, tmp_path, monkeypatch):
    if scontrol == "on PATH":  # SLURM installed: its scontrol echoes a malformed list back, exit 0
        monkeypatch.setenv("PATH", f"{fake_scontrol(tmp_path / 'bin').parent}:{os.environ['PATH']}")
    with pytest.raises(ConfigError, match="SLURM_JOB_NODELIST is not set"):
        topology_from_env({"SLURM_JOB_NUM_NODES": "2"}, 2)
    with pytest.raises(ConfigError, match="SLURM_JOB_NODELIST='bad\\[': unbalanced"):
        topology_from_env({"SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "bad["}, 2)
    with pytest.raises(ValueError, match="unbalanced"):
        hostnames("bad[")


def test_the_rendezvous_is_the_first_node_as_the_others_reach_it(tmp_path, monkeypatch):
    # a name that resolves is used as it is; one that does not (NodeName is not a host name:
    # several slurmd on one host, or NodeAddr set in slurm.conf) becomes its NodeAddr
    scontrol = str(fake_scontrol(tmp_path / "bin"))
    assert node_address("localhost", scontrol=scontrol) == "localhost"
    assert node_address("nohost-sweep7.invalid", scontrol=scontrol) == "10.9.8.7"
    assert node_address("nohost-sweep7.invalid", scontrol="") == "nohost-sweep7.invalid"
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    env = {"SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "nohost[3-4]", "SLURM_JOB_ID": "9"}
    assert topology_from_env(env, 2).master_addr == "10.9.8.3"
    assert topology_from_env(dict(env, MASTER_ADDR="10.0.0.1"), 2).master_addr == "10.0.0.1"


def test_torchrun_command_of_node_1_of_2():
    assert node_argv("torchrun", 8, Path("/shared/sweep/3"), env=STEP_NODE1, python=PY, **TORCH) == [
        PY, "-m", "torch.distributed.run", "--nnodes=2", "--node-rank=1", "--nproc-per-node=4",
        "--rdzv-backend=static", "--rdzv-endpoint=gpu07:19242", "-m", "sweep.train", "/shared/sweep/3",
    ]


def test_msrun_command_of_node_1_of_2():
    assert node_argv("msrun", 8, Path("/shared/sweep/3"), env=STEP_NODE1, python=PY, **MINDSPORE) == [
        "/py/bin/msrun", "--worker_num=8", "--local_worker_num=4", "--master_addr=gpu07", "--master_port=19242",
        "--node_rank=1", "--log_dir=/shared/sweep/3/logs", "--join=True", SCRIPT, "/shared/sweep/3",
    ]


def test_commands_of_node_0_of_4_share_the_rendezvous():
    env = dict(BATCH_4, SLURM_STEP_NUM_NODES="4", SLURM_STEP_NODELIST=BATCH_4["SLURM_JOB_NODELIST"],
               SLURM_STEP_TASKS_PER_NODE="1(x4)", MASTER_ADDR="npu-a1", MASTER_PORT="20001")
    torchrun = node_argv("torchrun", 16, Path("/j"), env=env, python=PY, **TORCH)
    assert torchrun[3:8] == [
        "--nnodes=4", "--node-rank=0", "--nproc-per-node=4", "--rdzv-backend=static", "--rdzv-endpoint=npu-a1:20001",
    ]
    msrun = node_argv("msrun", 16, Path("/j"), env=env, python=PY, **MINDSPORE)
    assert msrun[1:6] == [
        "--worker_num=16", "--local_worker_num=4", "--master_addr=npu-a1", "--master_port=20001", "--node_rank=0",
    ]


def test_node_argv_rejects_unknown_launcher():
    with pytest.raises(ValueError, match="framework=torch has: torchrun"):
        node_argv("mpirun", 8, Path("/j"), env=STEP_NODE1, python=PY, **TORCH)
    with pytest.raises(ValueError, match="framework=torch has: torchrun"):
        node_argv("elastic_fork", 8, Path("/j"), env=STEP_NODE1, python=PY, **TORCH)


def test_single_node_topology_leaves_the_argv_builders_unchanged():
    single = topology_from_env({}, 4)
    assert torchrun_argv(4, Path("/j"), PY, topology=single) == torchrun_argv(4, Path("/j"), PY)
    assert msrun_argv(4, Path("/j"), 123, PY, topology=single) == msrun_argv(4, Path("/j"), 123, PY)


def test_argv_builders_refuse_a_topology_of_another_size():
    with pytest.raises(ValueError, match="6 ranks but topology has 2 nodes x 4 ranks"):
        torchrun_argv(6, Path("/j"), PY, topology=Topology(2, 0, 4, "h", 1))


def test_srun_starts_one_task_per_node_running_the_node_entry():
    topo = topology_from_env(BATCH_4, 16)
    assert srun_argv(topo, "msrun", 16, Path("/shared/sweep/0"), python=PY, env=BATCH_4) == [
        "srun", "--nodes=4", "--ntasks=4", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--label",
        PY, "-m", "sweep.run.cluster", "msrun", "16", "/shared/sweep/0",
    ]


def test_srun_repeats_cpus_per_task_and_takes_extra_options():
    env = dict(BATCH_4, SLURM_CPUS_PER_TASK="32", SWEEP_SRUN_ARGS="--gres=npu:8 --overlap")
    argv = srun_argv(topology_from_env(env, 16), "torchrun", 16, Path("/j"), python=PY, env=env)
    assert argv[6:9] == ["--cpus-per-task=32", "--gres=npu:8", "--overlap"]
    assert argv[9:] == [PY, "-m", "sweep.run.cluster", "torchrun", "16", "/j"]


def test_srun_refuses_a_job_process_that_is_one_of_several_tasks():
    # hydra/launcher=submitit_slurm with nodes=2: every node runs the whole Hydra job
    env = dict(STEP_NODE1, SLURM_NODEID="0")
    with pytest.raises(ConfigError, match="one of SLURM_STEP_NUM_TASKS=2 tasks"):
        srun_argv(topology_from_env(env, 8), "torchrun", 8, Path("/j"), python=PY, env=env)


def test_build_spec_on_several_nodes_runs_srun_with_the_rendezvous_in_the_environment(tmp_path, monkeypatch):
    for key in [k for k in list(os.environ) if k.startswith("SLURM_") or k == "SWEEP_SRUN_ARGS"]:
        monkeypatch.delenv(key)
    topo = topology_from_env(BATCH_4, 8)
    spec = TorchFramework.job_launch("torchrun", 8, tmp_path, env={"A": "1"}, timeout_s=5, topology=topo)
    assert spec.argv == [
        "srun", "--nodes=4", "--ntasks=4", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--label",
        sys.executable, "-m", "sweep.run.cluster", "torchrun", "8", str(tmp_path),
    ]
    assert spec.env == {"A": "1", "MASTER_ADDR": "npu-a1", "MASTER_PORT": str(15000 + 123456 % 15000)}
    assert spec.log_path == tmp_path / "logs" / "launcher.log"


def test_build_spec_with_a_single_node_topology_is_unchanged(tmp_path):
    spec = TorchFramework.job_launch("torchrun", 2, tmp_path, env={}, timeout_s=5, topology=topology_from_env({}, 2))
    assert spec.argv == torchrun_argv(2, tmp_path)
    with pytest.raises(ValueError, match="cannot start ranks on several nodes"):
        TorchFramework.job_launch("elastic_fork", 8, tmp_path, env={}, timeout_s=5,
                                  topology=topology_from_env(BATCH_4, 8))


def test_node_entry_reports_bad_usage_and_bad_environment(capsys, monkeypatch, tmp_path):
    assert cluster.main([]) == 2
    for key, value in dict(BATCH_4, SLURM_STEP_NUM_NODES="4", SLURM_STEP_NODELIST="a[1-4]").items():
        monkeypatch.setenv(key, value)
    assert cluster.main(["torchrun", "6", "/j"]) == 2
    assert "/j/job.yaml does not exist: not a job dir" in capsys.readouterr().err
    (tmp_path / "job.yaml").write_text("framework: {impl: sweep.frameworks.torch.TorchFramework}\n")
    assert cluster.main(["torchrun", "6", str(tmp_path)]) == 2
    assert "do not split evenly over 4 nodes" in capsys.readouterr().err


def test_slurm_preset_submits_one_task_on_the_requested_nodes(tmp_path, monkeypatch):
    """hydra/launcher=slurm through the real plugin and submitit, up to the sbatch script
    (no cluster needed): `--nodes` from additional_parameters.nodes, one task that runs the
    job process directly (use_srun: false, exec'd: the batch shell is the job process, which
    SLURM's warning signal before the time limit reaches), partition/account/time/devices
    from the config."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.plugins import Plugins
    from omegaconf import OmegaConf

    from sweep.config.schema import register_configs
    from tests.conftest import CONF

    (tmp_path / "srun").write_text("#!/bin/sh\nexit 0\n")  # submitit's SLURM executor looks for srun on PATH
    (tmp_path / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    register_configs()
    overrides = [
        "hydra/launcher=slurm", "hydra.launcher.partition=ascend", "hydra.launcher.account=proj42",
        "hydra.launcher.timeout_min=30", "hydra.launcher.gres=npu:8", "hydra.launcher.cpus_per_task=32",
        "hydra.launcher.additional_parameters.nodes=2", f"hydra.sweep.dir={tmp_path}/sweep",
    ]
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    launcher_cls = Plugins.instance().class_name_to_class[cfg.hydra.launcher._target_]
    params = {k: v for k, v in OmegaConf.to_container(cfg.hydra.launcher, resolve=True).items() if k != "_target_"}
    launcher = launcher_cls(**params)
    executor = launcher.executor()  # what the launcher submits with
    script = executor._executor._make_submission_file_text("PYTHON_CMD", "uid")
    for line in ["--nodes=2", "--ntasks-per-node=1", "--partition=ascend", "--account=proj42", "--time=30",
                 "--gres=npu:8", "--cpus-per-task=32", "--job-name=sweep",
                 "--signal=B:USR2@120"]:  # SLURM's warning goes to the batch shell: the job process itself
        assert f"#SBATCH {line}\n" in script
    assert "srun" not in script and script.rstrip().endswith("PYTHON_CMD")
    # the batch shell becomes the job process (exec): the warning signal reaches it
    assert executor._executor.python == f"exec {shlex.quote(sys.executable)}"
    assert executor._executor._num_tasks() == 1  # submitit waits for the one job process only


def test_local_jobs_start_in_waves_the_cores_can_hold():
    from hydra_plugins.sweep_launcher.local_launcher import waves

    assert waves([2, 2, 4, 2], cores=4) == [2, 1, 1]
    assert waves([2, 2, 2], cores=2) == [1, 1, 1]  # 2 cores, 2 ranks a job: one at a time
    assert waves([8], cores=2) == [1]  # larger than the machine: alone
    assert waves([1] * 5, cores=16, cap=2) == [2, 2, 1]
    assert waves([], cores=2) == []
    with pytest.raises(ValueError, match="array_parallelism=0"):
        waves([1], cores=2, cap=0)


def test_submitit_local_is_the_waved_launcher_with_its_cap(compose_cfg):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from hydra import compose, initialize_config_dir

    from tests.conftest import CONF

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="config", overrides=["hydra/launcher=submitit_local",
                                                       "hydra.launcher.array_parallelism=3"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_ == "hydra_plugins.sweep_launcher.local_launcher.WavedLocalLauncher"
    assert cfg.hydra.launcher.array_parallelism == 3 and cfg.hydra.launcher.cores is None
    assert cfg.hydra.launcher.timeout_min == 60  # the plugin's own fields stay
