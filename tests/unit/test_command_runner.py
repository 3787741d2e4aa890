"""runner=command without launching: the loss lines, the loss file, the job's environment,
the schema's checks, golden files against a job's config (real launches:
tests/integration/test_command_runner.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sweep.errors import ConfigError
from sweep.run.loss_lines import LossError, as_ranks, entries, parse_text, sequences

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def report_parse(compose_cfg):
    return compose_cfg(["runner=command", "runner.command=true"]).runner.parse


def test_the_report_preset_reads_the_reports_lines_plain_prefixed_and_as_mindspore_tensors(report_parse):
    patterns = {"standalone": report_parse.standalone, "distributed": report_parse.distributed}
    text = "\n".join([
        "Rank 0: Training standalone model for 2 steps...",
        "step: 0, standalone loss: 1.0431",                                  # the report, plain
        "[default1]:step: 0, fully_shard loss: 1.03e-01",                    # torchrun --tee
        "[rank1]:step: 1, fully_shard loss: nan",                            # torchrun's other prefix
        "step: 1, standalone loss: Tensor(shape=[], dtype=Float32, value= 0.98)",  # a MindSpore Tensor
        "step: 2, distributed loss: .5",
    ])
    found = parse_text(text, patterns, rank=7)
    assert [(e["copy"], e["step"], e["rank"]) for e in found] == [
        ("standalone", 0, 7), ("distributed", 0, 1), ("distributed", 1, 1), ("standalone", 1, 7), ("distributed", 2, 7)]
    assert found[1]["loss"] == pytest.approx(0.103) and found[2]["loss"] != found[2]["loss"]  # nan
    assert found[3]["loss"] == pytest.approx(0.98) and found[4]["loss"] == 0.5


def test_sequences_per_rank_and_what_does_not_fit_the_steps():
    def e(copy, step, loss, rank=None):
        return {"copy": copy, "step": step, "loss": loss, "rank": rank}

    ranked = [e("distributed", s, float(s + r), r) for r in (0, 1) for s in range(3)]
    assert as_ranks(sequences(ranked, "distributed", 3)) == {0: [0.0, 1.0, 2.0], 1: [1.0, 2.0, 3.0]}
    # steps counted from 1, and the same line printed by every rank without a rank: counted once
    echoed = [e("standalone", s, 0.5) for s in (1, 2, 3) for _ in range(4)]
    assert as_ranks(sequences(echoed, "standalone", 3)) == {0: [0.5, 0.5, 0.5]}
    with pytest.raises(LossError, match="3 steps.*steps=5 expects steps 0-4"):
        sequences(ranked, "distributed", 5)
    with pytest.raises(LossError, match="missing 1"):
        sequences([e("distributed", 0, 1.0), e("distributed", 2, 1.0)], "distributed", 2)
    with pytest.raises(LossError, match="reported twice by lines that name no rank.*give each rank's lines a rank"):
        sequences([e("distributed", 0, 1.0), e("distributed", 0, 2.0)], "distributed", 1)
    with pytest.raises(LossError, match="no standalone loss reported"):
        sequences(ranked, "standalone", 3)
    # msrun --join=True echoes every worker's log, rank-less, beside the ranked worker_<r>.log files: ranks whose
    # losses differ (a per-rank bug, sharded data) made the echo "reported twice"; the ranked lines are the ranks
    echo = [dict(x, rank=None) for x in ranked]
    assert as_ranks(sequences(echo + ranked, "distributed", 3)) == {0: [0.0, 1.0, 2.0], 1: [1.0, 2.0, 3.0]}


def test_lines_glued_by_ranks_sharing_a_stream_still_count_and_holes_say_why():
    patterns = {"standalone": r"\[r(?P<rank>\d+)\] it=(?P<step>\d+) ref=(?P<loss>\S+)"}
    glued = "[r0] it=0 ref=1.25[r1] it=0 ref=1.5\n[r0] it=1 ref=2.0\n[r1] it=1 ref=2.5\n"
    found = parse_text(glued, patterns)
    assert as_ranks(sequences(found, "standalone", 2)) == {0: [1.25, 2.0], 1: [1.5, 2.5]}
    split = "[r0] it=0 ref=1.25\n[r0] it=\n1 ref=2.0\n[r0] it=2 ref=3.0\n"
    with pytest.raises(LossError, match="missing 1.*run torchrun with --tee 3"):
        sequences(parse_text(split, patterns), "standalone", 3)
    stopped = "[r0] it=0 ref=1.25\n[r0] it=1 ref=2.0\n"  # a run that stopped after 2 of 5 steps: no hint
    with pytest.raises(LossError) as raised:
        sequences(parse_text(stopped, patterns), "standalone", 5)
    assert "2 steps (0-1); steps=5 expects steps 0-4" in str(raised.value) and "--tee" not in str(raised.value)


def test_the_loss_file_wins_over_the_output_and_files_take_their_rank_from_the_path(tmp_path, report_parse):
    log = tmp_path / "logs" / "command.log"
    log.parent.mkdir()
    log.write_text("step: 0, standalone loss: 1.0\n")
    (tmp_path / "msrun_log").mkdir()
    for rank in (0, 1):
        (tmp_path / "msrun_log" / f"worker_{rank}.log").write_text(f"step: 0, fully_shard loss: {rank + 2}.0\n")
    parse = OmegaConf.merge(report_parse, {"files": ["msrun_log/worker_*.log"]})
    found, source = entries(tmp_path, tmp_path / "losses.jsonl", log, parse)
    assert source.kind == "output"
    assert sorted((x["copy"], x["rank"], x["loss"]) for x in found) == [
        ("distributed", 0, 2.0), ("distributed", 1, 3.0), ("standalone", None, 1.0)]
    (tmp_path / "losses.jsonl").write_text(json.dumps({"step": 0, "loss": "inf", "copy": "distributed", "rank": 0})
                                           + "\n")
    found, source = entries(tmp_path, tmp_path / "losses.jsonl", log, parse)
    assert source.kind == "loss file" and found == [{"step": 0, "loss": float("inf"), "copy": "distributed",
                                                     "rank": 0}]
    (tmp_path / "losses.jsonl").write_text("not json\n")
    with pytest.raises(LossError, match="losses.jsonl:1: not a loss entry"):
        entries(tmp_path, tmp_path / "losses.jsonl", log, parse)


def test_log_loss_needs_only_the_standard_library_and_takes_rank_and_copy_from_the_environment(tmp_path, monkeypatch):
    target = tmp_path / "losses.jsonl"
    script = ("import sys, sweep\n"
              "sweep.log_loss(0, 1.5)\n"
              "sweep.log_loss(1, float('nan'), copy='standalone', rank=3)\n"
              "heavy = [m for m in ('torch', 'numpy', 'mindspore', 'omegaconf', 'hydra') if m in sys.modules]\n"
              "assert not heavy, heavy\n")
    env = dict(os.environ, SWEEP_LOSS_FILE=str(target), SWEEP_COPY="distributed", RANK="2")
    subprocess.run([sys.executable, "-c", script], check=True, env=env, cwd=tmp_path)
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert lines == [{"step": 0, "loss": 1.5, "copy": "distributed", "rank": 2},
                     {"step": 1, "loss": "nan", "copy": "standalone", "rank": 3}]
    from sweep.lossfile import log_loss

    with pytest.raises(ValueError, match="copy='baseline'"):
        log_loss(0, 1.0, copy="baseline", path=str(target))
    monkeypatch.delenv("SWEEP_LOSS_FILE", raising=False)
    log_loss(0, 1.0)  # outside sweep: a no-op
    assert len(target.read_text().splitlines()) == 2


def test_the_schema_refuses_a_command_job_without_a_command_or_with_a_regex_lacking_its_groups(compose_cfg):
    from sweep.config.schema import check_fields

    with pytest.raises(ConfigError, match="runner=command needs runner.command"):
        check_fields(compose_cfg(["runner=command"]))
    with pytest.raises(ConfigError, match=r"runner.parse.distributed=.*needs the named group \(\?P<step>"):
        check_fields(compose_cfg(["runner=command", "runner.command=true", "runner.parse.distributed='loss (?P<loss>.+)'"]))
    with pytest.raises(ConfigError, match="runner.parse.standalone=.*not a regex"):
        check_fields(compose_cfg(["runner=command", "runner.command=true", "runner.parse.standalone='(?P<step'"]))
    assert check_fields(compose_cfg(["runner=command", "runner.command=true", "mesh=dp4"])) == 4


def test_a_command_sees_its_config_interpolated_with_enum_values_and_as_environment(compose_cfg, tmp_path):
    from sweep.config.schema import normalize, to_container
    from sweep.run.command import job_env

    cfg = compose_cfg(["runner=command", "mp_policy=bf16", "mesh=hsdp2x2", "+runner.args.reduce=sum",
                       "reshard_after_forward=false", "+runner.args.average=true",
                       "runner.command='torchrun --nproc-per-node=${world_size} r.py --dtype ${mp_policy.param_dtype} "
                       "--reduce ${runner.args.reduce} --raf ${reshard_after_forward} --avg ${runner.args.average} "
                       "--out ${mp_policy.output_dtype}'"])
    normalize(cfg)
    config = to_container(cfg)
    assert config["runner"]["command"] == ("torchrun --nproc-per-node=4 r.py --dtype bfloat16 --reduce sum "
                                           "--raf false --avg true --out null")  # as typed, not True/None
    assert config["reshard_after_forward"] is False and config["runner"]["args"]["average"] is True
    env = job_env(config, tmp_path, tmp_path / "losses.jsonl", "distributed")
    assert env["SWEEP_MP_POLICY_PARAM_DTYPE"] == "bfloat16" and env["SWEEP_RUNNER_ARGS_REDUCE"] == "sum"
    assert env["SWEEP_WORLD_SIZE"] == "4" and env["SWEEP_MESH_MESH_SHAPE"] == "[2, 2]"
    assert env["SWEEP_MP_POLICY_OUTPUT_DTYPE"] == "" and env["SWEEP_DETERMINISTIC"] == "true"
    assert env["SWEEP_LOSS_FILE"] == str(tmp_path / "losses.jsonl") and env["SWEEP_COPY"] == "distributed"
    assert env["SWEEP_JOB_CONFIG"] == str(tmp_path / "job.json") and "SWEEP_RUNNER_COMMAND" not in env


def test_runner_command_sweeps_only_the_given_overrides(compose_cfg):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        grid = compose(config_name="config", overrides=[], return_hydra_config=True).hydra.sweeper.params
        mine = compose(config_name="config", overrides=["runner=command"], return_hydra_config=True).hydra.sweeper.params
    assert grid and "mp_policy" in grid and mine is None


def _golden(tmp_path: Path, config: dict, steps: int) -> Path:
    path = tmp_path / "golden.json"
    rows = [{"step": s, "loss": 1.0 - s / 10, "rank": None, "copy": "standalone"} for s in range(steps)]
    path.write_text(json.dumps({"format": "sweep-golden/1", "steps": steps, "config": config, "versions": {},
                                "source": "elsewhere", "rows": rows}))
    return path


def test_a_golden_file_is_refused_naming_what_differs_and_taken_where_only_the_machine_differs(compose_cfg, tmp_path):
    from sweep.config.schema import to_container
    from sweep.run.baseline import from_file

    job = to_container(compose_cfg(["steps=4"]))
    theirs = to_container(compose_cfg(["steps=4", "device=npu", "framework=mindspore", "optimizer.lr=0.001"]))
    with pytest.raises(ConfigError, match=r"made with another config: optimizer.lr \(golden 0.001, job 0.0001\)"):
        from_file(job, str(_golden(tmp_path, theirs, 4)))
    same_but_machine = to_container(compose_cfg(["steps=4", "device=npu", "execution.timeout_s=9"]))
    entry = from_file(job, str(_golden(tmp_path, same_but_machine, 4)))
    assert entry["standalone"] == [1.0, 0.9, 0.8, 0.7] and entry["source"] == "file"
    with pytest.raises(ConfigError, match="holds 3 steps, the job trains steps=4"):
        from_file(job, str(_golden(tmp_path, same_but_machine, 3)))
    with pytest.raises(ConfigError, match="not a golden file"):
        (tmp_path / "other.json").write_text("{}")
        from_file(job, str(tmp_path / "other.json"))
    with pytest.raises(ConfigError, match="no such file"):
        from_file(job, str(tmp_path / "absent.json"))


def test_a_golden_file_of_another_command_is_refused_unless_its_command_is_ignored(compose_cfg, tmp_path):
    from sweep.config.schema import to_container
    from sweep.run.baseline import from_file
    from sweep.run.command import command_templates

    def cfg(command, *more):
        return compose_cfg(["runner=command", f"runner.command='{command}'", "steps=4", *more])

    mine = cfg("python train.py --steps ${steps} --lr 0.1")
    golden = _golden(tmp_path, to_container(mine), 4)
    data = json.loads(golden.read_text())
    data["commands"] = command_templates(cfg("python train.py --steps ${steps} --lr 0.2"))  # a flag written in
    golden.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"runner.command as written \(golden 'python train.py --steps \$\{steps\} "
                                          r"--lr 0.2', job 'python train.py --steps \$\{steps\} --lr 0.1'\)"):
        from_file(to_container(mine), str(golden), commands=command_templates(mine))
    ignoring = cfg("python train.py --steps ${steps} --lr 0.1", "baseline.ignore_keys=[runner.command]")
    assert from_file(to_container(ignoring), str(golden), commands=command_templates(ignoring))["source"] == "file"
    data["commands"] = command_templates(mine)  # the same template, another swept value: taken
    golden.write_text(json.dumps(data))
    other_steps_value = cfg("python train.py --steps ${steps} --lr 0.1")
    assert from_file(to_container(other_steps_value), str(golden),
                     commands=command_templates(other_steps_value))["source"] == "file"


def test_a_crash_is_named_by_its_exception_line_even_under_a_launchers_summary(tmp_path):
    from types import SimpleNamespace

    from sweep.run.command import RunResult

    run = RunResult(log=tmp_path / "command.log", loss_file=tmp_path / "losses.jsonl", spec=None, limit=60.0,
                    outcome=SimpleNamespace(returncode=1, timed_out=False))  # type: ignore[arg-type]
    run.log.write_text("$ /bin/sh -c torchrun ...\n[default1]:[rank1]: RuntimeError: planted crash in backward\n"
                       "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n" + "=" * 60 + "\n"
                       + "\n".join(f"  summary line {i}" for i in range(20)) + "\n" + "=" * 60 + "\n")
    assert run.crash() == "the command exited with code 1; command.log: rank 1: RuntimeError: planted crash in " \
                          "backward"
    run.log.write_text("$ /bin/sh -c python x.py\nNPU driver mismatch\n")  # SystemExit("..."): no exception line
    assert run.crash() == "the command exited with code 1; command.log ends: NPU driver mismatch"


ROOT_CAUSE_BOX = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_06:50:00
  host      : box
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 4242)
  error_file: <N/A>
============================================================
"""


def test_a_crash_is_blamed_on_the_rank_that_failed_not_on_a_survivors_follow_on_error(tmp_path):
    from types import SimpleNamespace

    from sweep.run.command import RunResult
    from sweep.run.failures import first_failure

    run = RunResult(log=tmp_path / "command.log", loss_file=tmp_path / "losses.jsonl", spec=None, limit=60.0,
                    outcome=SimpleNamespace(returncode=1, timed_out=False))  # type: ignore[arg-type]
    # rank 1 raises first; rank 0, waiting in an all_reduce, sees its peer vanish (the last exception line)
    interleaved = ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
                   "ValueError: planted: rank 1 cannot read its shard", "Traceback (most recent call last):",
                   "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer"]
    run.log.write_text("\n".join(["$ torchrun ...", *interleaved, ROOT_CAUSE_BOX]))
    assert run.crash() == ("the command exited with code 1; command.log: rank 1: ValueError: planted: rank 1 cannot "
                           "read its shard")
    # with --tee 3 prefixes, the root cause's rank picks its own line even when another rank's comes first
    tee = ["[default0]:RuntimeError: Connection closed by peer", "[default2]:KeyError: 'unrelated but earlier'",
           "[default1]:ValueError: planted", *ROOT_CAUSE_BOX.splitlines()]
    assert first_failure([tee]) == {"rank": 1, "line": "ValueError: planted", "root_cause": True}
    assert first_failure([["RuntimeError: Connection reset by peer"]]) == {
        "rank": None, "line": "RuntimeError: Connection reset by peer", "root_cause": False}  # only a follow-on
    assert first_failure([["all good"]]) is None
    # each rank in a file of its own (torchrun --redirects 3): rank 0's file read first holds only its follow-on
    box, rank0, rank1 = ROOT_CAUSE_BOX.splitlines(), ["[rank0]: RuntimeError: Connection closed by peer"], \
        ["Traceback (most recent call last):", "ValueError: planted: rank 1 at step 3"]
    assert first_failure([box, rank0, rank1], [None, 0, 1]) == {
        "rank": 1, "line": "ValueError: planted: rank 1 at step 3", "root_cause": True}
    assert first_failure([["no box"], rank0, rank1], [None, 0, 1])["rank"] == 1  # no box: the earliest real cause
    # an exit 0 without losses: its code and its last lines
    run.outcome = SimpleNamespace(returncode=0, timed_out=False)
    run.log.write_text("$ python train.py\nstep 1\ndone\n")
    assert run.failure("no distributed loss reported") == (
        "error", "the command exited with code 0; no distributed loss reported; command.log ends: step 1 | done")
    # a script whose own argument parser refused a flag (a new user's typo in a swept value): its line, not the
    # launcher's last words or the pattern it would have had to print
    run.outcome = SimpleNamespace(returncode=1, timed_out=False)
    run.log.write_text("$ torchrun train.py --reduce summ\nusage: train.py [--reduce {mean,sum}]\n"
                       "train.py: error: argument --reduce: invalid choice: 'summ' (choose from 'mean', 'sum')\n"
                       "traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n")
    assert run.failure("no distributed loss reported; expected lines matching ^step") == (
        "error", "the command exited with code 1; command.log: train.py: error: argument --reduce: invalid choice: "
                 "'summ' (choose from 'mean', 'sum'); no distributed loss reported")


def test_the_baseline_command_runs_unless_the_sweeps_cache_holds_it_and_a_failure_is_a_status_and_reason(
        compose_cfg, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from sweep.config.schema import to_container
    from sweep.records import JobRecord
    from sweep.run import command

    ran = []

    def run_once(cfg, config, run_dir, cmd, copy, limit):  # what a baseline command reporting 2 steps leaves
        ran.append(cmd)
        found = [{"copy": "standalone", "step": s, "loss": 1.0 - s / 10, "rank": None} for s in range(2)]
        return command.RunResult(log=tmp_path / "b.log", loss_file=tmp_path / "b.jsonl", spec=None, limit=limit,
                                 outcome=SimpleNamespace(returncode=0, timed_out=False), entries=found)

    monkeypatch.setattr(command, "run_once", run_once)
    cfg = compose_cfg(["runner=command", "runner.command=true", "runner.baseline_command=echo base", "steps=2"])
    config, sweep_dir = to_container(cfg), tmp_path / "sweep"

    def standalone(use_cache=True, sweep=sweep_dir, c=cfg):
        record = JobRecord(config=config, overrides=[])
        got = command._standalone(c, config, tmp_path, record, sweep, 60.0, use_cache=use_cache)
        return got, record.baseline["source"]

    assert standalone() == (([1.0, 0.9], None), "baseline_command") and len(ran) == 1  # run, stored
    assert standalone() == (([1.0, 0.9], None), "cache") and len(ran) == 1              # read from the cache
    assert standalone(use_cache=False)[1] == "baseline_command" and len(ran) == 2       # a repeat: never cached
    assert standalone(sweep=None)[1] == "baseline_command" and len(ran) == 3            # no sweep dir
    no_reuse = compose_cfg(["runner=command", "runner.command=true", "runner.baseline_command=echo base", "steps=2",
                            "execution.reuse_baselines=false"])
    assert standalone(c=no_reuse)[1] == "baseline_command" and len(ran) == 4

    monkeypatch.setattr(command, "run_once", lambda *a: command.RunResult(
        log=tmp_path / "b.log", loss_file=tmp_path / "b.jsonl", spec=None, limit=9.0, error="no losses",
        outcome=SimpleNamespace(returncode=0, timed_out=False, killed=0)))
    record = JobRecord(config=config, overrides=[])
    assert command._standalone(cfg, config, tmp_path, record, None, 9.0, use_cache=False) == \
        (None, ("error", "runner.baseline_command: the command exited with code 0; no losses"))


def test_ranks_that_reported_are_said_and_unranked_lines_claim_no_rank(compose_cfg, tmp_path):
    from types import SimpleNamespace

    from sweep.run.command import RunResult, _ranks

    cfg = compose_cfg(["runner=command", "runner.command=true", "steps=2"])

    def run(entries):
        return RunResult(log=tmp_path / "c.log", loss_file=tmp_path / "l.jsonl", spec=None, limit=9.0,
                         outcome=SimpleNamespace(returncode=0, timed_out=False), entries=entries)

    def e(copy, step, rank):
        return {"copy": copy, "step": step, "loss": 1.0 - step / 10, "rank": rank}

    ranked = [e(c, s, 0) for c in ("standalone", "distributed") for s in (0, 1)]
    ranks, _, notes = _ranks(cfg, run(ranked), 2, None)
    assert [r.rank for r in ranks] == [0]
    assert notes == ["ranks reported: only rank 0 of 2 reported losses (rank 1 none), so the job is judged on it "
                     "and whether the ranks agree is not known"]
    unranked = [e(c, s, None) for c in ("standalone", "distributed") for s in (0, 1)]
    notes = _ranks(cfg, run(unranked), 2, None)[2]
    assert len(notes) == 1 and notes[0].startswith("ranks reported: the lines name no rank") and "rank 1" not in notes[0]
