"""A job's notes rendered: the edge where a note (``sweep.records.Note``: code and values) becomes
its sentence, its kind's template (``sweep.findings.notes_catalog``) filled with its values, then the
ranks that hold it where not every rank does (``(ranks 0, 2)``). A plain string (an older
``result.json``'s note, or one not typed) renders as itself."""

from __future__ import annotations

from typing import Any, Dict

from sweep.findings.notes_catalog import note_kind
from sweep.findings.notes_catalog.base import NoteKind
from sweep.records import Note, is_note_dict, ranks_text
from sweep.report.template import render


NONFINITE = ("nan", "inf", "-inf")  # a non-finite float as a JSON file holds it (sweep.io.write_json)


def kind_text(k: NoteKind, values: Dict[str, Any]) -> str:
    """``k``'s sentence with ``values`` (raises ``KeyError`` on a field they lack); a value a file
    holds as ``"inf"`` (a non-finite float, ``sweep.io``) is read back as the float."""
    values = {key: float(v) if isinstance(v, str) and v in NONFINITE else v for key, v in values.items()}
    return render(k.template, k.fields(values))


def text_of(item: Any) -> str:
    """A note's sentence (a :class:`~sweep.records.Note` or its dict); a string is its own."""
    if is_note_dict(item):
        item = Note.from_dict(item)
    if isinstance(item, Note):
        return kind_text(note_kind(item.code), item.values) + ranks_text(item.ranks)
    return str(item)


def as_data(item: Any) -> Dict[str, Any]:
    """A note as ``summary.json`` keeps it: ``code`` (``None`` for a plain string), ``values``,
    ``ranks`` and the rendered ``text``."""
    if is_note_dict(item):
        item = Note.from_dict(item)
    if isinstance(item, Note):
        return {**item.to_dict(), "text": text_of(item)}
    return {"code": None, "values": {}, "ranks": [], "text": str(item)}
