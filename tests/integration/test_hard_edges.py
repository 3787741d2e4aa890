"""Hard edges a new user hit, each on real processes: the working directory's contents,
a reused or shared sweep dir, interrupts at awkward moments, what is printed to paste."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.slow


def _sweep(args, cwd, timeout=600, **kwargs):
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # tests.helpers engines; the installed sweep package first
    return subprocess.run([sys.executable, "-m", "sweep", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env, **kwargs)


@pytest.mark.parametrize("shadow", ["sweep", "sweep/train", "sweep/report/summary.py"])
def test_a_directory_named_like_the_package_in_the_working_dir_changes_nothing(tmp_path, shadow):
    (tmp_path / shadow).mkdir(parents=True)
    proc = _sweep(["steps=3", "hydra.run.dir=sweep/run"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((tmp_path / "sweep" / "run" / "result.json").read_text())["status"] == "ok"


def test_the_sweep_command_ignores_a_module_named_sweep_in_the_working_dir(tmp_path):
    (tmp_path / "sweep.py").write_text("raise SystemExit('the wrong sweep')\n")
    (tmp_path / "my_engines.py").write_text(
        "from sweep.engines.torch_fsdp2 import TorchFSDP2\n\nclass Mine(TorchFSDP2):\n    pass\n"
    )
    command = os.path.join(os.path.dirname(sys.executable), "sweep")
    proc = subprocess.run([command, "steps=3", "engine.impl.torch=my_engines.Mine", "hydra.run.dir=run"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the user's engine module is found, sweep.py is not
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "ok"


@pytest.mark.exhaustive
def test_a_sweep_dir_named_sweep_reports_and_resumes(tmp_path):
    args = ["-m", "ablation=none", "steps=3", "optimizer=adam,sgd", "hydra.sweep.dir=sweep"]
    assert _sweep(args, tmp_path).returncode == 0
    summary = subprocess.run([sys.executable, "-m", "sweep.report.summary", "sweep"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=300)
    assert summary.returncode == 0 and "2 jobs: 2 ok" in summary.stdout, summary.stderr
    resumed = _sweep(args + ["resume=true"], tmp_path)
    assert resumed.returncode == 0 and "2 jobs: 2 ok" in resumed.stdout and "(resumed)" in resumed.stdout


@pytest.mark.exhaustive
def test_a_sweep_dir_holding_another_grid_is_refused_then_replaced_on_request(tmp_path):
    first = run_cli(["-m", "ablation=none", "steps=3", "optimizer=adam,sgd,adamw"], tmp_path)
    assert first.returncode == 0
    sweep_dir = tmp_path / "multirun"
    for extra in ([], ["resume=true"]):
        other = run_cli(["-m", "ablation=none", "steps=3", "mesh=dp2,dp4", *extra], tmp_path)
        assert other.returncode == 2
        assert "holds another grid (3 jobs: ablation=none steps=3 optimizer=adam,sgd,adamw)" in other.stderr
        assert "this sweep is 2 jobs: ablation=none steps=3 mesh=dp2,dp4" in other.stderr
        assert "Traceback" not in other.stderr and "Launching" not in other.stdout
    replaced = run_cli(["-m", "ablation=none", "steps=3", "mesh=dp2,dp4", "replace_grid=true"], tmp_path)
    assert replaced.returncode == 0, replaced.stdout + replaced.stderr
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert summary["verdict"].startswith("2 jobs: 2 ok") and summary["factors"] == ["mesh"]
    old = list((sweep_dir / ".replaced").glob("*/2/result.json"))
    assert len(old) == 1  # the old grid's jobs were moved aside, not lost


def test_a_second_sweep_on_a_dir_in_use_is_refused(tmp_path):
    # 3000 steps: the first sweep is still running when the second asks (see the interrupt test below)
    args = [sys.executable, "-m", "sweep", "-m", "ablation=none", "steps=3000", "optimizer=adam,sgd",
            f"hydra.sweep.dir={tmp_path}/s"]
    first = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "s" / "0").exists() and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.2)
        assert first.poll() is None, f"the first sweep ended (exit {first.returncode}) before the second asked"
        second = subprocess.run(args + ["resume=true"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2
        assert f"hydra.sweep.dir={tmp_path}/s is in use by another sweep (pid {first.pid}" in second.stderr
    finally:
        first.send_signal(signal.SIGINT)
        first.wait(timeout=120)


@pytest.mark.parametrize("launcher_dir", ["has space", "plain"])
def test_printed_commands_can_be_pasted(tmp_path, launcher_dir):  # the re-render command, as printed
    sweep_dir = tmp_path / launcher_dir / "my sweep"
    proc = _sweep(["-m", "ablation=none", "steps=3", f"hydra.sweep.dir={sweep_dir}"], ROOT)
    assert proc.returncode == 0, proc.stderr
    line = next(l for l in proc.stdout.splitlines() if "re-render:" in l)
    command = line.split("re-render: ", 1)[1].rstrip(")")
    again = subprocess.run(command, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=300,
                           executable="/bin/sh", env=dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:"
                                                                          + os.environ["PATH"]))
    assert again.returncode == 0 and "1 job: 1 ok" in again.stdout, again.stderr


def test_an_interrupt_prints_the_full_resume_command(tmp_path):
    # 3000 steps: the two jobs take a minute or more, so the interrupt always finds the sweep running
    # (at 300 steps a loaded CI machine once saw the sweep end, exit 0, before the signal was sent)
    sweep_dir = tmp_path / "a dir"
    args = ["-m", "ablation=none", "steps=3000", "optimizer=adam,sgd", f"hydra.sweep.dir={sweep_dir}"]
    proc = subprocess.Popen([sys.executable, "-m", "sweep", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (sweep_dir / "0").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert proc.poll() is None, f"the sweep ended (exit {proc.returncode}) before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-4000:]
    command = err.strip().splitlines()[-1].strip()
    assert command.startswith("python -m sweep -m ") and command.endswith("resume=true")
    assert shlex.split(command) == ["python", "-m", "sweep", *args, "resume=true"]


@pytest.mark.exhaustive
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.15, 0.3])
def test_an_interrupt_during_composition_is_an_interrupt(tmp_path, delay):
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweep", "-m", "ablation=none", "steps=50", "optimizer=adam,sgd,adamw",
         "mesh=dp2,dp4,hsdp2x2", f"hydra.sweep.dir={tmp_path}/s"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    line = ""
    while "Launching" not in line and proc.poll() is None:
        line = proc.stdout.readline()
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted: finished jobs keep their results" in err and "resume=true" in err


def test_a_value_hydra_rejects_gives_the_error_alone(tmp_path):
    proc = run_cli(["-m", "ablation=none", "steps=5,abc"], tmp_path)
    assert proc.returncode != 0
    assert "abc" in proc.stderr and "report of the jobs so far" not in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "multirun" / "summary.md").exists()


@pytest.mark.parametrize("where", ["under_file", "read_only"])
def test_a_sweep_dir_that_cannot_be_created_is_one_line(tmp_path, where):
    if where == "under_file":
        (tmp_path / "f").write_text("")
        target = tmp_path / "f" / "s"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only dirs")
        (tmp_path / "ro").mkdir(mode=0o555)
        target = tmp_path / "ro" / "s"
    proc = _sweep(["-m", "ablation=none", "steps=3", f"hydra.sweep.dir={target}"], tmp_path)
    assert proc.returncode == 2
    assert f"error: hydra.sweep.dir={target} cannot be created" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("plugin", ["missing", "no_slurm", "controller_down"])
def test_a_hydra_launcher_that_cannot_run_is_one_line_naming_the_fix(tmp_path, plugin):
    # hydra/launcher=slurm without the cluster extra (the plugin's import fails: a package of
    # that name first on the path that raises ImportError); with it on a host without SLURM (a
    # PATH without srun/sbatch, whether or not this machine has them); with SLURM installed and its
    # controller down (a slurm.conf whose controller is not running: what a login node sees then)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if plugin == "missing":
        fake = tmp_path / "plugins" / "hydra_plugins" / "hydra_submitit_launcher"
        fake.mkdir(parents=True)
        (fake / "__init__.py").write_text("raise ImportError('No module named submitit')\n")
        env["PYTHONPATH"] = f"{tmp_path / 'plugins'}:{ROOT}"
    elif plugin == "no_slurm":
        env["PATH"] = str(Path(sys.executable).parent)
    else:
        from tests.helpers import slurm_cluster

        if not slurm_cluster.slurm_installed():
            slurm_cluster.skip_or_fail("SLURM is not installed (sbatch, srun, squeue, scontrol, slurmctld)")
        env["SLURM_CONF"] = str(slurm_cluster.dead_controller_conf(tmp_path / "down"))
    proc = subprocess.run([sys.executable, "-m", "sweep", "-m", "ablation=none", "steps=3", "hydra/launcher=slurm",
                           f"hydra.sweep.dir={tmp_path}/s"], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "s").exists()  # before anything is written
    if plugin == "missing":  # (after Hydra's own warning that the plugin does not import)
        assert "pip install '.[cluster]'" in proc.stderr.strip().splitlines()[-1]
        return
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    if plugin == "no_slurm":
        assert "this host has no srun/sbatch on PATH" in proc.stderr and "submitit_local" in proc.stderr
    else:
        assert "cannot reach the SLURM controller (scontrol ping: Slurmctld(primary) at" in proc.stderr
        assert "is DOWN" in proc.stderr and "start slurmctld" in proc.stderr and "submitit_local" in proc.stderr


def test_when_nothing_can_be_judged_the_verdict_says_so_and_the_exit_status_is_not_zero(tmp_path):
    proc = run_cli(["-m", "ablation=none", "steps=5", "device=npu,cuda"], tmp_path)
    assert proc.returncode == 2
    summary = json.loads((tmp_path / "multirun" / "summary.json").read_text())
    assert "Nothing could be judged" in summary["verdict"] and "No culprit" not in summary["verdict"]
    assert "device=npu with framework=torch needs torch_npu" in summary["verdict"]


@pytest.mark.exhaustive
def test_results_follow_the_umask(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "sweep", "-m", "ablation=none", "steps=3",
                           f"hydra.sweep.dir={tmp_path}/s"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: os.umask(0o022))
    assert proc.returncode == 0
    for name in ("0/result.json", "summary.json", "summary.md", "0/ranks/rank_0.json"):
        assert oct((tmp_path / "s" / name).stat().st_mode & 0o777) == oct(0o644), name


@pytest.mark.exhaustive
def test_shared_storage_that_shares_nothing_is_noted(tmp_path):
    proc = run_cli(["steps=5", "weights.transfer=shared"], tmp_path)
    assert proc.returncode == 0
    proc = run_cli(["-m", "ablation=none", "steps=5", "weights.transfer=shared,independent"], tmp_path)
    summary = json.loads((tmp_path / "multirun" / "summary.json").read_text())
    assert "weights.transfer=shared had no effect" in summary["jobs"][0]["notes"]
    assert summary["jobs"][1]["notes"] is None


@pytest.mark.mindspore
def test_a_killed_sweep_leaves_no_msrun_behind(tmp_path):
    pytest.importorskip("mindspore")
    from sweep.launch.supervise import tagged_processes

    sweep_dir = tmp_path / "s"
    args = [sys.executable, "-m", "sweep", "-m", "ablation=none", "framework=mindspore", "engine=data_parallel",
            "steps=20", "optimizer=adam,sgd,adamw", f"hydra.sweep.dir={sweep_dir}"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (sweep_dir / "0" / "result.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    tag = json.loads((sweep_dir / "0" / "result.json").read_text())["launch"]["kill_tag"]
    assert tagged_processes(tag) != []
    proc.kill()
    proc.wait()
    killed_at = time.monotonic()
    while tagged_processes(tag) and time.monotonic() - killed_at < 60:
        time.sleep(0.5)
    left = tagged_processes(tag)
    for p in left:
        p.kill()
    assert left == [], f"{len(left)} msrun processes outlived the sweep"
    assert time.monotonic() - killed_at < 20  # the job in flight (20 steps) ends, then msrun at once
