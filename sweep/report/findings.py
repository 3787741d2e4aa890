"""The verdict rendered: the same findings (``sweep.findings``) in every output.

:func:`attribute` is a sweep's verdict as the report files hold it: the ranked findings
(``findings``: dicts with their codes, for tools and CI), the headline (:func:`headline`: the
counts, the finding that leads, where its jobs part), the details (:func:`details`: every finding's
sentence, in rank order) and the tables' numbers (``sweep.findings.tables``). The terminal prints
the headline and one line per finding with its code (:func:`lines`); ``summary.md``, the page and
JUnit render the same sentences.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from sweep.findings import find, kind, lead, tables
from sweep.findings.base import Finding
from sweep.records import is_note_dict
from sweep.report.notes import text_of
from sweep.report.template import render

SHOWN = 12  # findings on the terminal before "... N more: summary.md"


def sentence(found: Finding, short: bool = False) -> str:
    """The finding's sentence (its kind's template, or with ``short`` its headline template
    where it has one)."""
    k = kind(found.code)
    values = found.values
    if is_note_dict(values.get("note")):  # a finding that carries a job's note (J105): its sentence is the note's
        values = dict(values, text=text_of(values["note"]))
    return render(k.headline if short and k.headline else k.template, values)


def headline(found: Sequence[Finding]) -> str:
    """At most three short sentences: the counts, the finding that leads (:func:`sweep.findings.lead`,
    its short form) and, for a culprit's kind, where its jobs part (``V121``'s short form); a
    job that ran another precision than configured is said too (``V155``)."""
    parts = [sentence(f, short=True) for f in found if f.code == "V000"]
    top = lead(found)
    if top is not None:
        parts.append(sentence(top, short=True))
        if top.code in ("V101", "V102", "V103", "V104"):
            parts += [sentence(f, short=True) for f in found if f.code == "V121"][:1]
    parts += [sentence(f) for f in found if f.code == "V155"]
    return " ".join(parts)


def details(found: Sequence[Finding]) -> str:
    """Every finding's sentence in rank order, one paragraph (the report's Details)."""
    return " ".join(sentence(f) for f in found)


def lines(found: Sequence[Finding], shown: Optional[int] = SHOWN) -> List[str]:
    """One line per finding but the counts: ``V101 culprit: <sentence>``, cut after ``shown``."""
    rest = [f for f in found if f.code != "V000"]
    out = [f"{f.code} {f.kind}: {sentence(f)}" for f in (rest if shown is None else rest[:shown])]
    if shown is not None and len(rest) > shown:
        out.append(f"... {len(rest) - shown} more findings: summary.md, summary.json")
    return out


def attribute(rows: Sequence[Dict[str, Any]], answers: Sequence[Finding] = ()) -> Dict[str, Any]:
    """A sweep's verdict, JSON-ready: ``findings`` (ranked, each with its ``code``, ``kind``,
    ``jobs``, ``levels``, ``steps``, ``values``, ``evidence``, ``strength`` and rendered
    ``sentence``), ``headline``, ``verdict`` (the details), ``counts`` (status -> jobs),
    ``judged``, ``not_judged`` (``[{job, status, reason}]``), the tables' numbers
    (``sweep.findings.tables``) and the rules (``drift_rule``, ``onset_rule``)."""
    from collections import Counter

    from sweep.analysis.compare import ONSET_RULE
    from sweep.analysis.evidence import DRIFT_RULE
    from sweep.analysis.grid import JUDGED, STATUSES
    from sweep.analysis.trace import UPDATE_ONSET_RULE

    found = find(rows, answers)
    counts = Counter(r["status"] for r in rows)
    return {
        "headline": headline(found), "verdict": details(found),
        "findings": [dict(f.to_dict(), sentence=sentence(f)) for f in found],
        "counts": {s: counts[s] for s in STATUSES}, "judged": sum(counts[s] for s in JUDGED),
        "not_judged": [{"job": r["job"], "status": r["status"], "reason": r.get("reason")}
                       for r in rows if r["status"] not in JUDGED],
        **tables(rows),
        "drift_rule": DRIFT_RULE, "onset_rule": f"{UPDATE_ONSET_RULE}. Jobs not traced: {ONSET_RULE}",
    }
