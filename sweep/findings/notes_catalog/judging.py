"""N180-N186: why a job fails (``sweep.analysis.judging.verdict``: the reasons of ``JobRecord.reason``,
joined by ``"; "``): some rank outside tolerance, losses non-finite alike, ranks that disagree,
copies that do not start equal, replicas that disagree, copies that end apart."""

from __future__ import annotations

from typing import Any, Dict, List

from sweep.findings.notes_catalog.base import NoteKind
from sweep.findings.places import tensor_text

FAMILY = "judging"
CAUSES = {"init": "the copies already start apart on some of these ranks (initial weights that differ by rank: an "
                  "initialisation, not the reduction)",
          "reduction": "the reduction across replicas is missing or wrong",
          "after": "the gradients of the first differing step agree as reduced: it arises after the reduction, on "
                   "some replicas (clipping, scaling or the optimizer step), not in the reduction",
          "buffer": "a statistic the forward updates on each rank alike with replicated data: a rank updates it "
                    "otherwise"}


def _at(values: Dict[str, Any], rank: int) -> str:
    coords, dims = values.get("coords") or {}, values.get("dims") or []
    where = coords.get(str(rank))
    return f"rank {rank}" + (f" ({' x '.join(dims) or 'mesh'} {where})" if where is not None else "")


def _pairs(values: Dict[str, Any]) -> Dict[str, Any]:
    return {"pairs_text": ", ".join(f"{_at(values, a)} and {_at(values, b)}" for a, b in values["pairs"]),
            "cause_text": CAUSES[values["cause"]]}


def _tensors(values: Dict[str, Any]) -> Dict[str, Any]:
    """One clause per pair of ranks and part, naming every tensor they disagree on (a pair that
    disagrees on four tensors is said once, not four times)."""
    grouped: Dict[Any, List[str]] = {}
    for t in values["tensors"]:
        what = f"buffer {t['name'][len('buffer:'):]}" if t["name"].startswith("buffer:") else t["name"]
        grouped.setdefault((tuple(t["ranks"]), t["part"]), []).append(what)
    found = []
    for ((a, b), part), names in grouped.items():
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        shown = "" if part == "whole" else f" ({part})"
        found.append(f"{_at(values, a)} and {_at(values, b)} hold the same {listed}{shown} but different values")
    return {"found_text": ", ".join(found), "cause_text": CAUSES[values["cause"]]}


def _place(values: Dict[str, Any]) -> Dict[str, Any]:
    """The quoted tensor's sentence (``place``: its data, ``sweep.findings.places``); an older
    record's note holds the sentence itself (``description``)."""
    return {"description": tensor_text(values["place"]) if values.get("place") else values.get("description")}


TOLERANCE = NoteKind(
    code="N180", name="steps outside tolerance", family=FAMILY,
    template="[rank {rank}: ]{n_fail}/{n_steps} steps outside rtol={rtol}, atol={atol}; first at step {first}"
             "[ (failing ranks: {failing} of {ranks})][; a non-finite loss from step {bad} (standalone {standalone}, "
             "distributed {distributed})]",
    rests_on="every rank's losses against the standalone copy's within rtol and atol (numpy.isclose); the judged "
             "rank is the worst",
    not_claimed="the cause: the findings and the evidence columns say where the copies part",
    example={"rank": 1, "n_fail": 3, "n_steps": 4, "rtol": 0.0001, "atol": 0.0001, "first": 1, "failing": [1],
             "ranks": 2, "bad": 1, "standalone": 0.9, "distributed": float("nan")},
)
NONFINITE = NoteKind(
    code="N181", name="losses non-finite alike", family=FAMILY,
    template="non-finite loss from step {step} in both copies[ (standalone {standalone}, distributed {distributed})]"
             "[ (rank {rank})]: equal, but nothing to compare",
    rests_on="both copies' losses NaN or inf at the same steps (numpy.isclose calls them equal)",
    not_claimed="which copy diverged first: both did by that step",
    example={"step": 1, "standalone": float("inf"), "distributed": float("inf"), "rank": None},
)
RANKS = NoteKind(
    code="N182", name="ranks disagree", family=FAMILY,
    template="ranks disagree: rank {rank} against rank 0 from step {step} (max |diff| {max_abs_diff:.3g})",
    rests_on="each rank's distributed losses against rank 0's, within the job's tolerance",
    not_claimed="that either rank fails against the standalone copy",
    example={"rank": 2, "step": 2, "max_abs_diff": 0.0003},
)
START = NoteKind(
    code="N183", name="copies do not start equal", family=FAMILY,
    template="the copies do not start equal: rank {rank}: {description}[ (ranks {ranks})]",
    rests_on="the copies' initial weights and buffers, tensor by tensor, on every rank",
    not_claimed="that the training itself differs",
    example={"rank": 0, "place": {"step": 0, "kind": "initial", "name": "w", "abs_diff": 0.5, "rel_diff": 0.25},
             "ranks": [0, 1]},
    fill=_place,
)
REPLICAS = NoteKind(
    code="N184", name="replicas disagree", family=FAMILY,
    template="replicas disagree from step {step}: {pairs_text} hold the same shards of the weights but different "
             "values ({cause_text})",
    rests_on="per-step digests of each rank's local shards (an older record: one digest a rank): ranks holding the "
             "same shards must agree",
    not_claimed="which collective is wrong",
    example={"step": 1, "pairs": [[0, 2]], "coords": {"0": [0, 0], "2": [1, 0]}, "dims": ["dp_replicate", "dp_shard"],
             "cause": "reduction"},
    fill=_pairs,
)
REPLICA_TENSORS = NoteKind(
    code="N185", name="replicas of a tensor disagree", family=FAMILY,
    template="replicas disagree from step {step}: {found_text}[; {more} more tensor{more|s} too] ({cause_text})",
    rests_on="per-step digests of each tensor's part on each rank: ranks holding the same part of a parameter or "
             "buffer must agree",
    not_claimed="which collective is wrong",
    example={"step": 1, "tensors": [{"name": "layer0.weight", "part": "dim-0 shard 1 of 2", "ranks": [0, 2]}],
             "more": None, "coords": {"0": [0, 0], "2": [1, 0]}, "dims": ["dp_replicate", "dp_shard"],
             "cause": "reduction"},
    fill=_tensors,
)
END = NoteKind(
    code="N186", name="copies end apart", family=FAMILY,
    template="the copies end apart: rank {rank}: {description}[ (ranks {ranks})]",
    rests_on="the copies' buffers after the last step, where the training losses never read them",
    not_claimed="that the losses differ",
    example={"rank": 0, "place": {"step": 3, "kind": "buffer", "name": "bn.running_mean", "abs_diff": 0.01,
                                  "rel_diff": 0.002, "after_last_step": True}, "ranks": [0, 1]},
    fill=_place,
)

KINDS = [TOLERANCE, NONFINITE, RANKS, START, REPLICAS, REPLICA_TENSORS, END]
