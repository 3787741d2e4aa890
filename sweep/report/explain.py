"""Each finding's page: its code, what it says, what it rests on, what it does not claim.

``python -m sweep explain CODE`` prints one code's page (``python -m sweep explain`` lists every
code); a job's notes have pages too (``N1xx``: ``sweep.findings.notes_catalog``). The docs'
verdict page is generated from the same pages at every build
(``docs/hooks.py``: the marker line :data:`MARKER` in ``docs/verdict.md``), so a kind without a
page cannot exist: the build renders every kind of ``sweep.findings`` and fails on a template
its example cannot fill.
"""

from __future__ import annotations

import shutil
import sys
from typing import List, Optional, Sequence

from sweep.findings import all_kinds, kind
from sweep.findings.base import TIERS, Kind
from sweep.findings.notes_catalog import NOTE_KINDS, note_kind
from sweep.findings.notes_catalog.base import NoteKind
from sweep.report.notes import kind_text
from sweep.report.template import render

MARKER = "<!-- findings: generated from sweep.findings by docs/hooks.py -->"
TIER_TITLES = {"answer": "What another tool answered", "decides": "What decides (one leads the headline)",
               "proof": "What it rests on", "contrast": "Contrasts between levels", "context": "Context",
               "limits": "The limits of the evidence"}


# how to read a "says:" line (sweep.report.template's language), under every page
SLOTS = ("(in says: {x} is a value, [...] is said only where its values are, {n|s} an s after a count other "
         "than 1)")


def page(k: Kind, markdown: bool = False) -> str:
    """One kind's page: code and name, tier, the sentence (template and an example), what it
    rests on and what it does not claim."""
    example = render(k.template, k.example)
    if markdown:
        return (f"### {k.code} {k.name}\n\n*{TIER_TITLES[k.tier]}.* Example: \"{example}\"\n\n"
                f"- **rests on**: {k.rests_on}\n- **does not claim**: {k.not_claimed}\n"
                + (f"- **in the headline**: `{k.headline}`\n" if k.headline else ""))
    lines = [f"{k.code} {k.name} ({TIER_TITLES[k.tier].lower()})", "", f"says:  {k.template}",
             f"e.g.:  {example}", f"rests on: {k.rests_on}", f"does not claim: {k.not_claimed}"]
    if k.headline:
        lines.append(f"in the headline: {k.headline}")
    lines.append(SLOTS)
    return "\n".join(lines)


def note_page(k: NoteKind, markdown: bool = False) -> str:
    """One note kind's page: code and name, the analysis that makes it, the sentence (template and
    an example), what it rests on and what it does not claim."""
    example = kind_text(k, k.example)
    if markdown:
        return (f"### {k.code} {k.name}\n\n*A job's note ({k.family}).* Example: \"{example}\"\n\n"
                f"- **rests on**: {k.rests_on}\n- **does not claim**: {k.not_claimed}\n")
    return "\n".join([f"{k.code} {k.name} (a job's note: {k.family})", "", f"says:  {k.template}",
                      f"e.g.:  {example}", f"rests on: {k.rests_on}", f"does not claim: {k.not_claimed}", SLOTS])


def _page_of(code: str) -> str:
    """The page of a finding's or a note's ``code``.

    Raises:
        KeyError: neither has it (the message names the finding codes, then the note codes)."""
    try:
        return page(kind(code))
    except KeyError as exc:
        try:
            return note_page(note_kind(code))
        except KeyError as also:
            raise KeyError(f"{exc.args[0]}; {also.args[0]}") from None


def reference() -> str:
    """Every kind's page (markdown), by tier, for ``docs/verdict.md``."""
    kinds = all_kinds()
    parts: List[str] = []
    for tier in TIERS:
        these = [k for k in kinds if k.tier == tier]
        if these:
            parts.append(f"## {TIER_TITLES[tier]}\n")
            parts += [page(k, markdown=True) for k in these]
    parts.append("## A job's notes (N codes: one job's record, counted by V154)\n")
    parts += [note_page(k, markdown=True) for k in NOTE_KINDS]
    return "\n".join(parts)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``explain [CODE ...]``: each code's page (exit 0), every code's line without one (cut to
    the terminal's width), or one line naming the finding and the note codes for an
    unknown one (exit 2)."""
    codes = list(argv if argv is not None else sys.argv[1:])
    if any(c in ("-h", "--help") for c in codes):
        print("usage: python -m sweep explain [CODE ...]\n\nEach code's page (a finding's V/J code, a note's N "
              "code); without a code, every code's line, with an example of what it says.")
        return 0
    if not codes:  # a line a code, cut to the terminal's width (a wrapped line reads as two codes)
        width = max(shutil.get_terminal_size((100, 24)).columns - 1, 60)
        rows = [(k.code, k.name, render(k.template, k.example)) for k in all_kinds()]
        rows += [(n.code, n.name, kind_text(n, n.example)) for n in NOTE_KINDS]
        named = max(len(name) for _, name, _ in rows)  # every example starts in one column, after every name
        for code, name, example in rows:
            line = f"{code}  {name:<{named}}  {example}"
            print(line if len(line) <= width else line[:width - 3] + "...")
        return 0
    for code in codes:
        try:
            print(_page_of(code.upper()) + "\n")
        except KeyError as exc:
            print(f"error: {exc.args[0]}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
