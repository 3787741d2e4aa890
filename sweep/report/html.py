"""``summary.html``: the report in one file beside ``summary.md``, its first plots
embedded as base64 PNG data URIs and the rest linked, so the page stays under 1 MB."""

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


EMBED_BYTES = 800_000  # plots embedded up to this many bytes (base64); the page stays under 1 MB


def render_html(title: str, verdict: str, sections: Sequence[Tuple[str, str]], plots: Sequence[Path]) -> str:
    """The page: ``verdict`` first, then each ``(title, body)`` section (a body made by
    tabulate's ``html`` format is kept as a table, any other text is preformatted), then
    the PNGs of ``plots`` embedded in their order (pass the factor effects and the failing
    jobs first) up to :data:`EMBED_BYTES`, the others linked (``plots/<name>.png``)."""
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
        embedded = 0
        for path in plots:
            name = html.escape(Path(path).stem)
            size = Path(path).stat().st_size * 4 // 3  # base64
            if embedded + size > EMBED_BYTES:  # the rest beside the page: plots/<name>.png
                href = html.escape(f"{Path(path).parent.name}/{Path(path).name}")
                parts.append(f"<p><a href='{href}'>{name}</a></p>")
                continue
            embedded += size
            data = base64.b64encode(Path(path).read_bytes()).decode()
            parts.append(f"<h3>{name}</h3><img alt='{name}' src='data:image/png;base64,{data}'>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
