"""The verdict's findings (sweep.findings): every kind has a code, a page and a template its
example fills; each rule fires on a sweep made for it and on no other; the ranking and the
headline; the same findings in every output (issue 50)."""

from types import SimpleNamespace

import pytest

from sweep.analysis.compare import RANDOM_DRAWS_NOTE
from sweep.findings import JOB_KINDS, KINDS, all_kinds, find, kind, lead
from sweep.records import JobRecord
from sweep.report.findings import attribute, headline, lines, sentence
from sweep.report.template import render


# --- every kind has its page --------------------------------------------------------------------

@pytest.mark.parametrize("k", all_kinds(), ids=lambda k: k.code)
def test_every_kind_has_a_code_a_page_and_a_template_its_example_fills(k):
    assert k.code[0] in "VJ" and k.code[1:].isdigit() and len(k.code) == 4
    assert k.name and k.rests_on and k.not_claimed and k.tier
    text = render(k.template, k.example)
    assert text and "{" not in render(k.template, {key: "" for key in k.example})
    if k.headline:
        assert render(k.headline, k.example)


def test_codes_are_unique_and_each_kind_lives_in_a_module_of_its_own():
    kinds = all_kinds()
    assert len({k.code for k in kinds}) == len(kinds)
    modules = [k.check.__module__ for k in KINDS + JOB_KINDS if k.check.__module__ != "sweep.findings.job_place"
               and k.check.__module__ != "sweep.findings.job_notes"]
    assert len(modules) == len(set(modules))  # one rule, one home (job_* hold a job's pairs of kinds)


def test_explain_prints_a_codes_page_and_refuses_an_unknown_one(capsys):
    from sweep.report.explain import main, reference

    assert main(["v101"]) == 0 and "rests on:" in capsys.readouterr().out
    assert main(["X999"]) == 2 and "no finding has code 'X999'" in capsys.readouterr().err
    err = (main(["V1O1"]), capsys.readouterr().err)[1]  # any code: both lists (a V typo named only V/J codes)
    assert "no note has code 'V1O1'" in err and "N101" in err and "V101" in err
    assert main([]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in listed) <= 99
    # every name in its column: a long one does not run into the example after it (N103's)
    from sweep.findings.notes_catalog import NOTE_KINDS

    column = 6 + max(len(k.name) for k in [*all_kinds(), *NOTE_KINDS]) + 2
    assert all(line[column - 2:column] == "  " and line[column] != " " for line in listed)
    assert main(["--help"]) == 0 and capsys.readouterr().out.startswith("usage: python -m sweep explain")
    assert all(f"### {k.code} " in reference() for k in all_kinds())


def test_the_template_language():
    assert render("a[ b {x}] c", {"x": None}) == "a c"
    assert render("{n} job{n|s}, pass{n|?es:}", {"n": 1}) == "1 job, passes"
    assert render("{n} job{n|s}, pass{n|?es:}", {"n": 2}) == "2 jobs, pass"
    assert render("{xs|and}; {xs|/}; {xs|or}; {xs}", {"xs": ["a", "b"]}) == "a and b; a/b; a or b; a, b"
    assert render("[{f|if}yes][{g|if}no]", {"f": True, "g": False}) == "yes"
    assert render("{v:.2g} \\[x\\]", {"v": 0.1234}) == "0.12 [x]"
    assert render("Not judged: {reason}.", {"reason": "another FSDP group."}) == "Not judged: another FSDP group."
    assert render("{x}.", {"x": "wait..."}) == "wait..."
    with pytest.raises(KeyError):
        render("{missing}", {})
    with pytest.raises(ValueError):
        render("[unbalanced", {})


# --- each rule on a sweep made for it -----------------------------------------------------------

def _row(job, status, msd=0.0, first=None, notes=None, result=None, **overrides):
    judged = status in ("ok", "fail")
    return {"job": job, "overrides": overrides, "status": status, "reason": None, "first_fail_step": first,
            "first_diff_step": first if first is not None else (0 if judged and msd else None),
            "mean_signed_diff": msd if judged else None, "max_abs_diff": abs(msd) if judged else None,
            "runs_low_pct": (100.0 if msd < 0 else 0.0) if judged and msd else None, "notes": notes,
            "result": result}


def _measured(row, within=True, dtype="float32", config=None, status=None):
    loss = {"within": within, "first_beyond_step": None if within else 1, "ratio": 1.1 if within else 40.0,
            "band": 0.03, "sign": None if within else "low"}
    return dict(row, first_real_step=None if within else 1, tolerance_ratio=0.2,
                result=JobRecord(status=status or row["status"], config=config, comparison={"rtol": 1e-4, "atol": 1e-4},
                                 envelope={"measured": True, "dtype": dtype, "margin": 4.0, "loss": loss,
                                           "other_failures": []}))


def _codes(rows, answers=()):
    return [f.code for f in find(rows, answers)]


def _sgd_fails():
    return [_row(0, "ok", a="0", opt="adam"), _row(1, "fail", -0.5, 1, a="0", opt="sgd"),
            _row(2, "ok", a="1", opt="adam"), _row(3, "fail", -0.5, 1, a="1", opt="sgd")]


def test_a_culprit_with_its_evidence_place_fix_and_the_others():
    codes = _codes(_sgd_fails())
    assert codes[:2] == ["V000", "V101"] and {"V120", "V121", "V130"} <= set(codes)
    found = find(_sgd_fails())
    culprit = next(f for f in found if f.code == "V101")
    assert culprit.levels == ("opt=sgd",) and culprit.jobs == (1, 3) and culprit.values["to_fail"] == 2
    assert lead(found) is culprit


def test_exposed_by_and_an_exposer_never_a_culprit():
    rows = [_row(0, "ok", opt="adam", m="dp4"), _row(1, "ok", opt="sgd", m="dp4"),
            _measured(_row(2, "ok", -1e-5, 1, opt="adam", m="hsdp"), within=False),
            _row(3, "fail", -0.3, 1, opt="sgd", m="hsdp")]  # job 2 beyond its measured envelope: the drift hidden
    rows[2]["first_fail_step"] = None
    codes = _codes(rows)
    assert "V101" in codes and "V123" in codes  # the mesh causes it, sgd exposes it
    exposer = next(f for f in find(rows) if f.code == "V123")
    assert exposer.levels == ("opt=sgd",)
    culprits = [f.levels for f in find(rows) if f.code in ("V101", "V104")]
    assert ("opt=sgd",) not in culprits  # never listed as a culprit where its own finding says it does not cause it
    assert "V157" not in codes  # job 2's hidden drift is V123's, not a second fault
    only_sgd = [_measured(_row(0, "ok", -1e-5, 1, opt="adam"), within=False), _row(1, "fail", -0.3, 1, opt="sgd")]
    only_sgd[0]["first_fail_step"] = None
    assert _codes(only_sgd)[1] == "V102"


def test_only_together_is_one_finding_not_two_culprits():
    rows = [_row(0, "ok", a="0", b="0"), _row(1, "ok", a="1", b="0"), _row(2, "ok", a="0", b="1"),
            _row(3, "fail", -0.5, 1, a="1", b="1")]
    codes = _codes(rows)
    assert codes[1] == "V103" and "V101" not in codes and "V104" not in codes


def test_a_rounding_only_job_that_fails_says_what_on_unless_it_is_the_tolerance():
    from sweep.findings.shared import place

    # replicas that disagree, the losses within tolerance and rounding: what it fails on is said
    replicas = _measured(dict(_row(0, "fail", 1e-7, None), first_diff_step=0), within=True)
    replicas["reason"] = "replicas disagree from step 0: rank 0 and rank 2 hold the same w but different values"
    assert place([replicas])["fails_on"] == "replicas disagree from step 0"
    # a tolerance finer than the precision holds: the losses show it, nothing to add (a correct bf16 job)
    tolerance = _measured(dict(_row(1, "fail", 1e-5, 0), first_diff_step=0), within=True)
    tolerance["reason"] = "286/300 steps outside rtol=0.0001, atol=0.0001; first at step 0"
    assert place([tolerance])["cls"] == "rounding" and place([tolerance])["fails_on"] is None


def test_levels_weighed_alike_and_random_draws():
    both = [_row(0, "ok", opt="sgd", m="x"), _row(1, "fail", -0.5, 1, opt="adam", m="x"),
            _row(2, "fail", -0.5, 1, opt="adamw", m="x"), _row(3, "ok", opt="sgd", m="y"),
            _row(4, "fail", -0.5, 1, opt="adam", m="y"), _row(5, "fail", -0.5, 1, opt="adamw", m="y")]
    assert _codes(both)[1] == "V104"
    # where each culprit weighed alike parts, not one step merged over both (a new user's two faults, steps 1 and 8)
    for row in both:
        if row["overrides"]["opt"] == "adamw":
            row["first_fail_step"] = row["first_diff_step"] = 5
    where = next(f for f in find(both) if f.code == "V121")
    assert render(kind("V121").headline, where.values).startswith(
        "They part from standalone: opt=adam from step 1 (first_update) and opt=adamw from step 5 (from_step)."), \
        where.values
    assert "; of the other culprits weighed alike, opt=adamw parts at step 5 in job 2 (from_step)." in \
        render(kind("V121").template, where.values)
    drawn = [_row(0, "ok", split="replicated"), _row(1, "fail", 0.1, 0, RANDOM_DRAWS_NOTE, split="sharded")]
    assert _codes(drawn)[1] == "V105" and "V153" in _codes(drawn)


def test_jobs_whose_copies_draw_apart_weigh_in_no_contrast():
    """A new user's grid: a fault (eng=bad) x data.split; with sharded data the dropout masks of
    the copies differ, so both sharded jobs fail by far more than the fault. V153 says no culprit
    follows from that: it is no "also" (V140), no "only with" subject (V122), nor a scale of the
    drift (V141)."""
    rows = [_row(0, "ok", eng="good", split="replicated"), _row(1, "fail", -5e-4, 1, eng="bad", split="replicated"),
            _row(2, "fail", 0.06, 0, RANDOM_DRAWS_NOTE, eng="good", split="sharded"),
            _row(3, "fail", 0.06, 0, RANDOM_DRAWS_NOTE, eng="bad", split="sharded")]
    found = find(rows)
    codes = [f.code for f in found]
    assert next(f for f in found if f.code == "V101").levels == ("eng=bad",) and "V153" in codes
    assert "V140" not in codes and "V141" not in codes, codes
    assert all(f.values["name"] != "split=sharded" for f in found if f.code == "V122")


def test_jobs_below_tolerance_yet_beyond_their_envelope_are_said_to_be_more_than_rounding():
    """A new user's model all-reduced inside its forward (a hand-written SyncBatchNorm): every job
    passes the tolerance at 0.2x it while its losses leave their envelope 645x; the headline said
    only "differ below tolerance"."""
    rows = [_measured(_row(j, "ok", -3.8e-5, 1, order=o), within=False)
            for j, o in enumerate(("standalone_first", "separate"))]
    below = next(f for f in find(rows) if f.code == "V113")
    assert sentence(below).endswith("; 2 of them beyond their rounding envelope (the losses up to 40x it): more "
                                    "than float rounding."), sentence(below)


def test_a_job_whose_loss_turns_non_finite_in_one_copy_says_so_not_a_zero_difference():
    """A new user's NaN from step 4 in the distributed copy: the table said max |diff| 0 (the
    finite steps') and V120 "mean signed diff +0"."""
    from sweep.analysis.compare import nonfinite_in_one
    from sweep.report.summary import table_rows

    nan = float("nan")
    assert nonfinite_in_one([1.0, 0.9, 0.8], [1.0, nan, nan]) == {"copy": "distributed", "step": 1}
    assert nonfinite_in_one([1.0, nan], [1.0, nan]) is None and nonfinite_in_one([1.0], [1.0]) is None
    assert nonfinite_in_one([1.0, 0.9, float("inf")], [1.0, 0.9, 0.8]) == {"copy": "standalone", "step": 2}
    rows = [_row(0, "ok", eng="good"), dict(_row(1, "fail", 0.0, 4, eng="bad"), max_abs_diff=0.0,
                                            nonfinite_in={"copy": "distributed", "step": 4})]
    evidence = next(f for f in find(rows) if f.code == "V120")
    assert "; the distributed loss non-finite from step 4, the other copy's finite." in sentence(evidence)
    assert "mean signed diff" not in sentence(evidence)
    header, body = table_rows(rows, ("status", "max_abs_diff"))
    assert body[1][-1] == "nan (distributed)" and body[0][-1] == 0.0


def test_a_level_whose_jobs_leave_their_envelope_by_their_updates_alone_moves_the_copies_not_the_losses():
    """A new user's 1e-5 gradient scale under SGD: the update differences leave their envelope, the
    losses stay within theirs; V112 said "moves the losses beyond their rounding envelope"."""
    beyond = dict(_measured(_row(1, "ok", -1e-7, 2, eng="bad"), within=True), first_real_step=1)
    rows = [_row(0, "ok", eng="good"), beyond]
    found = next(f for f in find(rows) if f.code == "V112")
    assert "Only eng=bad moves the copies beyond their rounding envelope (their updates or traced tensors, if not " \
           "their losses): 1 job" in sentence(found), sentence(found)
    rows[1] = dict(_measured(_row(1, "ok", -1e-7, 1, eng="bad"), within=False))
    assert "Only eng=bad moves the losses beyond their rounding envelope: 1 job" in \
        sentence(next(f for f in find(rows) if f.code == "V112"))


def _hidden_by_bf16(ratio):
    """A new user's grid: a fault (engine=bad) x mp_policy fp32/bf16; the fp32 fault job parts by
    ``ratio`` x the tolerance, both bf16 jobs fail the tolerance only, within a band of 0.03."""
    ok = _row(0, "ok", eng="good", mp="fp32")
    fault = dict(_measured(_row(1, "fail", -1e-4, 1, eng="bad", mp="fp32"), within=False), tolerance_ratio=ratio)
    low = [_measured(_row(j, "fail", -2e-3, 0, eng=e, mp="bf16"), dtype="bfloat16")
           for j, e in ((2, "good"), (3, "bad"))]
    return [ok, fault, *low]


def test_a_coarser_precision_hides_a_fault_it_does_not_fix_it_nor_make_it_an_interaction():
    """The bf16 jobs cannot show a fault that moves the fp32 job by 2e-5 (their band: 3e-2): the
    fault is the culprit in the pairs that can show it, and bf16 no fix (it was "only together"
    with fp32, and "fix proven: mp_policy=bf16")."""
    found = {f.code: f for f in find(_hidden_by_bf16(0.2))}
    assert "V101" in found and "V103" not in found and "V122" not in found, list(found)
    culprit = found["V101"].values
    assert culprit["name"] == "eng=bad" and (culprit["to_fail"], culprit["partners"]) == (1, 1)
    assert culprit["masked"] == [3]
    assert "job 3 cannot show it: its rounding envelope is wider" in sentence(found["V101"])
    assert found["V130"].values["overrides"] == ["eng=good"]
    # a fault the bf16 jobs could show (it moves the fp32 job by 1.0, beyond their band): as before
    shown = {f.code for f in find(_hidden_by_bf16(1e4))}
    assert "V103" in shown and "V101" not in shown


def test_what_decides_without_a_culprit():
    note = "replicas disagree from step 2 (ranks 0 and 2)"
    replicas = [_row(0, "fail", -0.5, 2, note, a="0"), _row(1, "fail", -0.5, 2, note, a="1")]
    assert _codes(replicas)[1] == "V106"
    record = SimpleNamespace(config={"mp_policy": {"param_dtype": "bf16"}, "baseline": {"precision": "float32"}},
                             notes=[], envelope={})
    precision = [dict(_row(j, "fail", -1e-3, 0, a=v), first_real_step=0, result=record) for j, v in enumerate("01")]
    assert _codes(precision)[1] == "V107"
    everywhere = [_row(j, "fail", -0.5, 1, a=v) for j, v in enumerate("01")]
    assert _codes(everywhere)[1] == "V108"
    confounded = [_row(0, "ok", a="0", b="0"), _row(1, "fail", -0.5, 1, a="1", b="1")]
    assert _codes(confounded)[1] == "V125"
    alone = [_row(0, "fail", -0.5, 1, a="0")]
    assert _codes(alone)[1] == "V126"
    assert _codes([_row(0, "error", a="0")])[1] == "V100" and _codes([])[1] == "V100"


def test_the_quiet_cases():
    assert _codes([_row(0, "ok", a="0"), _row(1, "ok", a="1")])[1] == "V114"
    printed = [dict(_row(0, "ok", a="0"), resolution=1e-4), _row(1, "ok", a="1")]
    assert _codes(printed)[1] == "V115"
    level = [_measured(_row(0, "ok", 1e-6, 0, m="bf16"), dtype="bfloat16"), _row(1, "ok", m="fp32")]
    assert _codes(level)[1] == "V111"
    rounding = [_measured(_row(j, "ok", 1e-6, 0, a=v)) for j, v in enumerate("01")]
    assert _codes(rounding)[1] == "V110"
    beyond = [_measured(_row(0, "ok", 1e-5, 0, e="bad", s="x"), within=False), _measured(_row(1, "ok", 1e-7, 0, e="ok",
                                                                                              s="x"))]
    assert _codes(beyond)[1] == "V112"
    below = [_row(j, "ok", 1e-5, 0, a=v) for j, v in enumerate("01")]
    assert _codes(below)[1] == "V113" and "V160" not in _codes(below)  # (no record: nothing unmeasured said)


def test_a_tolerance_finer_than_the_precision_is_no_fault():
    rows = [_measured(_row(j, "fail", 0.03, 0, o=v), dtype="bfloat16") for j, v in enumerate(["adam", "sgd"])]
    found = find(rows)
    assert [f.code for f in found][:3] == ["V000", "V109", "V110"]
    text = headline(found)
    assert text.startswith("2 jobs: 2 fail. No fault: the 2 failing jobs stay within their rounding envelope "
                           "(bfloat16)") and "rtol = atol = 3e-02 would hold" in text
    assert not any(f.code in ("V101", "V102", "V103", "V104") for f in found)
    # one failing job already compares under the policy: the advice names the one it is for (a new user's grid)
    mixed = [_measured(_row(j, "fail", 0.03, 0, b=v), dtype="bfloat16",
                       config={"mp_policy": {"param_dtype": "bf16"}, "baseline": {"precision": v}})
             for j, v in enumerate(["policy", "float32"])]
    advice = next(f for f in find(mixed) if f.code == "V109")
    assert "against a float32 standalone copy (job 1): baseline.precision=policy" in sentence(advice), sentence(advice)


def test_a_passing_job_beyond_its_envelope_beside_a_failing_job_within_it_is_no_no_fault():
    # a new user's: bf16 jobs fail their tolerance by rounding, while an fp32 job passes 1e3x beyond its envelope
    # (an engine rounding a module's output to bf16): the headline read "No fault" from the bf16 jobs
    rows = [_measured(_row(0, "ok", 1e-5, 0, m="fp32"), within=False),
            _measured(_row(1, "fail", 0.03, 0, m="bf16"), dtype="bfloat16")]
    found = find(rows)
    assert [f.code for f in found][:3] == ["V000", "V112", "V109"], [f.code for f in found]
    text = headline(found)
    assert "No fault" not in text and "Only m=fp32 moves the losses beyond their rounding envelope" in text, text
    assert "The 1 failing job stays within its rounding envelope" in " ".join(f["sentence"] for f in
                                                                             attribute(rows)["findings"])


def test_no_quiet_case_says_no_job_fails_beside_a_job_that_fails_its_tolerance():
    # a new user read "2 jobs: 1 ok, 1 fail" next to "No job fails. 2 of 2 differ by float rounding only"
    from sweep.report.template import render

    rows = [_measured(_row(0, "fail", 0.03, 0, o="adam"), dtype="bfloat16"),
            _measured(_row(1, "ok", 1e-6, 0, o="sgd"), dtype="bfloat16")]
    quiet = next(f for f in find(rows) if f.code == "V110")
    text = render(kind("V110").template, quiet.values)
    assert text.startswith("No job fails for a cause: 1 fails the tolerance only, within its rounding envelope. "), text
    assert "No job fails." not in text
    errored = [_row(0, "ok", a="0"), _row(1, "error", a="1")]
    equal = next(f for f in find(errored) if f.code == "V114")
    assert render(kind("V114").template, equal.values) == ("No job that ran fails: every judged job equals standalone "
                                                           "bit for bit (1 not judged: an error, a time-out or no result yet).")


def test_contrasts_only_between_jobs_beyond_their_envelope():
    rows = []
    for job, (mesh, order) in enumerate([("dp2", "a"), ("dp4", "a"), ("dp2", "b"), ("dp4", "b")]):
        size = 1e-3 * (2.8 if mesh == "dp4" else 1.0)
        rows.append(_row(job, "fail", size * (-1 if order == "a" else 1), 1, mesh=mesh, order=order))
    codes = _codes(rows)
    assert "V141" in codes and "V142" in codes
    within = [_measured(r, within=True) for r in rows]
    assert "V141" not in _codes(within) and "V142" not in _codes(within)


def test_context_and_limits():
    nondeterministic = [dict(_row(0, "fail", -0.5, 1, a="0"), nondeterministic=True,
                             repeat_spread={"repeats": 3, "distributed_max_abs": 2e-3, "statuses": ["fail"] * 3}),
                        dict(_row(1, "ok", a="1"), nondeterministic=False)]
    assert "V151" in _codes(nondeterministic)
    agree = [dict(_row(0, "ok", a="0"), nondeterministic=False), _row(1, "ok", a="1")]
    assert "V152" in _codes(agree)
    notes = [dict(_row(0, "ok", notes="policy not applied (configured bf16)", a="0"), policy_applied=False),
             _row(1, "ok", a="1")]
    assert "V154" in _codes(notes) and "V155" in _codes(notes)
    # a collective or a module in another dtype than the policy gives (a new user's engine all-reducing the
    # replicate dim in bf16 under fp32; a unit given param_dtype=bf16 by hand) is no rounding either
    from sweep.analysis.evidence import rounding_only
    from sweep.records import Note

    for code in ("N101", "N160", "N162", "N163"):
        departed = _measured(_row(0, "fail", 0.03, 0, a="0"), dtype="bfloat16")
        departed["result"].notes.append(Note(code, {}))
        assert not rounding_only(departed) and "V155" in _codes([departed, _row(1, "ok", a="1")]), code
    assert rounding_only(_measured(_row(0, "fail", 0.03, 0, a="0"), dtype="bfloat16"))
    unmeasured = [dict(_row(0, "ok", 1e-5, 0, a="0"),
                       result=JobRecord(status="ok", envelope={"measured": False, "why": "runner=command"})),
                  _row(1, "ok", a="1")]
    assert "V160" in _codes(unmeasured)
    assert "V161" in _codes([_row(0, "ok", a="0"), _row(1, "timeout", a="1")])
    lowered = [_measured(_row(0, "ok", 1e-6, 0, m="bf16"), dtype="bfloat16",
                         config={"mp_policy": {"param_dtype": "bf16"}, "baseline": {"precision": "float32"}}),
               _row(1, "ok", m="fp32")]
    assert "V156" in _codes(lowered)


def test_another_tools_answer_leads_and_the_counts_come_first():
    from sweep.findings import answers

    isolation = answers.isolation({"status": "isolated", "minimal": ["opt=sgd"], "answer": "opt=sgd",
                                   "proof": {"passing": [0], "failing": [1]}, "n_jobs": 2, "grid_jobs": 4})
    found = find(_sgd_fails(), isolation)
    assert [f.code for f in found][:3] == ["V001", "V000", "V101"]
    assert lead(found).code == "V001" and headline(found).startswith("4 jobs: 2 ok, 2 fail. Isolation: the minimal")
    assert answers.against({"counts": {"fixed": 1}}, "old")[0].values["changes"][0] == "fixed: 1"
    assert answers.bisection({"first_bad": {"sha": "a" * 40, "subject": "x"}, "parent": {}})[0].code == "V003"


def test_every_output_renders_the_same_findings():
    att = attribute(_sgd_fails())
    assert [f["code"] for f in att["findings"]] == _codes(_sgd_fails())
    assert all(f["sentence"] in att["verdict"] for f in att["findings"])
    terminal = lines(find(_sgd_fails()))
    assert terminal[0].startswith("V101 culprit: Culprit: opt=sgd") and len(terminal) == len(att["findings"]) - 1


def test_a_job_has_findings_of_its_own():
    from sweep.findings import find_job

    record = JobRecord(status="fail", comparison={"rtol": 1e-4, "atol": 1e-4}, notes=["a note"],
                       envelope={"measured": True, "dtype": "float32", "source": "twin", "margin": 4.0,
                                 "loss": {"within": False, "first_beyond_step": 0, "beyond_steps": 3, "ratio": 9.0,
                                          "sign": "low"}})
    row = dict(_row(0, "fail", -0.1, 0), first_real_step=0, first_tensor="w grad at step 0", result=record)
    found = find_job(row)
    assert [f.code for f in found] == ["J101", "J102", "J104", "J106"]
    assert sentence(found[1]).endswith("the losses leave 4x it from step 0 (3 steps, up to 9x it, running low)")
    assert kind("J101").tier == "decides"
    # a periodic job says its period, as the sweep's V121 does (a new user's "every 4th gradient x1.5")
    periodic = dict(row, first_real_step=4, first_diff_step=4, onset="periodic", period=4)
    assert sentence(find_job(periodic)[0]).startswith("the copies part at step 4: periodic, every 4 steps (an event")


def test_a_job_that_fails_with_equal_losses_says_why_in_its_first_tensor():
    """A job whose losses never part fails on a buffer that ended apart: its one line of why is
    the first tensor (J104), though no drift class applies; a passing job's place is not shown."""
    from sweep.findings import find_job

    place = {"step": 5, "kind": "buffer", "name": "bn.running_mean", "abs_diff": 0.01, "rel_diff": 1.0,
             "after_last_step": True, "frozen": True}
    record = JobRecord(status="fail", comparison={"rtol": 1e-4, "atol": 1e-4}, first_tensor=place)
    row = dict(_row(0, "fail", 0.0), first_tensor="buffer bn.running_mean after the last step (5)", result=record)
    assert [f.code for f in find_job(row)] == ["J104"]
    assert find_job(dict(row, status="ok")) == []
    noted = JobRecord(status="fail", comparison={"rtol": 1e-4, "atol": 1e-4}, first_tensor={"note": "not traced"})
    assert find_job(dict(row, first_tensor="not traced", result=noted)) == []


def test_levels_beyond_the_envelope_beside_jobs_equal_to_standalone_are_named():
    """Where no job differs by rounding only but some equal standalone bit for bit, the levels
    that hold every job beyond its measured envelope are still named (V112), not "below
    tolerance"; without a measured envelope they are not (V113)."""
    beyond = [_measured(_row(0, "ok", 1e-6, 1, e="nudge"), within=False),
              _measured(_row(1, "ok", 1e-6, 50, e="late"), within=False), _measured(_row(2, "ok", e="correct"))]
    codes = _codes(beyond)
    assert codes[1] == "V112", codes
    text = headline(find(beyond))
    assert "Only e=nudge or late moves the losses beyond their rounding envelope: 2 jobs" in text, text
    assert text.endswith("; 1 job equal to standalone bit for bit."), text
    unmeasured = [_row(0, "ok", 1e-6, 1, e="nudge"), _row(1, "ok", 1e-6, 50, e="late"), _row(2, "ok", e="correct")]
    assert _codes(unmeasured)[1] != "V112"


def test_a_mean_of_the_other_sign_than_the_drift_says_where_it_comes_from():
    """A one-step forward fault (a new user's): the steps beyond the envelope run low, one large step runs high,
    so the mean is positive. The sentence says both, and why they differ."""
    rows = [_measured(_row(0, "ok", a="0")),
            dict(_measured(_row(1, "fail", 1.2e-4, 1, a="1"), within=False), runs_low_pct=87.0)]
    (found,) = [f for f in find(rows) if f.code == "V120"]
    assert "distributed runs low (mean signed diff +0.00012, from a few large steps the other way; below " \
           "standalone on 87% of steps)" in sentence(found)


def test_a_passing_job_beyond_its_envelope_beside_a_culprit_is_named():
    """Two faults in one sweep (a new user's): one fails (the culprit), the other stays within the
    tolerance but leaves its rounding envelope. The quiet cases' V112 does not apply beside a
    failing job, so it went unsaid; V157 names it. A passing job within its envelope: not named."""
    rows = [_row(0, "ok", e="correct"), _measured(_row(1, "fail", -0.5, 1, e="sum"), within=False),
            _measured(_row(2, "ok", 8e-7, 0, e="rank1"), within=False)]  # (fp32: the correct engine bit-equal)
    found = find(rows)
    assert [f.code for f in found][1] == "V101"
    extra = next(f for f in found if f.code == "V157")
    assert extra.jobs == (2,) and extra.levels == ("e=rank1",)
    assert sentence(extra).startswith("Passing, yet beyond their rounding envelope: 1 job (e=rank1) (job 2), up to 8.0e-07")
    assert "V157" not in _codes([rows[0], rows[1]])  # the other passing job equals standalone
    assert "V157" not in _codes([rows[0], rows[2]])  # nothing fails: V112 says it
