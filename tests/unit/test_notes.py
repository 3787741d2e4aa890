"""A job's notes as data (issue 50, item 1): each note a code and values (sweep.records.Note), its
kind in the catalog (sweep.findings.notes_catalog: code, template, what it rests on, what it does
not claim, an example), its sentence rendered only at the edge (sweep.report.notes), a record's
notes written and read back, an older record's plain strings rendering as themselves, and V154
counting them by code."""

import json

import pytest

from sweep.analysis.judging import ranked_notes
from sweep.findings.notes_catalog import BY_CODE, NOTE_KINDS, note_kind
from sweep.records import JobRecord, RankResult, code_of, note
from sweep.report.notes import as_data, kind_text, text_of


@pytest.mark.parametrize("k", NOTE_KINDS, ids=lambda k: k.code)
def test_every_note_kind_has_a_code_a_page_and_a_template_its_example_fills(k):
    assert k.code[0] == "N" and k.code[1:].isdigit() and len(k.code) == 4
    assert k.name and k.family and k.rests_on and k.not_claimed
    text = kind_text(k, k.example)
    assert text and "{" not in text


def test_note_codes_are_unique_and_never_a_findings():
    from sweep.findings import all_kinds

    assert len(BY_CODE) == len(NOTE_KINDS)
    assert not set(BY_CODE) & {k.code for k in all_kinds()}
    with pytest.raises(KeyError, match="no note has code 'N999'"):
        note_kind("N999")


def test_explain_prints_a_note_codes_page_and_the_reference_lists_them(capsys):
    from sweep.report.explain import main, reference

    assert main(["n101"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("N101 a collective in another dtype") and "rests on:" in out and "e.g.:" in out
    assert main(["N999"]) == 2 and "no note has code 'N999'" in capsys.readouterr().err
    assert main([]) == 0 and "N101  a collective in another dtype" in capsys.readouterr().out
    assert all(f"### {k.code} " in reference() for k in NOTE_KINDS)


def test_a_note_is_rendered_with_the_ranks_that_hold_it_and_a_string_as_itself():
    n = note("N104", op="reduce_scatter", dim="dp_shard", step=2)
    assert text_of(n) == "no reduce_scatter over dp_shard in step 2: the gradients are never reduced across the " \
                         "shard dim"
    assert text_of(n.on_ranks([0, 2])).endswith("shard dim (ranks 0, 2)")
    assert text_of(n.on_ranks([1])).endswith("shard dim (rank 1)")
    assert text_of("an older record's note") == "an older record's note"
    assert code_of(n) == "N104" and code_of("text") is None
    assert as_data(n)["text"] == text_of(n) and as_data(n)["code"] == "N104"
    assert {n, note("N104", op="reduce_scatter", dim="dp_shard", step=2)} == {n}  # equal notes are one


def test_ranked_notes_name_the_ranks_of_a_typed_note_and_of_a_string():
    a, b = note("N108", count=3, step=0, units=2), note("N109", step=0, expected=["dp_shard"], why="sharded")
    found = ranked_notes({0: [a, "plain"], 1: [a, b]}, world=2)
    assert found == [a, "plain (rank 0)", b.on_ranks([1])]
    assert text_of(found[2]).endswith("(sharded) (rank 1)")


def test_a_records_notes_are_written_with_their_text_and_codes_and_read_back(tmp_path):
    typed = note("N120", key="eps", ran=1e-5, copy="distributed", group=0, configured=1e-8)
    record = JobRecord(status="error", notes=["plain", typed], collectives={"notes": [typed.on_ranks([1])]},
                       optimizer={"notes": [typed]})
    record.write(tmp_path / "result.json", render=text_of)
    raw = json.loads((tmp_path / "result.json").read_text())
    assert raw["notes"] == ["plain", "optimizer eps ran 1e-05 in the distributed copy (param group 0), configured "
                                     "1e-08"]
    assert raw["note_data"][0] is None and raw["note_data"][1]["code"] == "N120"
    assert raw["collectives"]["notes"][0].endswith("configured 1e-08 (rank 1)")
    back = JobRecord.read(tmp_path / "result.json")
    assert back.notes == ["plain", typed] and back.collectives["notes"] == [typed.on_ranks([1])]
    assert "note_data" not in back.collectives and back.optimizer["notes"] == [typed]
    # without a renderer (a rank's result: the train wing cannot render) each note is its dict
    rank = RankResult(rank=0, world_size=2, framework="torch", optimizer={"notes": [typed]})
    rank.write(tmp_path / "rank_0.json")
    assert json.loads((tmp_path / "rank_0.json").read_text())["optimizer"]["notes"][0]["code"] == "N120"
    assert RankResult.read(tmp_path / "rank_0.json").optimizer["notes"] == [typed]


def test_an_older_records_string_notes_still_render(tmp_path):
    (tmp_path / "result.json").write_text(json.dumps({"status": "error", "notes": ["zero_grad had no effect: ..."],
                                                      "collectives": {"notes": ["reduce_scatter ran in bfloat16"]}}))
    back = JobRecord.read(tmp_path / "result.json")
    assert back.notes == ["zero_grad had no effect: ..."] and [text_of(n) for n in back.collectives["notes"]] == [
        "reduce_scatter ran in bfloat16"]


def test_v154_counts_notes_by_code_and_a_string_by_its_text():
    from sweep.findings import notes as v154
    from sweep.findings.base import Context

    rows = [{"job": j, "note_list": texts, "note_codes": codes} for j, texts, codes in [
        (0, ["reduce_scatter ran in bfloat16 over dp, expected float32 (policy)", "old: x"], ["N101", None]),
        (1, ["all_gather ran in float32 over dp, expected bfloat16 (policy)"], ["N101"]),
        (2, ["old: y"], None)]]
    found = {f.values["note"]: f for f in v154.check(Context(rows))}
    assert found["a collective in another dtype"].values["code"] == "N101"
    assert found["a collective in another dtype"].jobs == (0, 1) and found["old"].jobs == (0, 2)
    from sweep.report.findings import sentence

    assert sentence(found["a collective in another dtype"]) == "Note: a collective in another dtype (N101) (2 jobs)."
    assert sentence(found["old"]) == "Note: old (2 jobs)."
    # a job with two notes of a kind (each rank's own text) is one job (a 2-job sweep read "(4 jobs)")
    twice = [{"job": j, "note_list": ["b was carried by no gradient reduction in step 0: x", "b was carried by no "
              "gradient reduction in step 0 (the reductions carried 8 of the 9 gradient elements): x"],
              "note_codes": ["N141", "N141"]} for j in (0, 1)]
    assert sentence(v154.check(Context(twice))[0]) == "Note: gradients no reduction carried (N141) (2 jobs)."
    # an engine's note is counted by what it did (a new user read "Note: workaround (2 jobs)." and asked which)
    engine = [{"job": 0, "note_list": ["workaround: a counter kept -- without it backward fails"], "note_codes": None}]
    assert sentence(v154.check(Context(engine))[0]) == "Note: workaround: a counter kept (1 job)."


def test_a_non_finite_value_read_back_from_a_file_still_renders(tmp_path):
    """A gradient norm ratio of inf (a standalone norm of 0) is written as "inf" (sweep.io)."""
    typed = note("N144", step=0, stage="reduced", equal=None, distributed=1.0, standalone=0.0, ratio=float("inf"),
                 parameter="w", max_norm=None, loss_step=None, loss_word="differ")
    JobRecord(status="error", notes=[typed]).write(tmp_path / "result.json", render=text_of)
    back = JobRecord.read(tmp_path / "result.json").notes[0]
    assert back.values["ratio"] == "inf" and "(xinf; most in w)" in text_of(back) == text_of(typed)


def test_a_norm_that_departs_after_the_reduction_with_nothing_compared_before_it_blames_no_reduction():
    """hyper-parallel with sharded data (a new user's forward fault on rank 1): the gradients before the
    reduction are each rank's own rows', never compared, so the departure may arise anywhere up to it."""
    found = text_of(note("N144", step=0, stage="reduced", equal=None, distributed=2.0, standalone=1.0, ratio=2.0,
                         parameter="w", max_norm=None, loss_step=1, loss_word="fail"))
    assert "so the difference arises in the forward, the backward or the reduction" in found
    compared = text_of(note("N144", step=0, stage="reduced", equal="before it", distributed=2.0, standalone=1.0,
                            ratio=2.0, parameter="w", max_norm=None, loss_step=1, loss_word="fail"))
    assert "(equal before it)" in compared and "so the difference arises in the reduction," in compared
    other = text_of(note("N144", step=0, stage="reduced", equal=None, distributed=2.0, standalone=1.0, ratio=2.0,
                         parameter="w", max_norm=None, loss_step=1, loss_word="fail", ran_other=True))
    assert "so the difference arises in the reduction (it ran another op than the mean, above)" in other
