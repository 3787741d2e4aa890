"""Attribution on constructed result sets: a known culprit, a known interaction, a clean
sweep, and errored jobs."""

from itertools import product

import pytest

from sweep.analysis.culprits import candidates as culprits
from sweep.analysis.culprits import interactions
from sweep.analysis.grid import contrasts, level_stats, one_factor_pairs
from sweep.report.findings import attribute
from sweep.analysis.evidence import drift_class


def said(att, code):
    """The sentences of the findings of ``code`` in a verdict (``attribute``)."""
    return [f["sentence"] for f in att["findings"] if f["code"] == code]


def codes(att):
    """The codes of a verdict's findings, in rank order."""
    return [f["code"] for f in att["findings"]]


def _row(job, status, first=None, msd=None, **overrides):
    """A row as sweep.report.summary.collect returns it (only the keys attribution reads); a
    job that differs does so with one sign on every step (``runs_low_pct``), no envelope measured."""
    judged = status in ("ok", "fail")
    low = None if not judged or not msd else (100.0 if msd < 0 else 0.0)
    return {
        "job": job, "overrides": {"steps": "50", **overrides}, "status": status, "reason": None,
        "first_fail_step": first, "mean_signed_diff": msd if judged else None,
        "max_abs_diff": abs(msd) if judged and msd is not None else None, "runs_low_pct": low,
    }


def _measured(row, within=True, dtype="float32", config=None):
    """``row`` with a measured rounding envelope (``JobRecord.envelope``) that its losses stay
    within, or leave from its first real step."""
    from sweep.records import JobRecord

    loss = {"within": within, "first_beyond_step": None if within else row.get("first_real_step"),
            "ratio": 1.2 if within else 30.0, "band": 1e-4, "sign": None}
    return dict(row, result=JobRecord(status=row["status"], config=config, envelope={
        "measured": True, "dtype": dtype, "margin": 4.0, "loss": loss, "other_failures": []}))


def _grid(verdict, **levels):
    """One row per combination of ``levels``; ``verdict(combo) -> (status, first, msd)``."""
    keys = list(levels)
    return [
        _row(job, *verdict(dict(zip(keys, values))), **dict(zip(keys, values)))
        for job, values in enumerate(product(*levels.values()))
    ]


GRID = {"optimizer": ["adam", "sgd"], "mesh": ["dp2", "dp4"], "mp_policy": ["fp32", "bf16"]}
OK = ("ok", None, 0.0)


def test_the_factor_that_fails_everywhere_is_ranked_first():
    # sgd fails in every context; one more failure (adam, dp4, bf16) adds weaker suspects
    def verdict(c):
        if c["optimizer"] == "sgd":
            return "fail", 1, -0.5
        return ("fail", 40, -1e-3) if (c["mesh"], c["mp_policy"]) == ("dp4", "bf16") else OK

    att = attribute(_grid(verdict, **GRID))
    top = att["culprits"][0]
    assert (top["factor"], top["level"], top["to_fail"], top["pairs"]) == ("optimizer", "sgd", 3, 4)
    (evidence,) = said(att, "V120")
    assert evidence.startswith("optimizer=sgd: fails in 3 of 3 one-factor pairs where optimizer=adam passes")
    assert "runs low" in evidence
    assert said(att, "V121")[0].startswith("The earliest parts from standalone at step 1") and \
        "first_update" in said(att, "V121")[0]
    assert {(c["factor"], c["level"]) for c in att["culprits"][1:]} == {("mesh", "dp4"), ("mp_policy", "bf16")}
    assert all(c["score"] < top["score"] for c in att["culprits"][1:])
    assert codes(att)[:2] == ["V000", "V101"] and "mesh=dp4" in said(att, "V140")[0]
    assert att["verdict"].startswith("8 jobs: 3 ok, 5 fail. Culprit: optimizer=sgd, failing in 3 of 3")
    assert att["drift"] == {"step0": [], "first_update": [4, 5, 6, 7], "periodic": [], "from_step": [3], "rounding": []}


def test_a_factor_that_fails_only_with_another_level_is_reported_as_an_interaction():
    def verdict(c):
        return ("fail", 30, 2e-3) if (c["mp_policy"], c["mesh"]) == ("bf16", "dp4") else OK

    rows = _grid(verdict, **GRID)
    found = interactions(rows, culprits(rows))
    assert len(found) == 1  # bf16-only-with-dp4 and dp4-only-with-bf16 is one finding
    (hit,) = found
    assert {(hit["factor"], hit["level"]), (hit["with_factor"], hit["with_levels"][0])} == {
        ("mp_policy", "bf16"), ("mesh", "dp4")
    }
    assert (hit["flips"], hit["pairs"], hit["without_pairs"]) == (2, 2, 2)
    att = attribute(rows)
    (only,) = said(att, "V122")
    assert "turns a pass into a fail only when" in only and "never when" in only
    assert "only when mesh=dp4" in only or "only when mp_policy=bf16" in only
    assert hit["without_failing"] == 0 and "fails already" not in only
    # where the other level fails anyway, "never" is said with why: nothing could turn a fail into a fail
    def stuck(c):
        return ("fail", 30, 2e-3) if c["engine"] == "stuck" or (c["engine"], c["split"]) == ("ok", "sharded") else OK

    rows = _grid(stuck, engine=["ok", "stuck"], split=["replicated", "sharded"])
    found = interactions(rows, culprits(rows))
    assert found and all(hit["without_pairs"] == hit["without_failing"] == 1 for hit in found)
    sentences = said(attribute(rows), "V122")
    assert sentences and all(s.endswith("(0 of 1 pairs; in 1 of them the job without it fails already).")
                             for s in sentences), sentences
    assert "runs high" in " ".join(said(att, "V120")) and "from_step" in said(att, "V121")[0]
    # the optimizer never matters: no culprit, no interaction
    assert all("optimizer" not in (c["factor"], c.get("with_factor")) for c in att["culprits"] + att["interactions"])


def test_a_clean_sweep_names_no_culprit():
    rows = _grid(lambda c: ("ok", None, 1e-6 if c["mp_policy"] == "bf16" else 0.0), **GRID)
    att = attribute(rows)
    assert att["culprits"] == [] and att["interactions"] == []
    assert codes(att) == ["V000", "V114"]  # no job records a differing step
    assert att["verdict"] == "8 jobs: 8 ok. No job fails: every job equals standalone bit for bit."
    assert all(s["pass_rate_pct"] == 100.0 for s in att["levels"])


def test_a_sweep_where_every_job_fails_names_no_factor():
    att = attribute(_grid(lambda c: ("fail", 0, -0.1), **GRID))
    assert att["culprits"] == []
    assert "no one-factor change turns a pass into a fail" in att["verdict"]
    assert "common to all" in att["verdict"]
    assert att["drift"]["step0"] == list(range(8))


def test_errored_jobs_are_listed_and_left_out_of_pass_rates():
    rows = [
        _row(0, "ok", None, 0.0, optimizer="adam", mesh="dp2"),
        _row(1, "fail", 2, -0.5, optimizer="sgd", mesh="dp2"),
        _row(2, "error", optimizer="adam", mesh="dp4"),
        _row(3, "missing", optimizer="sgd", mesh="dp4"),
    ]
    rows[2]["reason"] = "launcher exited with code 1"
    att = attribute(rows)
    assert att["not_judged"] == [
        {"job": 2, "status": "error", "reason": "launcher exited with code 1"},
        {"job": 3, "status": "missing", "reason": None},
    ]
    assert att["counts"] == {"ok": 1, "fail": 1, "error": 1, "timeout": 0, "missing": 1} and att["judged"] == 2
    adam = next(s for s in att["levels"] if s["level"] == "adam")
    assert (adam["jobs"], adam["judged"], adam["not_judged"], adam["pass_rate_pct"]) == (2, 1, 1, 100.0)
    dp4 = next(s for s in att["levels"] if s["level"] == "dp4")
    assert dp4["pass_rate_pct"] is None and dp4["mean_signed_diff"] is None
    assert [(f, a["job"], b["job"]) for f, a, b in one_factor_pairs(rows)] == [("optimizer", 0, 1)]
    assert att["culprits"][0]["level"] == "sgd"
    assert said(att, "V161") == ["Not judged: job 2 error: launcher exited with code 1.",
                                 "Not judged: job 3 missing: no reason recorded."]
    # jobs that share a status and reason are said once (half a grid refused for one invalid pair of levels)
    many = [_row(0, "ok", msd=0.0)] + [dict(_row(j, "error"), reason="invalid config: x") for j in range(1, 11)]
    assert said(attribute(many), "V161") == ["Not judged: jobs 1, 2, 3, 4, 5, 6, 7, 8 and 2 more error: "
                                             "invalid config: x."]


def test_one_factor_contrasts_count_flips_and_shifts():
    rows = _grid(lambda c: ("fail", 3, -0.4) if c["optimizer"] == "sgd" else ("ok", None, -0.1), **GRID)
    assert len(one_factor_pairs(rows)) == 12  # 4 pairs along each of 3 factors
    by_factor = {c["factor"]: c for c in contrasts(rows)}
    assert by_factor["optimizer"]["flips"] == 4 and by_factor["optimizer"]["flip_rate_pct"] == 100.0
    assert by_factor["optimizer"]["mean_abs_shift"] == pytest.approx(0.3)
    assert by_factor["mesh"]["flips"] == 0 and by_factor["mesh"]["max_abs_shift"] == 0.0
    assert culprits(rows)[0]["mean_shift"] == pytest.approx(-0.3)  # sgd moves the drift down


def test_level_stats_follow_the_jobs_of_each_level():
    rows = _grid(lambda c: ("fail", 3, -0.4) if c["optimizer"] == "sgd" else ("ok", None, 0.1), **GRID)
    stats = {(s["factor"], s["level"]): s for s in level_stats(rows)}
    assert set(stats) == {(f, v) for f, levels in GRID.items() for v in levels}  # steps is fixed: no factor
    assert stats["optimizer", "sgd"]["pass_rate_pct"] == 0.0 and stats["optimizer", "adam"]["pass_rate_pct"] == 100.0
    assert stats["mesh", "dp2"]["mean_signed_diff"] == pytest.approx(-0.15)
    assert stats["mesh", "dp2"]["worst_abs_diff"] == pytest.approx(0.4)


@pytest.mark.parametrize(
    "status, first, expected",
    [("fail", 0, "step0"), ("fail", 1, "first_update"), ("fail", 10, "from_step"), ("fail", 11, "from_step"),
     ("ok", None, None), ("error", None, None)],
)
def test_drift_class_rule(status, first, expected):
    assert drift_class(_row(0, status, first, 0.0)) == expected


def test_equal_printed_losses_are_equal_to_the_printed_precision_not_bit_for_bit():
    from sweep.report.findings import attribute

    rows = [_row(0, "ok", msd=0.0, optimizer="adam"), _row(1, "ok", msd=0.0, optimizer="sgd")]
    assert attribute(rows)["headline"].endswith("every job equals standalone bit for bit.")
    rows[1]["resolution"] = 1e-4  # losses read from {loss:.4f} text
    assert attribute(rows)["headline"].endswith("every job equals standalone to the printed precision (1e-04).")
    details = attribute(rows)["verdict"]
    assert "bit for bit" not in details and "to the printed precision (1e-04)" in details


def test_a_policy_dtype_against_a_float32_baseline_points_at_baseline_precision_policy():
    """bf16 parameters against the default float32 standalone copy part at step 0 by the
    precision alone: the verdict names the comparison meant, baseline.precision=policy
    (issue 38); with that baseline, or without a param dtype, it does not."""
    from types import SimpleNamespace

    from sweep.findings.shared import lower_precision as precision_pointer

    def record(param, precision="float32"):
        return SimpleNamespace(config={"mp_policy": {"param_dtype": param}, "baseline": {"precision": precision}})

    rows = [dict(_row(n, "fail", 0, -1e-3, optimizer=o), first_diff_step=0, result=record("bfloat16"))
            for n, o in enumerate(["adam", "sgd"])]
    att = attribute(rows)
    assert att["headline"] == ("2 jobs: 2 fail. Each parts at step 0 by its bfloat16 parameters against a float32 "
                               "standalone copy: compare with baseline.precision=policy.")
    assert "mp_policy.param_dtype=bfloat16 against a float32 standalone copy" in said(att, "V121")[0]
    assert "baseline.precision=policy runs the standalone copy under the same policy" in att["verdict"]
    assert precision_pointer(dict(rows[0], result=record("bfloat16", "policy"))) is None
    assert precision_pointer(dict(rows[0], result=record(None))) is None
    late = [dict(r, first_fail_step=3, first_diff_step=3) for r in rows]  # not step0: the precision is no answer
    assert "baseline.precision=policy" not in attribute(late)["headline"]


def test_half_precision_losses_are_exact_floats_not_printed_text():
    """A bf16 loss (4.15625) has a short repr, yet is no rounded text (issue 38: a false
    "printed precision" note on a built-in bf16 job)."""
    from sweep.analysis.compare import printed_resolution

    assert printed_resolution([4.15625, 4.1875, 4.140625, 4.09375, 4.0859375]) is None
    assert printed_resolution([0.9773, 0.9512, 0.9401, 0.9012, 0.8812]) == 1e-4


def test_replicas_that_disagree_reach_the_headline_and_the_details():
    """A job whose replicas disagree says so beyond its reason (issue 38)."""
    note = "replicas disagree from step 2 (ranks 0 and 2)"
    rows = [dict(_row(0, "ok", msd=0.0, engine="fsdp2"), first_diff_step=None, notes=None),
            dict(_row(1, "fail", 2, -1e-2, engine="planted"), first_diff_step=2, notes=note)]
    att = attribute(rows)
    assert codes(att)[:2] == ["V000", "V101"]
    assert f"Replicas disagree in job 1 (job 1: {note})" in said(att, "V150")[0]
    assert "Replicas" not in attribute([rows[0], dict(rows[1], notes=None)])["verdict"]


def test_the_headline_and_the_details_say_the_same_of_ties_and_interactions():
    """Issue 38: two levels of one factor that both fail are both named, in the headline and
    the details alike; two changes that fail only together are an interaction in both."""
    both = [_row(0, "ok", msd=0.0, opt="sgd", m="x"), _row(1, "fail", 1, -0.5, opt="adam", m="x"),
            _row(2, "fail", 1, -0.5, opt="adamw", m="x"), _row(3, "ok", msd=0.0, opt="sgd", m="y"),
            _row(4, "fail", 1, -0.5, opt="adam", m="y"), _row(5, "fail", 1, -0.5, opt="adamw", m="y")]
    att = attribute(both)
    assert "Culprits, weighed alike: opt=adam and opt=adamw" in att["headline"]
    assert [f.split(":")[0] for f in said(att, "V120")] == ["opt=adam", "opt=adamw"]  # each one's evidence
    only = [_row(0, "ok", msd=0.0, a="0", b="0"), _row(1, "ok", msd=0.0, a="1", b="0"),
            _row(2, "ok", msd=0.0, a="0", b="1"), _row(3, "fail", 1, -0.5, a="1", b="1")]
    att = attribute(only)
    assert "Only together: a=1 and b=1 fail, an interaction, not one factor" in att["headline"]
    assert "Culprit" not in att["headline"]
    assert "an interaction, not one factor" in att["verdict"]


def test_the_verdict_states_the_fix_the_sweep_proves_and_never_a_level_that_only_hides_the_drift():
    """Issue 38: the fix is an override under which every failing job, nothing else changed,
    passes equal to standalone; an interaction has one per partner; a level that passes but
    still differs beyond rounding hides the drift and is no fix."""
    only = [_row(0, "ok", msd=0.0, a="0", b="0"), _row(1, "ok", msd=0.0, a="1", b="0"),
            _row(2, "ok", msd=0.0, a="0", b="1"), _row(3, "fail", 1, -0.5, a="1", b="1")]
    att = attribute(only)
    assert [f["override"] for f in att["fixes"]] == ["a=0", "b=0"]
    assert att["fixes"][0]["jobs"] == [[3, 2]]
    assert "Fix proven by this sweep: a=0 or b=0; every failing job passes with it" in att["verdict"]
    # b=0 passes job 3's partner only: with another failing job (a=1, b=0 fails too), only a=0 fixes all
    more = [only[0], _row(1, "fail", 1, -0.4, a="1", b="0"), only[2], only[3]]
    assert [f["override"] for f in attribute(more)["fixes"]] == ["a=0"]
    # the passing partner differs beyond rounding below tolerance (the drift hidden, not gone): no fix
    hidden = [dict(r, first_diff_step=1, first_real_step=1, onset="abrupt") if r["job"] == 0 else r
              for r in [_row(0, "ok", msd=-1e-6, opt="adam"), _row(1, "fail", 1, -0.5, opt="sgd")]]
    att = attribute(hidden)
    assert att["fixes"] == [] and "Fix proven" not in att["verdict"]
    assert attribute([_row(0, "ok", msd=0.0), _row(1, "ok", msd=0.0)])["fixes"] == []
    # the passing partner misses the same collective (its ledger says so): hidden, not fixed (a
    # tester's HSDP engine that never reduces over the replicate dim, passing on replicated data)
    from types import SimpleNamespace

    missing = {"notes": ["no all_reduce over dp_replicate in step 0"]}
    carried = [dict(r, result=SimpleNamespace(collectives=missing, optimizer=None))
               for r in (_row(0, "ok", msd=0.0, split="replicated"), _row(1, "fail", 1, -0.5, split="sharded"))]
    att = attribute(carried)
    assert att["fixes"] == [] and "Fix proven" not in att["verdict"]
    clean = [dict(carried[0], result=SimpleNamespace(collectives={"notes": []}, optimizer=None)), carried[1]]
    assert [f["override"] for f in attribute(clean)["fixes"]] == ["split=replicated"]


def test_no_job_fails_and_one_level_carries_the_only_drift_beyond_rounding():
    """Nothing fails, every job differs a little; the faulty engine's jobs beyond rounding
    (first_real_step set), the correct engine's by rounding only: the headline and the details
    name the level that carries the drift, and neither calls the sweep rounding only."""
    def row(job, engine, optimizer):
        faulty = engine == "faulty"
        return _measured(dict(_row(job, "ok", None, 4e-5 if faulty else 2e-7, engine=engine, optimizer=optimizer),
                              first_diff_step=0, first_real_step=1 if faulty else None,
                              onset="abrupt" if faulty else "noise", tolerance_ratio=0.4 if faulty else 0.002),
                         within=not faulty)
    rows = [row(j, e, o) for j, (e, o) in enumerate(product(["correct", "faulty"], ["adam", "sgd"]))]
    out = attribute(rows)
    assert "Only engine=faulty moves the losses beyond their rounding envelope: 2 jobs" in out["headline"]
    assert "the other 2 differ by rounding only" in out["headline"]
    assert codes(out)[1] == "V112" and "first_update" in said(out, "V121")[0]
    assert "rounding only (" not in out["headline"] and "No culprit: every judged job passes" not in out["verdict"]


def test_a_workload_level_that_passes_hides_the_drift_and_is_no_fix():
    """Replicated data passes where a clip-before-reduce engine fails on sharded data: the
    level changes what both copies train (data.split is a workload field, roles.WORKLOAD), so
    it hides the drift; the engine that passes is the fix."""
    from sweep.analysis.culprits import fixes
    from sweep.analysis.grid import workload_factor

    assert workload_factor("data.split") and workload_factor("optimizer") and workload_factor("steps")
    assert not workload_factor("engine.impl.torch") and not workload_factor("weights.transfer")
    assert not workload_factor("mp_policy") and not workload_factor("split")
    rows = [_row(0, "ok", msd=0.0, **{"data.split": "replicated"}),
            _row(1, "fail", 1, -0.5, **{"data.split": "sharded"})]
    assert fixes(rows) == [] and [f["override"] for f in fixes(rows, workload=True)] == ["data.split=replicated"]
    text = attribute(rows)["verdict"]
    assert "Fix proven" not in text
    assert "No fix proven: data.split=replicated passes in every failing job's place, but data.split sets what " \
           "both copies train (the workload), so it hides the drift, it does not fix it" in attribute(rows)["verdict"]
    engines = [_row(j, s, f, m, **{"data.split": d, "engine": e}) for j, (s, f, m, d, e) in enumerate([
        ("ok", None, 0.0, "replicated", "ddp"), ("ok", None, 0.0, "sharded", "ddp"),
        ("ok", None, 0.0, "replicated", "clip_first"), ("fail", 1, -0.5, "sharded", "clip_first")])]
    assert [f["override"] for f in fixes(engines)] == ["engine=ddp"]
    assert "Fix proven by this sweep: engine=ddp;" in attribute(engines)["verdict"]


def test_the_drift_beyond_rounding_is_narrowed_to_the_levels_that_hold_it():
    """Two faulty engines beside a correct one (a tester's loss scales), or one engine beyond
    rounding in 3 of its 4 jobs: the levels that hold every such job are named, with the share."""
    def row(job, engine, split, real):
        return _measured(dict(_row(job, "ok", None, 4e-5 if real else 2e-7, engine=engine, split=split),
                              first_diff_step=0, first_real_step=0 if real else None, onset="abrupt",
                              tolerance_ratio=0.1), within=not real)
    rows = [row(j, e, s, e != "ok") for j, (e, s) in enumerate(product(["ok", "scale", "tiny"], ["rep", "shard"]))]
    assert "Only engine=scale or tiny moves the losses beyond their rounding envelope: 4 jobs" in \
        attribute(rows)["headline"]
    rows = [row(j, e, s, e == "clip" and (s, o) != ("rep", "adam"))
            for j, (e, s, o) in enumerate(product(["ok", "clip"], ["rep", "shard"], ["adam", "sgd"]))]
    for r, (_, _, o) in zip(rows, product(["ok", "clip"], ["rep", "shard"], ["adam", "sgd"])):
        r["overrides"]["opt"] = o
    assert "Only engine=clip moves the losses beyond their rounding envelope: 3 of its 4 jobs" in \
        attribute(rows)["headline"]
    # one job beyond, at the levels of two factors that each hold two jobs (a new user's grid): a share of each
    rows = [row(j, e, p, e == "late" and p == "fp32") for j, (e, p) in enumerate(product(["ok", "late"],
                                                                                       ["fp32", "bf16"]))]
    assert "Only engine=late and split=fp32 move the losses beyond their rounding envelope: 1 of the 2 jobs each " \
           "of these levels holds" in attribute(rows)["headline"], attribute(rows)["headline"]
    # the same grid with every bf16 job refused (an engine without a precision policy): fp32 holds every judged
    # job, so it narrows nothing and is not named beside the engine (a new user's MindSpore sweep)
    rows = rows[0::2] + [dict(r, status="error", mean_signed_diff=None, max_abs_diff=None) for r in rows[1::2]]
    assert "Only engine=late moves the losses beyond their rounding envelope: 1 job," in \
        attribute(rows)["headline"], attribute(rows)["headline"]


def test_a_looser_tolerance_that_passes_hides_the_drift_and_is_no_fix():
    """A tester's loss scale failing only at compare.rtol=2e-6: rtol=1e-4 passes it (a verdict
    field), which hides the drift; the engine is the culprit, named before the tolerance."""
    from sweep.analysis.grid import hiding_kind

    assert hiding_kind("compare.rtol") == "verdict" and hiding_kind("data.split") == "workload"
    assert hiding_kind("engine.impl.torch") is None
    rows = [_row(0, "ok", msd=0.0, **{"compare.rtol": "1e-4", "engine": "ok"}),
            _row(1, "ok", msd=0.0, **{"compare.rtol": "2e-6", "engine": "ok"}),
            _row(2, "ok", msd=2e-5, **{"compare.rtol": "1e-4", "engine": "scale"}),
            _row(3, "fail", 0, 2e-5, **{"compare.rtol": "2e-6", "engine": "scale"})]
    out = attribute(rows)
    assert [f["override"] for f in out["fixes"]] == ["engine=ok"]
    assert out["culprits"][0]["factor"] == "engine"
    only = [r for r in rows if r["job"] != 1]  # no correct job at the tight tolerance: the tolerance alone
    assert "No fix proven: compare.rtol=1e-4 passes in every failing job's place, but compare.rtol sets how the " \
           "copies are judged (the tolerance), so it hides the drift" in attribute(only)["verdict"]


def test_the_precision_pointer_names_the_dtype_of_the_jobs_it_is_about():
    """A clean sweep of fp32 and bf16 jobs (a tester's): the worst job within its envelope is a
    float32 one, yet only the bf16 jobs compute in another dtype than the standalone copy:
    'the float rounding of jobs 2-3 (of the 4 ...) comes from a bfloat16 forward', never 'a float32
    forward against a float32'."""
    def row(job, dtype, rel):
        config = {"mp_policy": {"param_dtype": None if dtype == "float32" else "bf16"},
                  "baseline": {"precision": "float32"}}
        return _measured(dict(_row(job, "ok", None, rel, mp=dtype), first_diff_step=0, first_real_step=None,
                              max_rel_diff=rel), dtype=dtype, config=config)
    rows = [row(0, "float32", 9e-7), row(1, "float32", 1e-7), row(2, "bfloat16", 1e-3), row(3, "bfloat16", 2e-3)]
    text = attribute(rows)["verdict"]
    assert "The float rounding of jobs 2-3 (of the 4 that differ by rounding only) comes from a bfloat16 forward " \
           "against a float32 standalone copy" in text
    assert "a float32 forward against" not in text
