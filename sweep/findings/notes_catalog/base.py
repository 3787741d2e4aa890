"""What a kind of note is: one sentence a job's record may hold about the job.

A **note kind** (:class:`NoteKind`) mirrors a finding's kind (``sweep.findings.base.Kind``) without
a rule or a tier: its ``code`` (``N1xx``: stable, never reused), its ``name`` in a few words (the
verdict counts notes by kind under it: ``sweep.findings.notes``), its sentence ``template``
(``sweep.report.template``), what the analysis that makes it reads (``rests_on``), what it does
not claim, and an ``example`` its template renders for the docs (``python -m sweep explain N1xx``).
The note itself (``sweep.records.Note``) is made in ``sweep.analysis``: code and values, no text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional


@dataclass(frozen=True)
class NoteKind:
    """One kind of note (module docstring); ``family``: the analysis that makes it; ``fill``: where
    a sentence needs what a template cannot say (pairs of values, a number as ``none``), the
    values it adds for the template (the note's values stay as they are)."""

    code: str
    name: str
    family: str
    template: str
    rests_on: str
    not_claimed: str
    example: Dict[str, Any] = field(default_factory=dict)
    fill: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None

    def fields(self, values: Dict[str, Any]) -> Dict[str, Any]:
        """What the template reads: ``values`` and what :attr:`fill` adds (the report renders it:
        ``sweep.report.notes``)."""
        return {**values, **self.fill(values)} if self.fill else dict(values)
