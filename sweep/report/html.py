"""``summary.html``: the report in one self-contained file, its plots embedded as base64
PNG data URIs (nothing else to copy along), beside ``summary.md``."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Sequence, Tuple

STYLE = (
    "body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
    "table{border-collapse:collapse;font-size:90%}td,th{border:1px solid #ccc;padding:2px 6px}"
    "pre{white-space:pre-wrap}img{max-width:100%}"
)


def render_html(title: str, verdict: str, sections: Sequence[Tuple[str, str]], plots: Sequence[Path]) -> str:
    """The page: ``verdict`` first, then each ``(title, body)`` section (a body made by
    tabulate's ``html`` format is kept as a table, any other text is preformatted), then
    every PNG of ``plots`` embedded."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<p><b>{html.escape(verdict)}</b></p>"]
    for name, body in sections:
        parts.append(f"<h2>{html.escape(name)}</h2>")
        chunks = body.split("\n\n")
        for chunk in chunks:
            if chunk.lstrip().startswith("<table"):
                parts.append(chunk)
            else:
                parts.append(f"<pre>{html.escape(chunk)}</pre>")
    if plots:
        parts.append("<h2>Plots</h2>")
        for path in plots:
            data = base64.b64encode(Path(path).read_bytes()).decode()
            parts.append(f"<h3>{html.escape(Path(path).stem)}</h3><img alt='{html.escape(Path(path).stem)}' "
                         f"src='data:image/png;base64,{data}'>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
