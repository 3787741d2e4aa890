"""Real multiruns through a real SLURM controller: ``hydra/launcher=slurm`` (submitit) against
the two-node cluster ``.ci/slurm-cluster`` runs on this host (``tests/helpers/slurm_cluster.py``:
skipped when it is not up, failed where ``SWEEP_SLURM_TESTS=required``, as in ``.ci/run``).

Every job is a SLURM job (sbatch, one array task each); the table equals the basic
launcher's on the same grid; a job that exceeds its time limit, one cancelled with
``scancel`` and one on a node drained and then taken down are each recorded with SLURM's
cause while the rest of the sweep completes, and ``resume=true`` finishes them; a job whose
allocation spans both nodes starts one torchrun / msrun per node through ``srun`` and gives
the losses of the same job on one node, bit for bit; nothing is left in ``squeue``.
These are the commands of docs/cluster.md ("Trying it on a test cluster").
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, assert_same_sweep, run_cli
from tests.conftest import sweep_jobs as results
from tests.helpers import slurm_cluster as cluster

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
pytestmark = pytest.mark.slow

# a slice of the default grid (conf/ablation/report.yaml): mp_policy=fp32,bf16, the other factors pinned
GRID = ["-m", "steps=10", "mesh=dp2", "reshard_after_forward=true", "deterministic=true", "optimizer=adam"]
SLURM = ["hydra/launcher=slurm", f"hydra.launcher.partition={cluster.PARTITION}"]
TWO_NODES = ["hydra.launcher.additional_parameters.nodes=2"]
MINDSPORE = ["-m", "ablation=none", "steps=10", "framework=mindspore", "engine=data_parallel", "mesh=dp2"]
# The commands of docs/cluster.md ("Trying it on a test cluster"), as these tests run them
# (tests/unit/test_docs.py checks that the page gives each of them).
TABLE = [*GRID, *SLURM]
TWO_NODE_TORCH = [*GRID, *SLURM, *TWO_NODES]
TWO_NODE_MINDSPORE = [*MINDSPORE, *SLURM, *TWO_NODES]
TIME_LIMIT = ["-m", "ablation=none", "steps=10,100000", "optimizer=adam,sgd", *SLURM, "hydra.launcher.timeout_min=1",
              "hydra.launcher.signal_delay_s=0"]
FAULTS = ["-m", "ablation=none", "steps=1200,10", "optimizer=adam,sgd", *SLURM,
          "+hydra.launcher.additional_parameters.no_requeue=true"]  # two long jobs first
DOCUMENTED = [TABLE, TWO_NODE_TORCH, TWO_NODE_MINDSPORE, TIME_LIMIT, FAULTS, [*FAULTS, "resume=true"]]


@pytest.fixture(scope="module", autouse=True)
def slurm_conf():
    """The test cluster's ``SLURM_CONF`` for every command of this module."""
    reason = cluster.why_not_up()
    if reason:
        cluster.skip_or_fail(f"no SLURM test cluster: {reason}")
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf_path())
    yield os.environ["SLURM_CONF"]
    if before is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = before


@pytest.fixture(autouse=True)
def queue_empties():
    """Every test leaves nothing in ``squeue`` and both nodes up, whatever it did to them."""
    yield
    for node in cluster.NODES:
        if cluster.node_state(node).rstrip("*") not in ("idle", "mixed", "allocated"):
            cluster.set_node(node, "RESUME", check=False)
    try:
        cluster.wait_for("squeue empties", lambda: cluster.queue() == [], timeout=60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {cluster.queue()}") from None


def assert_same_table(sweep_dir: Path, reference: Path) -> None:
    assert sorted(assert_same_sweep(sweep_dir, reference)) == [0, 1]


def slurm_ids(proc: subprocess.CompletedProcess) -> list:
    """The SLURM job ids the launcher printed (``SLURM jobs: 12_0, 12_1``)."""
    line = next(line for line in (proc.stdout + proc.stderr).splitlines() if "SLURM jobs: " in line)
    return line.split("SLURM jobs: ")[1].split(", ")


def test_the_grid_through_the_controller_gives_the_basic_launchers_table(tmp_path, basic_sweep):
    proc = run_cli(TABLE, tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sweep_dir = tmp_path / "multirun"
    assert_same_table(sweep_dir, basic_sweep)
    ids = slurm_ids(proc)
    assert len(ids) == 2 and len({i.split("_")[0] for i in ids}) == 1  # one array, one task a job
    for num, result in results(sweep_dir).items():
        # each job process ran as that SLURM job, on a node of the cluster
        assert result["slurm"]["job_id"] == ids[num] and result["slurm"]["partition"] == cluster.PARTITION
        assert result["slurm"]["nodes"] in cluster.NODES
    assert "2 jobs: " in proc.stdout  # the report at the end, in the submitting command
    # each job's line and the progress, on the terminal that waits (the callbacks print into the job's SLURM log)
    assert "[progress] 2/2 jobs, 0 not ok" in proc.stdout and "] #0 " in proc.stdout and "] #1 " in proc.stdout, \
        proc.stdout[-3000:]


@pytest.mark.exhaustive
def test_two_node_torch_jobs_split_their_ranks_and_equal_the_one_node_jobs(tmp_path, basic_sweep):
    proc = run_cli(TWO_NODE_TORCH, tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sweep_dir = tmp_path / "multirun"
    assert_same_table(sweep_dir, basic_sweep)  # the same jobs on one node: statuses and losses, bit for bit
    for num, result in results(sweep_dir).items():
        assert result["slurm"]["nodes"] == "sweep[1-2]"
        assert result["launch"]["argv"][:6] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                                                "--kill-on-bad-exit=1", "--label"]
        assert result["launch"]["returncode"] == 0
        log = (sweep_dir / str(num) / "logs" / "launcher.log").read_text()
        # srun's task 0 (the first node) and task 1 (the second) each ran torchrun for its one rank
        assert "0: $ " in log and "--nnodes=2 --node-rank=0 --nproc-per-node=1 --rdzv-backend=static" in log
        assert "1: $ " in log and "--nnodes=2 --node-rank=1 --nproc-per-node=1 --rdzv-backend=static" in log


@pytest.mark.exhaustive
@pytest.mark.mindspore
def test_a_two_node_mindspore_job_runs_msrun_on_each_node_and_equals_the_one_node_job(tmp_path):
    pytest.importorskip("mindspore")
    one = run_cli(MINDSPORE, tmp_path / "one", timeout=600)
    assert one.returncode == 0, one.stdout + one.stderr
    two = run_cli(TWO_NODE_MINDSPORE, tmp_path / "two", timeout=600)
    assert two.returncode == 0, two.stdout + two.stderr
    single, spread = results(tmp_path / "one" / "multirun")[0], results(tmp_path / "two" / "multirun")[0]
    assert single["status"] == spread["status"] == "ok", spread["reason"]
    assert spread["losses"] == single["losses"]  # bit for bit
    assert spread["slurm"]["nodes"] == "sweep[1-2]"
    log = (tmp_path / "two" / "multirun" / "0" / "logs" / "launcher.log").read_text()
    assert "0: $ " in log and "--worker_num=2 --local_worker_num=1" in log and "--node_rank=0" in log
    assert "1: $ " in log and "--node_rank=1" in log
    # On this one-host cluster every node's msrun finds the master address among its own and starts a
    # scheduler; the second cannot bind and that node's msrun exits 1 after its worker finished, so srun's
    # exit is not asserted here (on separate hosts only the first node starts one). The ranks' results are.
    assert spread["ranks_reported"] == [0, 1]


@pytest.mark.exhaustive
def test_time_limits_are_recorded_with_their_cause_while_the_rest_completes(tmp_path):
    # timeout_min=1 without SLURM's warning (signal_delay_s=0): the long job of (steps=100000, adam)
    # is killed at its limit (SLURM's TIMEOUT); (steps=100000, sgd) gets the warning now, the way
    # SLURM sends it (scancel --batch --signal=USR2) and stops itself; the two short jobs complete.
    args = [*TIME_LIMIT, f"hydra.sweep.dir={tmp_path}/s"]
    proc = subprocess.Popen([sys.executable, "-m", "sweep", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        warned = cluster.wait_for("the jobs of steps=100000 running", lambda: _running_task(tmp_path / "s", 3),
                                  timeout=240)
        cluster.wait_for("its ranks launched", lambda: (tmp_path / "s" / "3" / "logs" / "launcher.log").exists(),
                         timeout=120)
        cluster.slurm("scancel", "--batch", "--signal=USR2", warned)
        out, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err
    jobs = results(tmp_path / "s")
    assert [jobs[n]["status"] for n in range(4)] == ["ok", "ok", "timeout", "timeout"], jobs
    killed, stopped = jobs[2], jobs[3]  # (steps=100000, adam), (steps=100000, sgd)
    assert killed["slurm"]["state"] == "TIMEOUT", killed["reason"]
    assert "TIMEOUT" in killed["reason"] and "reached its SLURM time limit (1:00" in killed["reason"]
    assert stopped["slurm"]["job_id"] == warned and "state" not in stopped["slurm"]  # its own record
    assert stopped["reason"].startswith("SLURM time limit: the job had hydra.launcher.timeout_min=1 min")
    assert stopped["log_tails"]  # it stopped its ranks itself and kept their logs' tails
    assert "4 jobs: 2 ok, 2 timeout" in out


def _running_task(sweep_dir: Path, task: int):
    """The SLURM id of array task ``task`` of the sweep whose jobs write into ``sweep_dir``,
    once it is RUNNING."""
    for row in cluster.queue():
        if row["id"].endswith(f"_{task}") and row["state"] == "RUNNING" and (sweep_dir / ".submitit").is_dir():
            return row["id"]
    return None


@pytest.mark.exhaustive
def test_cancelled_and_drained_jobs_are_recorded_with_their_cause_and_resume_finishes_them(tmp_path):
    # One job a node at a time (each node has one CPU, each job takes one), SLURM not requeueing a job
    # whose node fails. While the two long jobs run, one on each node: sweep2 is drained (its job goes
    # on) and the job on sweep1 is cancelled; once the third job runs on sweep1, sweep2 is set DOWN,
    # which kills its job (NODE_FAIL). The two short jobs complete on sweep1.
    args = [*FAULTS, f"hydra.sweep.dir={tmp_path}/s"]
    proc = subprocess.Popen([sys.executable, "-m", "sweep", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        running = cluster.wait_for("two jobs running, one a node", lambda: _one_per_node(), timeout=240)
        cluster.set_node("sweep2", "DRAIN", "sweep test: drained mid-sweep")
        cluster.slurm("scancel", running["sweep1"])
        third = cluster.wait_for("a third job running on sweep1", lambda: _one_per_node(exclude=running.values()),
                                 timeout=240)
        assert list(third) == ["sweep1"], third
        cluster.set_node("sweep2", "DOWN", "sweep test: taken down mid-sweep")
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster.set_node("sweep2", "RESUME", check=False)
    assert proc.returncode == 0, out + err
    jobs = results(tmp_path / "s")
    by_id = {j["slurm"]["job_id"]: n for n, j in jobs.items()}
    cancelled, lost = jobs[by_id[running["sweep1"]]], jobs[by_id[running["sweep2"]]]
    assert cancelled["status"] == "error" and cancelled["slurm"]["state"] == "CANCELLED", cancelled["reason"]
    assert f"SLURM job {running['sweep1']} CANCELLED" in cancelled["reason"]
    assert lost["status"] == "error" and lost["slurm"]["state"] == "NODE_FAIL", lost["reason"]
    assert "on sweep2" in lost["reason"] and "NODE_FAIL" in lost["reason"]
    rest = [j for n, j in jobs.items() if j["slurm"]["job_id"] not in running.values()]
    assert [j["status"] for j in rest] == ["ok", "ok"] and {j["slurm"]["nodes"] for j in rest} == {"sweep1"}
    assert "4 jobs: 2 ok, 2 error" in out
    cluster.wait_for("sweep2 back", lambda: cluster.node_state("sweep2") == "idle", timeout=60)

    again = subprocess.run([sys.executable, "-m", "sweep", *args, "resume=true"], cwd=ROOT, capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    resumed = results(tmp_path / "s")
    assert [j["status"] for _, j in sorted(resumed.items())] == ["ok"] * 4
    for num, job in jobs.items():  # the complete jobs were skipped (their records untouched), the others ran
        assert (resumed[num]["finished"] == job["finished"]) == (job["status"] == "ok"), num
        assert resumed[num]["slurm"]["job_id"] != job["slurm"]["job_id"] or job["status"] == "ok"
    assert "4 jobs: 4 ok" in again.stdout


def _one_per_node(exclude=()):
    """``{node: SLURM id}`` of the sweep's jobs running, when each running one has a node
    of its own (at least two, or one besides ``exclude``)."""
    running = {r["nodes"]: r["id"] for r in cluster.queue() if r["state"] == "RUNNING" and r["name"] == "sweep"
               and r["id"] not in set(exclude)}
    return running if len(running) >= (1 if exclude else 2) else None



def test_a_partition_slurm_refuses_is_one_line_and_exit_2(tmp_path):
    # a new user's wrong partition: sbatch refused, and the command printed submitit's traceback, exit 1
    proc = run_cli([*GRID, "hydra/launcher=slurm", "hydra.launcher.partition=no_such_partition"], tmp_path,
                   timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: SLURM refused the jobs (") and \
        "invalid partition" in errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.exhaustive
def test_an_interrupted_sweep_cancels_its_slurm_jobs(tmp_path):
    # Ctrl-C while the command waited left its jobs running to their time limit (an hour by default), and
    # resume=true then trained a second copy of a job into the same job dir beside the first
    args = ["-m", "ablation=none", "steps=100000,10", "optimizer=adam", *SLURM, f"hydra.sweep.dir={tmp_path}/s"]
    proc = subprocess.Popen([sys.executable, "-m", "sweep", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        cluster.wait_for("a job running", lambda: _running_task(tmp_path / "s", 0), timeout=240)
        proc.send_signal(subprocess.signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert "cancelled the sweep's SLURM jobs still queued or running: " in out + err, (out + err)[-3000:]
    cluster.wait_for("the sweep's jobs gone", lambda: not [r for r in cluster.queue() if r["name"] == "sweep"],
                     timeout=60)


@pytest.mark.exhaustive
def test_a_job_slurm_would_never_start_is_cancelled_and_recorded(tmp_path):
    # cpus_per_task=4 on nodes of 1 CPU: the job stayed pending (PartitionConfig) and the command waited forever
    proc = run_cli(["-m", "ablation=none", "steps=5", *SLURM, "hydra.launcher.cpus_per_task=4"], tmp_path, timeout=400)
    assert proc.returncode == 2, proc.stdout + proc.stderr  # nothing could be judged
    job = results(tmp_path / "multirun")[0]
    assert job["status"] == "error" and job["slurm"]["state"] == "PENDING", job
    assert job["reason"].startswith(f"SLURM job {job['slurm']['job_id']} PENDING (") and \
        "was never started: SLURM held it for a reason that does not clear by itself" in job["reason"], job["reason"]
    assert job["slurm"]["partition"] == cluster.PARTITION
