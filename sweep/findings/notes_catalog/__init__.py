"""The catalog of a job's notes: every kind of note, one module a family (the analysis that makes
them), each with its code, template, what it rests on, what it does not claim and an example
(``sweep.findings.notes_catalog.base.NoteKind``).

A note (``sweep.records.Note``) is data; the report renders its sentence (``sweep.report.notes``:
its kind's template with its values, then the ranks that hold it), at the edge (the terminal, the
page, JUnit, ``summary.json`` beside its code). Codes are stable and
never reused: a retired kind keeps its code out of use.

May import: this package's modules (data only: the rules of the findings wing), and
``sweep.findings.places`` (the notes that quote a place word it as the place's own sentence).
"""

from __future__ import annotations

from typing import Dict, List

from sweep.findings.notes_catalog import collectives, compare, dtypes, judging, optimizer, reductions
from sweep.findings.notes_catalog.base import NoteKind

NOTE_KINDS: List[NoteKind] = [*collectives.KINDS, *optimizer.KINDS, *reductions.KINDS, *dtypes.KINDS,
                              *judging.KINDS, *compare.KINDS]
BY_CODE: Dict[str, NoteKind] = {k.code: k for k in NOTE_KINDS}
if len(BY_CODE) != len(NOTE_KINDS):  # pragma: no cover - a code used twice is a bug of this catalog
    raise RuntimeError("two note kinds share a code")


def note_kind(code: str) -> NoteKind:
    """The kind of note ``code``.

    Raises:
        KeyError: no note kind has that code (the message lists them)."""
    found = BY_CODE.get(code)
    if found is None:
        raise KeyError(f"no note has code {code!r}; the note codes: {', '.join(sorted(BY_CODE))}")
    return found

