"""The place where a job's copies part, in words (sweep.findings.places), from the analysis's
data as result.json keeps it: non-finite sizes read back as strings, the notes that quote a
place, and an isolation's status worded at the edge (sweep.report.isolate_report)."""

import numpy as np

from sweep.analysis.isolate import ddmin
from sweep.analysis.trace import Search, locate
from sweep.findings.places import located_text, module_text, tensor_text
from sweep.io import read_json, write_json
from sweep.records import Note
from sweep.report.isolate_report import reason_text
from sweep.report.notes import text_of


def test_a_place_read_back_from_result_json_words_as_it_did_in_memory(tmp_path):
    """write_json stores a non-finite float as a string ("inf"): the sentence reads it as the float."""
    ones = np.ones(3, np.float32)
    ours = [{"initial": {"w": np.zeros(3, np.float32)}, "grad": {"w": ones}, "weight": {"w": ones}}]
    theirs = [{"initial": {"w": ones}, "grad": {"w": ones}, "weight": {"w": ones}}]
    found = locate(ours, theirs, 0, Search())
    assert found["kind"] == "initial" and found["rel_diff"] == float("inf")
    write_json(tmp_path / "place.json", found)
    again = read_json(tmp_path / "place.json")
    assert again["rel_diff"] == "inf"
    assert tensor_text(again) == tensor_text(found) == "w initial weights (before any step), abs 1, rel inf"
    assert located_text(dict(again, rank=0, ranks=[0, 1]), 2).endswith(" (every rank)")


def test_a_modules_place_says_what_it_computes_on_and_which_ranks_name_it():
    first = {"step": 2, "phase": "forward", "module": "layer0", "call": 1, "rel_in": 0.0, "rel_out": 0.25,
             "bound": 0.01, "margin": 4.0, "ranks": [0, 1], "every": True,
             "computes_on": {"kind": "weight", "step": 1, "name": "layer0.weight"}}
    assert module_text(first) == ("layer0 (call 2) forward output at step 2, inputs agree, rel 0.25 (100x its "
                                  "rounding envelope) (every rank); the weights already differ after step 1's update "
                                  "(first differing tensor): the module computes on them")
    assert module_text({"traced_steps": 3, "envelope_measured": False}) == (
        "every module's forward output and output gradient agree exactly in the traced steps 0-2")
    assert module_text({"note": "not traced: compare.trace_after=0"}) is None


def test_a_note_that_quotes_a_place_words_it_from_the_places_data():
    place = {"step": 0, "kind": "initial_buffer", "name": "bn.running_mean", "abs_diff": 0.5, "rel_diff": 0.5,
             "shards": {"of": 2, "differ": [1], "ranks": [1]}}
    assert text_of(Note("N183", {"rank": 1, "place": place, "ranks": [1, 3]})) == (
        "the copies do not start equal: rank 1: buffer bn.running_mean initial value (before any step), abs 0.5, "
        "rel 0.5; only dim-0 shard 1 of 2 differs, held by rank 1 (ranks 1, 3)")
    older = Note("N186", {"rank": 0, "description": "buffer bn.running_mean after the last step (7)", "ranks": None})
    assert text_of(older) == "the copies end apart: rank 0: buffer bn.running_mean after the last step (7)"


def test_an_isolations_status_is_data_worded_by_the_report():
    everything_fails = ddmin(3, lambda subsets, phase: ["fail"] * len(subsets))
    assert everything_fails.status == "endpoints" and everything_fails.why == {"passing": "fail", "failing": "fail"}
    assert reason_text(everything_fails.status, everything_fails.why) == (
        "nothing to isolate: the passing config is fail and the failing config is fail (needs pass and fail)")
    one = ddmin(4, lambda subsets, phase: ["fail" if 2 in s else "pass" for s in subsets])
    assert one.status == "isolated" and one.why == {} and one.minimal == (2,)
    assert reason_text(one.status, one.why).startswith("ddmin finished")
    assert reason_text("budget", {"budget": 0, "endpoints_judged": False}) == (
        "the budget ran out before both endpoints were judged")
