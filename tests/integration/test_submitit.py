"""Real multiruns through hydra-submitit-launcher: the same jobs, results and table as the
default launcher.

- ``hydra/launcher=submitit_local``: each job in a process submitit starts on this machine.
- ``hydra/launcher=slurm`` with ``additional_parameters.nodes=2``: the plugin's SLURM path
  against stand-ins for ``sbatch``/``srun``/``sacct``/``squeue``/``scontrol`` that run the batch
  scripts and the step tasks on this machine, every "node" being ``localhost`` (it holds
  whether or not SLURM is installed here; tests/integration/test_slurm.py runs the same
  path against a real controller). Each job process runs in its
  batch script (``use_srun: false``) and starts its two nodes with ``srun``, one torchrun
  per node (``sweep.run.cluster``): the multi-node path end to end, short of a real cluster.
"""

import json
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import assert_same_sweep, run_cli

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
pytestmark = pytest.mark.slow

GRID = ["-m", "ablation=none", "steps=10", "optimizer=adam,sgd"]

# sbatch: run each array task's batch script in the background with a batch step's variables.
FAKE_SBATCH = r'''
import os, re, socket, subprocess, sys
text = open(sys.argv[-1]).read()
opts = dict(re.findall(r"^#SBATCH --([\w-]+)=(.*)$", text, re.M))
job, nodes = str(os.getpid()), int(opts.get("nodes", 1))
match = re.match(r"(\d+)-(\d+)", opts.get("array", ""))
for i in range(int(match.group(1)), int(match.group(2)) + 1) if match else [None]:
    with socket.socket() as s:  # a free rendezvous port per job (a real cluster derives it from the job id)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, SLURM_JOB_ID=job + str(i if i is not None else ""), SLURM_JOB_NUM_NODES=str(nodes),
               SLURM_NNODES=str(nodes), SLURM_JOB_NODELIST=",".join(["localhost"] * nodes), SLURM_NODEID="0",
               SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NTASKS=str(nodes), SLURM_TASKS_PER_NODE=f"1(x{nodes})",
               MASTER_PORT=str(port))
    out = opts["output"]
    if i is not None:
        env.update(SLURM_ARRAY_JOB_ID=job, SLURM_ARRAY_TASK_ID=str(i))
        out = out.replace("%A", job).replace("%a", str(i))
    out = out.replace("%j", job)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    subprocess.Popen(["bash", sys.argv[-1]], env=env, stdout=open(out, "a"), stderr=subprocess.STDOUT,
                     stdin=subprocess.DEVNULL, start_new_session=True)
print(f"Submitted batch job {job}")
'''
# srun: one copy of the command per task, each with the step's variables and its node id.
FAKE_SRUN = r'''
import os, subprocess, sys
args, opts = sys.argv[1:], {}
while args and args[0].startswith("-"):
    key, eq, value = args.pop(0).lstrip("-").partition("=")
    opts[key] = value if eq else (args.pop(0) if key in ("output", "error") else "")
with open(os.environ["FAKE_SRUN_LOG"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\n")
n = int(opts.get("ntasks") or os.environ.get("SLURM_NTASKS") or 1)
procs = [
    subprocess.Popen(args, env=dict(
        os.environ, SLURM_STEP_ID="0", SLURM_STEP_NUM_NODES=str(n), SLURM_STEP_NUM_TASKS=str(n),
        SLURM_STEP_NODELIST=os.environ["SLURM_JOB_NODELIST"], SLURM_STEP_TASKS_PER_NODE=f"1(x{n})",
        SLURM_NODEID=str(k), SLURM_PROCID=str(k), SLURM_LOCALID="0"))
    for k in range(n)
]
sys.exit(max(abs(p.wait()) for p in procs))
'''


# scontrol: the controller answers (the check before the sweep); anything else is left to the
# fallbacks (the node list parser). squeue and sacct know no job: each job ends with its result.
FAKE_SCONTROL = r'''
import sys
if sys.argv[1:] == ["ping"]:
    print("Slurmctld(primary) at localhost is UP")
else:
    sys.exit(1)
'''


def _fake_slurm(bin_dir: Path) -> None:
    bin_dir.mkdir()
    for name, body in (("sbatch", FAKE_SBATCH), ("srun", FAKE_SRUN), ("sacct", ""), ("squeue", ""),
                       ("scontrol", FAKE_SCONTROL)):
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n{body}")
        path.chmod(0o755)


def _results(sweep_dir: Path):
    return [json.loads((sweep_dir / str(j) / "result.json").read_text()) for j in (0, 1)]


def _assert_same_sweep(sweep_dir: Path, reference: Path) -> None:
    jobs = assert_same_sweep(sweep_dir, reference)
    assert [jobs[n]["status"] for n in sorted(jobs)] == ["ok", "ok"]
    assert all(len(job["losses"]["distributed"]) == 10 for job in jobs.values())


def test_submitit_local_runs_the_jobs_and_gives_the_same_table(tmp_path, basic_sweep):
    # 2 cores for 2-rank jobs: one job at a time (hydra_plugins/sweep_launcher/local_launcher.py)
    proc = run_cli([*GRID, "hydra/launcher=submitit_local", "hydra.launcher.cores=2"], tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sweep_dir = tmp_path / "multirun"
    _assert_same_sweep(sweep_dir, basic_sweep)
    first, second = _results(sweep_dir)
    assert second["started"] >= first["finished"], (first["finished"], second["started"])
    assert "Submitit 'local' sweep output dir" in proc.stderr + proc.stdout
    # the summary callback ran in the submitting process, at the end
    assert "2 jobs: 2 ok" in proc.stdout and f"summary: {sweep_dir / 'summary.md'}" in proc.stdout
    assert (sweep_dir / ".submitit").is_dir()


@pytest.mark.exhaustive
def test_slurm_preset_runs_two_node_jobs_through_srun_and_gives_the_same_table(tmp_path, basic_sweep, monkeypatch):
    _fake_slurm(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SRUN_LOG", str(tmp_path / "srun.log"))
    for key in [k for k in os.environ if k.startswith("SLURM_") or k in ("MASTER_ADDR", "MASTER_PORT")]:
        monkeypatch.delenv(key)
    two_nodes = ["hydra/launcher=slurm", "hydra.launcher.additional_parameters.nodes=2"]
    proc = run_cli([*GRID, *two_nodes], tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sweep_dir = tmp_path / "multirun"
    _assert_same_sweep(sweep_dir, basic_sweep)
    assert "2 jobs: 2 ok" in proc.stdout
    for result in _results(sweep_dir):
        argv = result["launch"]["argv"]
        assert argv[:6] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--label"]
        assert argv[-4:-1] == ["sweep.run.cluster", "torchrun", "2"]
    # submitit's own srun is not used (use_srun: false): only the jobs' srun, one per job
    assert len((tmp_path / "srun.log").read_text().splitlines()) == 2
    for job in (0, 1):
        log = (sweep_dir / str(job) / "logs" / "launcher.log").read_text()
        assert "--nnodes=2 --node-rank=0 --nproc-per-node=1 --rdzv-backend=static" in log
        assert "--nnodes=2 --node-rank=1 --nproc-per-node=1 --rdzv-backend=static" in log
