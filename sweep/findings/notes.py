"""V154 notes: the jobs' notes, counted by kind."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Dict, List, Optional, Tuple

from sweep.analysis.grid import notes_of
from sweep.findings.base import Context, Finding, Kind, Row
from sweep.findings.notes_catalog import BY_CODE as NOTE_KINDS


def _kinds(row: Row) -> List[Tuple[str, Optional[str]]]:
    """Each of the row's notes as its kind: a typed note's kind name and code (``note_codes``,
    ``sweep.findings.notes_catalog``), an engine's note (``what -- why``) by what it did, another
    plain string by its text before its first ``:`` (and ``" ("``)."""
    codes = row.get("note_codes") or []
    out = []
    for i, text in enumerate(notes_of(row)):
        code = codes[i] if i < len(codes) else None
        if code in NOTE_KINDS:
            out.append((NOTE_KINDS[code].name, code))
        elif " -- " in text:  # an engine's note: what it did, then why ("workaround: ... -- ...")
            out.append((text.split(" -- ")[0], None))
        else:
            out.append((text.split(":")[0].split(" (")[0], None))
    return out


def check(ctx: Context) -> List[Finding]:
    kinds: Counter = Counter()
    held: Dict[Tuple[str, Optional[str]], List[int]] = defaultdict(list)
    for row in ctx.rows:
        for kind in dict.fromkeys(_kinds(row)):  # a job counted once per kind, however many of its notes
            kinds[kind] += 1
            held[kind].append(row["job"])
    return [KIND.make(jobs=held[kind], evidence=("notes",), strength=n, note=kind[0], code=kind[1], n=n)
            for kind, n in kinds.most_common(6)]


KIND = Kind(
    code="V154", name="notes", tier="context",
    template="Note: {note}[ ({code})] ({n} job{n|s}).",
    rests_on="the jobs' notes, counted by kind: a typed note by its code (its kind's name, python -m sweep explain "
             "N1xx), an older or untyped one by the text before its first ':': settings without effect, policies "
             "not applied, ranks that disagree, workarounds, emulated collectives, the collectives and the "
             "optimizer as they ran",
    not_claimed="more than each note says; the jobs' notes column has them whole",
    check=check, example={"note": "a collective in another dtype", "code": "N101", "n": 4},
)
