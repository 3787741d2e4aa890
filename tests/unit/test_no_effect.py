"""V132 no effect (sweep.findings.no_effect): a swept factor whose levels gave the same losses bit for
bit in every one-factor pair, and the factors a command's text never interpolates."""

from __future__ import annotations

from sweep.findings import find
from sweep.findings.no_effect import interpolates, still
from sweep.records import JobRecord
from sweep.report.findings import sentence

DRIFT = [2.0, 1.5, 1.25]
OWN = [2.0, 1.5, 1.2]


def _row(job, dist, own=OWN, engine=None, status=None, **overrides):
    status = status or ("ok" if dist == own else "fail")
    diff = max(abs(a - b) for a, b in zip(dist, own))
    result = JobRecord(status=status, losses={"distributed": list(dist), "standalone": list(own)}, engine=engine)
    return {"job": job, "overrides": overrides, "status": status, "reason": None,
            "first_fail_step": 2 if status == "fail" else None, "first_diff_step": 2 if diff else None,
            "mean_signed_diff": diff, "max_abs_diff": diff, "runs_low_pct": 0.0 if diff else None, "notes": None,
            "result": result}


def _v132(rows):
    return [f for f in find(rows) if f.code == "V132"]


def test_a_factor_whose_pairs_all_match_bit_for_bit_is_said_to_have_no_effect_and_no_other():
    rows = [_row(0, OWN, raf="true", opt="adam"), _row(1, OWN, raf="false", opt="adam"),
            _row(2, DRIFT, raf="true", opt="sgd"), _row(3, DRIFT, raf="false", opt="sgd")]
    assert still(rows) == {"raf": 2}  # opt moves the losses in both of its pairs
    (found,) = _v132(rows)
    assert found.levels == ("raf",) and found.values["unread"] == []
    assert sentence(found) == ("No effect on the losses: raf gave the same losses bit for bit, standalone and "
                               "distributed, in every one-factor pair along it (2 in all).")


def test_one_pair_that_differs_keeps_the_factor_out():
    rows = [_row(0, OWN, raf="true", opt="adam"), _row(1, OWN, raf="false", opt="adam"),
            _row(2, DRIFT, raf="true", opt="sgd"), _row(3, [2.0, 1.5, 1.26], raf="false", opt="sgd")]
    assert "raf" not in still(rows) and not _v132(rows)


def test_a_level_that_fails_on_what_the_losses_do_not_show_has_an_effect():
    # a new user's fault on one replica group under mesh=hsdp2x2 only: the losses equal dp4's bit for bit, the
    # replicas disagree and the job fails; mesh is no factor "with no effect"
    rows = [_row(0, OWN, mesh="dp4"), _row(1, OWN, status="fail", mesh="hsdp2x2")]
    assert still(rows) == {} and not _v132(rows)


def test_losses_that_are_not_finite_never_match():
    nan = float("nan")
    rows = [_row(0, [2.0, nan], own=[2.0, 1.0], raf="true"), _row(1, [2.0, nan], own=[2.0, 1.0], raf="false")]
    assert still(rows) == {}


def test_every_job_equal_to_standalone_is_left_to_v114_for_the_builtin_runner():
    rows = [_row(0, OWN, raf="true"), _row(1, OWN, raf="false")]
    assert [f.code for f in find(rows)].count("V114") == 1 and not _v132(rows)


def test_a_command_that_never_interpolates_the_factor_is_told_so():
    written = "torchrun --nproc-per-node=${world_size} repro.py --param-dtype ${mp_policy.name} --reduce mean"
    engine = {"runner": "command", "templates": {"command": written}}
    rows = [_row(0, OWN, engine=engine, **{"runner.args.reduce": "mean", "mp_policy": "fp32"}),
            _row(1, OWN, engine=engine, **{"runner.args.reduce": "sum", "mp_policy": "fp32"})]
    (found,) = _v132(rows)  # every job equals standalone here, and still the command is told
    assert found.values["unread"] == ["runner.args.reduce"]
    assert sentence(found).endswith("along it (1 in all); your command's text does not interpolate "
                                    "runner.args.reduce: a script that does not read it from $SWEEP_JOB_CONFIG or "
                                    "the SWEEP_* variables either never sees it.")


def test_interpolation_is_read_by_the_factor_or_one_of_its_fields():
    assert interpolates("x --dtype ${mp_policy.name}", "mp_policy")
    assert interpolates("x --reduce ${runner.args.reduce}", "runner.args.reduce")
    assert not interpolates("x --reduce ${runner.args.reduce_scatter}", "runner.args.reduce")
    assert not interpolates("x --steps ${steps}", "mp_policy")


def test_a_factor_the_engine_notes_it_does_not_use_is_left_to_that_note():
    rows = [_row(0, OWN, raf="true", opt="adam"), _row(1, OWN, raf="false", opt="adam"),
            _row(2, DRIFT, raf="true", opt="sgd"), _row(3, DRIFT, raf="false", opt="sgd")]
    for row in rows:
        row["note_list"] = ["raf had no effect: engine=data_parallel does not use it"]
    assert still(rows) == {}
