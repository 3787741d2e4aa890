"""V154 notes: the jobs' notes, counted by kind."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Dict, List

from sweep.analysis.grid import notes_of
from sweep.findings.base import Context, Finding, Kind


def check(ctx: Context) -> List[Finding]:
    kinds: Counter = Counter()
    held: Dict[str, List[int]] = defaultdict(list)
    for row in ctx.rows:
        for note in notes_of(row):
            kind = note.split(":")[0].split(" (")[0]
            kinds[kind] += 1
            held[kind].append(row["job"])
    return [KIND.make(jobs=held[kind], evidence=("notes",), strength=n, note=kind, n=n)
            for kind, n in kinds.most_common(6)]


KIND = Kind(
    code="V154", name="notes", tier="context",
    template="Note: {note} ({n} job{n|s}).",
    rests_on="the jobs' notes, counted by kind (the text before their first ':'): settings without effect, policies "
             "not applied, ranks that disagree, workarounds, emulated collectives, the collectives and the "
             "optimizer as they ran",
    not_claimed="more than each note says; the jobs' notes column has them whole",
    check=check, example={"note": "reduce_scatter ran in bfloat16 over dp, expected float32", "n": 4},
)
