"""MkDocs hook (``hooks:`` in ``mkdocs.yml``): renders the config reference and the verdict's
findings (``docs/verdict.md``: every kind's page, ``sweep.report.explain``) at every build.

``docs/config-reference.md`` holds a marker line (``sweep.config.reference.MARKER``); this
hook replaces it with :func:`sweep.config.reference.render`, the tables generated from the
schema's fields (``sweep/config/schema.py`` and its sections, ``sweep/config/sections/``),
so the page cannot drift from the code. The repository root goes first on ``sys.path``, so
the build documents this checkout's schema even where another copy of the package is
installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = "config-reference.md"
VERDICT = "verdict.md"


def _reference():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from sweep.config import reference

    return reference


def on_page_markdown(markdown: str, page, config, files) -> str:
    """The config reference page with its marker replaced by the generated tables, the verdict
    page with its marker replaced by every finding's page; other pages as they are.

    Raises:
        ValueError: a page lost its marker line (nothing to render into)."""
    if page.file.src_uri == VERDICT:
        _reference()  # (the repository root first on sys.path)
        from sweep.report import explain

        if explain.MARKER not in markdown:
            raise ValueError(f"docs/{VERDICT} lost its marker line {explain.MARKER!r}: nothing to render into")
        return markdown.replace(explain.MARKER, explain.reference())
    if page.file.src_uri != PAGE:
        return markdown
    reference = _reference()
    if reference.MARKER not in markdown:
        raise ValueError(f"docs/{PAGE} lost its marker line {reference.MARKER!r}: nothing to render into")
    return markdown.replace(reference.MARKER, reference.render())
