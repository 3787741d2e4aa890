"""What the SLURM controller's answers mean for a job's record (``sweep.launch.slurm``),
with stand-ins for ``scontrol``, ``squeue`` and ``sacct`` first on PATH (whether or not
SLURM is installed here; tests/integration/test_slurm.py asks a real controller)."""

import sys
from pathlib import Path

import pytest

from sweep.launch import slurm
from sweep.launch.slurm import JobState


def _tool(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    """A PATH of stand-ins only (and this interpreter's dir)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}:{Path(sys.executable).parent}")
    return folder


@pytest.mark.parametrize("state, status, words", [
    (JobState("7_2", "TIMEOUT", "TimeLimit", "gpu07", "1:00:23", "1:00:00"), "timeout",
     "SLURM job 7_2 TIMEOUT TimeLimit on gpu07 after 1:00:23: reached its SLURM time limit (1:00:00;"),
    (JobState("7_0", "CANCELLED", "None", "gpu07", "0:09", "1:00:00"), "error",
     "SLURM job 7_0 CANCELLED on gpu07 after 0:09: was cancelled (scancel, or an administrator)"),
    (JobState("7_1", "CANCELLED", "by 1000", "", "", "", source="sacct"), "error",
     "SLURM job 7_1 CANCELLED by 1000: was cancelled"),
    (JobState("7_3", "NODE_FAIL", "NodeDown", "gpu08", "0:09"), "error",
     "SLURM job 7_3 NODE_FAIL NodeDown on gpu08 after 0:09: lost its node (gpu08 failed, or was set DOWN)"),
    (JobState("7_4", "OUT_OF_MEMORY", "", "gpu08"), "error", "ran out of memory (hydra.launcher.mem_gb)"),
    (JobState("7_5", "FAILED", "NonZeroExitCode", "gpu08", exit_code="1:0"), "error", "non-zero exit code (1:0)"),
    (JobState("7_6", "SOMETHING_NEW", "", "gpu08"), "error", "SOMETHING_NEW on gpu08: ended in this state"),
])
def test_each_final_state_reads_as_its_cause(state, status, words):
    assert state.over
    got_status, reason = state.ending()
    assert got_status == status and words in reason, reason


def test_states_that_are_not_over():
    for state in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED", "SUSPENDED", "CONFIGURING"):
        assert not JobState("1", state).over


def test_states_come_from_squeue_then_sacct(bin_dir):
    # squeue knows array job 12 (a finished task too, while the controller keeps it); sacct the rest
    _tool(bin_dir, "squeue", """
assert "--states=all" in sys.argv and "--array" in sys.argv, sys.argv
jobs = next(a for a in sys.argv if a.startswith("--jobs=")).split("=")[1].split(",")
if "12" not in jobs:  # as SLURM's: an error only when it knows none of them
    sys.exit("slurm_load_jobs error: Invalid job id specified")
print("12_0|COMPLETED|None|n1|0:20|1:00")
print("12_1|TIMEOUT|TimeLimit|n2|1:12|1:00")
print("12_2|RUNNING|None|n1|0:05|1:00")
""")
    _tool(bin_dir, "sacct", """
print("13|CANCELLED by 0|n2|00:00:09|01:00:00|0:15")
""")
    states = slurm.job_states(["12_1", "12_2", "13", "99"])
    assert sorted(states) == ["12_1", "12_2", "13"]  # 99: known to neither
    assert states["12_1"] == JobState("12_1", "TIMEOUT", "TimeLimit", "n2", "1:12", "1:00")
    assert not states["12_2"].over
    assert states["13"] == JobState("13", "CANCELLED", "by 0", "n2", "00:00:09", "01:00:00", "0:15", "sacct")


def test_no_slurm_clients_know_no_job(bin_dir):
    assert slurm.job_states(["12_1"]) == {}
    assert slurm.controller_problem() is None  # no scontrol: nothing to ask (sbatch would say)


@pytest.mark.parametrize("answer, rc, problem", [
    ('print("Slurmctld(primary) at head1 is UP")', 0, None),
    ('print("Slurmctld(primary) at head1 is DOWN\\n****\\n** RESTORE SLURMCTLD DAEMON TO SERVICE **\\n****")', 1,
     "scontrol ping: Slurmctld(primary) at head1 is DOWN (slurm.conf: {conf})"),
    ('print("scontrol: fatal: Could not establish a configuration source", file=sys.stderr)', 1,
     "scontrol ping: scontrol: fatal: Could not establish a configuration source (slurm.conf: {conf})"),
])
def test_the_controller_check_says_what_scontrol_ping_said(bin_dir, monkeypatch, tmp_path, answer, rc, problem):
    _tool(bin_dir, "scontrol", f"{answer}\nsys.exit({rc})")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    assert slurm.controller_problem() == (problem.format(conf=conf) if problem else None)


def test_a_slurm_conf_that_is_not_there_is_said_at_once(bin_dir, monkeypatch):
    # a new user's SLURM_CONF pointed nowhere: scontrol ping waited out its 30 s and said only that
    _tool(bin_dir, "scontrol", "import time; time.sleep(60)")
    monkeypatch.setenv("SLURM_CONF", "/nonexistent/slurm.conf")
    assert slurm.controller_problem() == "SLURM_CONF=/nonexistent/slurm.conf: no such file"


def test_a_job_process_names_its_slurm_job():
    assert slurm.job_environment({}) is None
    env = {"SLURM_JOB_ID": "31", "SLURM_ARRAY_JOB_ID": "30", "SLURM_ARRAY_TASK_ID": "1",
           "SLURM_JOB_NODELIST": "sweep[1-2]", "SLURM_JOB_PARTITION": "sweep", "SLURM_RESTART_COUNT": "1"}
    assert slurm.job_environment(env) == {"job_id": "30_1", "nodes": "sweep[1-2]", "partition": "sweep",
                                          "restarts": 1}
    assert slurm.job_environment({"SLURM_JOB_ID": "5"})["job_id"] == "5"


def test_a_job_that_ended_without_its_result_gets_one_naming_the_cause(tmp_path):
    from hydra_plugins.sweep_launcher.slurm_launcher import record_ending
    from sweep.records import JobRecord

    ids = {"job_id": "7_0", "state": "CANCELLED", "nodes": "n1"}
    # never started: a record of its own, with the grid's overrides (the report matches it to its job)
    written = record_ending(tmp_path / "0", ["optimizer=adam"], "error", "SLURM job 7_0 CANCELLED ...", ids)
    assert written["status"] == "error" and written["overrides"] == ["optimizer=adam"]
    assert JobRecord.read(tmp_path / "0" / "result.json").slurm == ids
    # its own record said how its ranks died: SLURM's cause first, the job's own words after it
    own = JobRecord(status="error", reason="launcher killed by SIGTERM", overrides=["optimizer=sgd"],
                    slurm={"job_id": "7_1", "nodes": "n2", "partition": "p", "restarts": 0})
    own.write(tmp_path / "1" / "result.json")
    written = record_ending(tmp_path / "1", ["optimizer=sgd"], "timeout", "SLURM job 7_1 TIMEOUT ...",
                            {"job_id": "7_1", "state": "TIMEOUT", "nodes": "n2"})
    assert written["status"] == "timeout"
    assert written["reason"] == "SLURM job 7_1 TIMEOUT ...; the job's own record said: launcher killed by SIGTERM"
    assert written["slurm"] == {"job_id": "7_1", "nodes": "n2", "partition": "p", "restarts": 0, "state": "TIMEOUT"}


def test_a_time_limit_within_slurms_warning_before_it_is_refused_before_any_job():
    # timeout_min=1 with the default signal_delay_s=120: SLURM warned every job at its start, and a new
    # user's whole sweep was recorded as timed out within seconds
    from omegaconf import OmegaConf

    from sweep.run.callbacks import launcher_missing

    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    launcher = OmegaConf.create({"_target_": "hydra_plugins.sweep_launcher.slurm_launcher.SweepSlurmLauncher",
                                 "timeout_min": 1, "signal_delay_s": 120})
    assert launcher_missing(launcher) == (
        "hydra.launcher.timeout_min=1 min is not longer than hydra.launcher.signal_delay_s=120 s, how long before "
        "the time limit SLURM warns a job: every job would be stopped as timed out at its start; give a longer "
        "timeout_min or a shorter signal_delay_s")
