"""J105 replicas and J106 note: what one job's record adds (replicas that disagree, each note)."""

from __future__ import annotations

from typing import List

from sweep.analysis.judging import arises_after_reduction, replica_reason
from sweep.findings.base import Context, Finding, Kind


def _replicas(ctx: Context) -> List[Finding]:
    row = ctx.rows[0]
    record = row.get("result")
    replicas = getattr(record, "replicas", None) or {}
    if replicas.get("first_step") is None:
        return []
    tensor = getattr(record, "first_tensor", None) or {}
    start = (tensor.get("ranks") or []) if tensor.get("kind") == "initial" else []
    return [REPLICAS.make(jobs=[row["job"]], steps={"first": replicas["first_step"]}, evidence=("replicas",),
                          note=replica_reason(replicas, start, arises_after_reduction(
                              tensor, getattr(record, "notes", None) or ())).to_dict(), text=None)]


def _notes(ctx: Context) -> List[Finding]:
    """One finding a note of the record (``record_notes``, ``sweep.report.summary.collect``): its
    sentence (``text``, the report's rendering), its code (``None``: a plain string, an older
    record's) and values (``sweep.records.Note``); a row without them: the record's notes as text."""
    row = ctx.rows[0]
    notes = row.get("record_notes")
    if notes is None:
        notes = [{"code": None, "values": {}, "text": str(n)} for n in getattr(row.get("result"), "notes", None) or []]
    return [NOTE.make(jobs=[row["job"]], evidence=("notes",), text=n["text"], note=n["code"],
                      note_values=dict(n["values"])) for n in notes]


REPLICAS = Kind(
    code="J105", name="replicas", tier="context",
    template="{text}",  # the note's sentence (N184, N185): the report renders a finding's ``note`` into ``text``
    rests_on="per-step digests of the ranks' local shards: ranks holding the same shards must agree",
    not_claimed="which collective is wrong",
    check=_replicas,
    example={"note": None, "text": "replicas disagree from step 1: rank 0 (dp_replicate x dp_shard [0, 0]) and rank 2 "
                     "(dp_replicate x dp_shard [1, 0]) hold the same shards of the weights but different values (the "
                     "reduction across replicas is missing or wrong)"},
)
NOTE = Kind(
    code="J106", name="note", tier="context",
    template="note: {text}",
    rests_on="the job's record: settings without effect, shared storage, tensors one copy lacks, the collectives "
             "and the optimizer as they ran, workarounds",
    not_claimed="more than it says",
    check=_notes,
    example={"text": "the copies share storage (weights.transfer=shared): the distributed copy's weights moved by "
                     "0.00931 while the standalone copy trained, ... so each trains on the other's updates"},
)
