"""V153 copies not equal: the copies differ in what they draw (random numbers on sharded data) or
hold (tensors only one copy has)."""

from __future__ import annotations

from collections import defaultdict
from typing import Dict, List

from sweep.analysis.compare import COPY_NOTE_KINDS
from sweep.findings.base import Context, Finding, Kind
from sweep.analysis.grid import notes_of


def check(ctx: Context) -> List[Finding]:
    jobs: Dict[str, List[int]] = defaultdict(list)
    for row in ctx.rows:
        for note in notes_of(row):
            if note.split(":")[0] in COPY_NOTE_KINDS:
                jobs[note].append(row["job"])
    return [KIND.make(jobs=js, evidence=("notes",), note=note, n=len(js), listed=js) for note, js in jobs.items()]


KIND = Kind(
    code="V153", name="copies not equal", tier="context",
    template="Copies not equal: {note} (job{n|s} {listed}).",
    rests_on="notes that the copies differ in what they draw (random numbers under sharded data) or hold (tensors "
             "only one copy has)",
    not_claimed="a fault of the engine: the copies are not the same experiment",
    check=check, example={"note": "the copies hold different tensors: only the distributed copy has the "
                                    "parameter extra.weight", "n": 1, "listed": [2]},
)
