"""The report as a page people read and share: ``summary.html`` of a sweep dir (a grid, an
isolation's probes, ``--against`` another sweep) and ``report.html`` of a single run.

One layout for all of them (:func:`render_page`): the title and where the run lives, the
headline (the terminal's text), then the blocks that answer the question (culprits, the
isolation's answer and proof, the change against another sweep), then the job table
(sortable by any column, filterable by status and by each factor's level, its header kept
in view, long values shortened with the whole value on hover, the overrides every job shares
listed once above it), the interactive charts (:mod:`sweep.report.charts`), and everything
else folded in ``<details>``: the verdict's details, the factor tables, the jobs not
judged, the legend, the static PNGs. The page's CSS and script are embedded
(``sweep/report/assets/``); plotly.js is the one file beside it. It works offline, from a
file and as a CI artifact.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from sweep.report.charts import (PLOTLY_JS, curves_figure, envelope_figure, figures_script, levels_figure,
                                 losses_figure, short, write_plotly_js)

RUN_PAGE = "report.html"  # a single run's page, in its run dir


@dataclass
class Block:
    """One part of the page: ``html`` under the title ``title``; ``folded`` puts it in a
    ``<details>`` (one click away), else in an open ``<section>``; ``id`` its anchor."""

    title: str
    html: str
    folded: bool = False
    id: str = ""

    def render(self) -> str:
        anchor = f' id="{self.id}"' if self.id else ""
        if self.folded:
            return f"<details{anchor}><summary>{_e(self.title)}</summary>{self.html}</details>"
        return f'<section class="block"{anchor}><h2>{_e(self.title)}</h2>{self.html}</section>'


def _e(text: Any) -> str:
    return html.escape("" if text is None else str(text))


def _asset(name: str) -> str:
    return resources.files("sweep.report").joinpath("assets", name).read_text()


def prose(text: str) -> str:
    """``text`` as paragraphs: one per blank-line-separated part, and a long part split
    after each sentence that ends with ``. `` before a capital letter (the verdict's details
    are one long paragraph in the terminal)."""
    parts = []
    for chunk in re.split(r"\n\s*\n", str(text).strip()):
        sentences = re.split(r"(?<=[.;:])\s+(?=[A-Z][a-z])", chunk) if len(chunk) > 300 else [chunk]
        parts += [f"<p>{_e(s)}</p>" for s in sentences if s.strip()]
    return f'<div class="prose">{"".join(parts)}</div>'


def listing(items: Sequence[str], numbered: bool = False) -> str:
    tag = "ol" if numbered else "ul"
    return f"<{tag}>" + "".join(f"<li>{_e(i)}</li>" for i in items) + f"</{tag}>"


def render_page(title: str, where: str, headline: str, blocks: Sequence[Block],
                figures: Optional[Dict[str, Dict[str, Any]]] = None, tone: str = "") -> str:
    """The whole page: ``<h1>title</h1>``, ``where`` (the dir), the headline as the first
    block (``tone``: ``bad`` or ``good`` colours it), then ``blocks`` in order. A block's
    html may hold ``<div class="chart" data-figure="NAME">``, drawn from ``figures[NAME]``
    (plotly specs) by plotly.js loaded from :data:`PLOTLY_JS` beside the page."""
    figures = {k: v for k, v in (figures or {}).items() if v is not None}
    head = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{_e(title)}</title><style>{_asset('page.css')}</style></head><body>")
    body = [f"<h1>{_e(title)}</h1>", f'<p class="where">{_e(where)}</p>',
            f'<section class="headline {tone}" id="headline">{_e(headline)}</section>']
    body += [b.render() for b in blocks]
    scripts = []
    if figures:
        scripts.append(f'<script src="{PLOTLY_JS}" charset="utf-8"></script>')
        scripts.append(figures_script(figures))
    scripts.append(f"<script>{_asset('page.js')}</script>")
    return head + "\n".join(body) + "\n" + "\n".join(scripts) + "\n</body></html>\n"


def chart(name: str) -> str:
    return f'<div class="chart" data-figure="{_e(name)}"><p class="nojs">loading the chart…</p></div>'


# ---- the job table ----------------------------------------------------------------------

COLUMNS = (  # (metric, header, width of a shortened cell; 0: a number)
    ("status", "status", 10), ("drift", "drift", 14), ("first_diff_step", "first diff step", 0),
    ("first_real_step", "beyond rounding from", 0), ("first_fail_step", "first fail step", 0),
    ("n_fail", "failing steps", 0), ("max_abs_diff", "max |diff|", 0),
    ("mean_signed_diff", "mean diff", 0), ("first_tensor", "first tensor", 34), ("notes", "notes", 34),
)
WRAPPED = ("first_tensor", "notes")


def _cell(value: Any, width: int, css: str = "") -> str:
    """A table cell: a number to 3 significant digits (``data-v`` keeps it whole for
    sorting), text shortened to ``width`` with the whole value as its title."""
    if isinstance(value, bool) or value is None or value == "":
        text = "" if value is None else str(value)
        return f'<td class="{css}" data-v="{_e(text)}">{_e(text)}</td>'
    if isinstance(value, (int, float)):
        text = f"{value:.3g}" if isinstance(value, float) else str(value)
        return f'<td class="num {css}" data-v="{_e(repr(value))}">{_e(text)}</td>'
    full = str(value)
    shown = short(full, width) if width else full
    title = f' title="{_e(full)}"' if shown != full else ""
    return f'<td class="{css}"{title} data-v="{_e(full)}">{_e(shown)}</td>'


def job_table(rows: Sequence[Dict[str, Any]], keys: Sequence[str], constant: Sequence[str]) -> str:
    """The job table's html: the overrides every job shares (``constant``, ``k=v``) once
    above it, a status filter and one filter per factor of ``keys``, then one row per job
    (failing first as ``rows`` come) with ``data-status`` and ``data-f<i>`` (its level of
    ``keys[i]``) for the filters and ``data-job`` for the curves chart."""
    out = []
    if constant:
        out.append(f'<p class="constant"><b>Every job:</b> {_e(" ".join(constant))}</p>')
    statuses = list(dict.fromkeys(r["status"] for r in rows))
    filters = ['<label>status <select class="filter" data-key="status"><option value="">all</option>'
               + "".join(f'<option value="{_e(s)}">{_e(s)}</option>' for s in statuses) + "</select></label>"]
    for i, key in enumerate(keys):
        levels = list(dict.fromkeys(str(r["overrides"].get(key, "(unset)")) for r in rows))
        filters.append(f'<label title="{_e(key)}">{_e(short(key, 28))} <select class="filter" data-key="f{i}">'
                       '<option value="">all</option>'
                       + "".join(f'<option value="{_e(v)}" title="{_e(v)}">{_e(short(v, 30))}</option>' for v in levels)
                       + "</select></label>")
    out.append('<div class="filters">' + "".join(filters) + '<span id="shown"></span></div>')
    head = ['<th title="job number (its dir under the sweep dir)">job</th>']
    head += [f'<th title="{_e(k)}">{_e(short(k.rsplit(".", 1)[-1], 18))}</th>' for k in keys]
    columns = [c for c in COLUMNS if any(r.get(c[0]) not in (None, "") for r in rows)]
    head += [f'<th title="{_e(m)}">{_e(h)}</th>' for m, h, _ in columns]
    body = []
    for row in rows:
        attrs = f'data-job="{_e(row["job"])}" data-status="{_e(row["status"])}"'
        attrs += "".join(f' data-f{i}="{_e(row["overrides"].get(k, "(unset)"))}"' for i, k in enumerate(keys))
        cells = [_cell(row["job"], 0)]
        cells += [_cell(row["overrides"].get(k, "(unset)"), 22) for k in keys]
        for metric, _, width in columns:
            css = "wrap" if metric in WRAPPED else ""
            if metric == "status":
                css = f"status status-{row['status']}"
                reason = (row.get("reason") or "") if row["status"] != "ok" else ""
                cell = _cell(row["status"], width, css)
                if reason:
                    cell = cell.replace("<td ", f'<td title="{_e(reason)}" ', 1)
                cells.append(cell)
                continue
            cells.append(_cell(row.get(metric), width, css))
        body.append(f"<tr {attrs}>" + "".join(cells) + "</tr>")
    out.append('<table class="jobs"><thead><tr>' + "".join(head) + "</tr></thead><tbody>"
               + "".join(body) + "</tbody></table>")
    return "".join(out)


def plain_table(header: Sequence[str], body: Sequence[Sequence[Any]]) -> str:
    """A small table (every cell whole, wrapped where long)."""
    cells = "".join("<tr>" + "".join(f"<td>{_e(_fmt(v))}</td>" for v in row) + "</tr>" for row in body)
    return ('<table class="plain"><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in header)
            + f"</tr></thead><tbody>{cells}</tbody></table>")


def _fmt(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.3g}"
    return "" if value is None else value


# ---- the pages ---------------------------------------------------------------------------

def _tone(counts: Dict[str, int]) -> str:
    return "bad" if any(counts.get(s) for s in ("fail", "error", "timeout", "missing")) else "good"


def isolation_blocks(state: Dict[str, Any]) -> List[Block]:
    """An isolation's answer and proof (open), its probes and cost (folded), from
    ``isolate.json`` (:func:`sweep.report.isolate_report.write_isolation`)."""
    from sweep.report.isolate_report import sections, verdict

    parts = dict(sections(state, "html", full=False))
    proof = next((v for k, v in parts.items() if k.startswith("Proof")), "")
    changes = next((v for k, v in parts.items() if k.startswith("Changes")), "")
    blocks = [Block("Isolation: the smallest change that fails", prose(verdict(state)) + changes + proof,
                    id="isolation")]
    for title, body in parts.items():
        if title.startswith(("Proof", "Changes")):
            continue
        shown = body if body.lstrip().startswith("<table") else f"<pre>{_e(body)}</pre>"
        blocks.append(Block(f"Isolation: {title}", shown, folded=True))
    return blocks


def against_block(found: Dict[str, Any], new_name: str, old_name: str) -> Block:
    """``--against``: the two sweeps side by side: each matched job's status and numbers
    in the old sweep and in this one (changes first), then the unmatched jobs."""
    from sweep.report.against import verdict

    order = {c: i for i, c in enumerate(("broke", "fixed", "still failing", "other", "still passing"))}
    pairs = sorted(found["pairs"], key=lambda p: (order.get(p[2], 9), p[0]["job"]))
    keys = list(dict.fromkeys(k for new, _, _ in pairs for k in new["overrides"]))
    varying = [k for k in keys if len({new["overrides"].get(k) for new, _, _ in pairs}) > 1]
    header = ["this job", "old job", *[short(k.rsplit(".", 1)[-1], 18) for k in varying], "change",
              "old status", "status", "old max |diff|", "max |diff|", "old first fail", "first fail"]
    body = [[new["job"], old["job"], *(short(new["overrides"].get(k, ""), 22) for k in varying), kind,
             old["status"], new["status"], old.get("max_abs_diff"), new.get("max_abs_diff"),
             old.get("first_fail_step"), new.get("first_fail_step")] for new, old, kind in pairs]
    text = f"<p><b>{_e(new_name)}</b> against <b>{_e(old_name)}</b>: {_e(verdict(found))}</p>"
    text += plain_table(header, body) if body else "<p>no job matches by config</p>"
    for title, rows in (("Only in this sweep", found["only_new"]), ("Only in the old sweep", found["only_old"])):
        if rows:
            text += f"<p>{title}:</p>" + listing([f"job {r['job']} {r['status']}: " + " ".join(
                f"{k}={v}" for k, v in r["overrides"].items()) for r in rows])
    return Block("Against another sweep", text, id="against")


def grid_page(sweep_dir: Path, rows: Sequence[Dict[str, Any]], att: Dict[str, Any], pngs: Sequence[Path],
              isolation: Optional[Dict[str, Any]] = None, against: Optional[Dict[str, Any]] = None,
              old_name: str = "", sections: Sequence[tuple] = (), legend: str = "") -> str:
    """``summary.html`` of a sweep dir: ``rows`` of :func:`sweep.report.summary.collect`,
    ``att`` their :func:`sweep.report.findings.attribute`, ``pngs`` the static plots
    (linked, folded); ``isolation`` an ``isolate.json`` state when the sweep is an
    isolation's; ``against`` :func:`sweep.report.against.match` of these rows with
    another sweep's (``old_name``), whose matched jobs' curves are added to the chart,
    hidden until clicked; ``sections`` the report's other ``(title, body)`` parts (folded;
    a body that is an html table is kept, other text preformatted) and ``legend`` the
    columns' meanings (folded). ``rows`` come in the table's order (failing first)."""
    from sweep.analysis.grid import factors

    keys = factors(rows)
    constant = [f"{k}={v}" for k, v in rows[0]["overrides"].items() if k not in keys] if rows else []
    blocks: List[Block] = []
    found = [f for f in att.get("findings") or [] if f["code"] != "V000"]
    if found:
        blocks.append(Block("Findings", listing([f"{f['code']} {f['kind']}: {f['sentence']}" for f in found]),
                            id="findings"))
    if isolation:
        blocks += isolation_blocks(isolation)[:1]
    if against is not None:
        blocks.append(against_block(against, sweep_dir.name, old_name))
    blocks.append(Block(f"Jobs ({len(rows)}, failing first; click a header to sort)",
                        job_table(rows, keys, constant), id="jobs"))
    olds = [old for _, old, _ in (against or {}).get("pairs", [])]
    figures = {"curves": curves_figure(rows, keys, extra=olds), "levels": levels_figure(att.get("levels") or []),
               "envelope": envelope_figure(rows, keys)}
    if figures["curves"]:
        blocks.append(Block("Loss difference, every job", chart("curves"), id="curves"))
    if figures["envelope"]:
        blocks.append(Block("Against the rounding envelope", chart("envelope"), id="envelope"))
    if figures["levels"]:
        blocks.append(Block("Factors and levels", chart("levels"), id="levels"))
    for title, body in sections:
        blocks.append(Block(title, body if body.lstrip().startswith("<table") else f"<pre>{_e(body)}</pre>",
                            folded=True))
    if isolation:
        blocks += isolation_blocks(isolation)[1:]
    if legend:
        blocks.append(Block("Legend (what each column means)", f"<pre>{_e(legend)}</pre>", folded=True))
    if pngs:
        links = "".join(f'<a href="{_e(p.relative_to(sweep_dir).as_posix())}">{_e(p.stem)}</a>' for p in pngs)
        blocks.append(Block("Static plots (PNG)", f'<p class="pngs">{links}</p>', folded=True))
    headline = att["headline"]
    return render_page(f"Sweep {sweep_dir.name}", str(sweep_dir), headline, blocks, figures, _tone(att["counts"]))


def write_grid_page(sweep_dir: Path, rows: Sequence[Dict[str, Any]], att: Dict[str, Any], pngs: Sequence[Path],
                    against: Optional[Dict[str, Any]] = None, old_name: str = "", sections: Sequence[tuple] = (),
                    legend: str = "") -> Path:
    """Write ``sweep_dir/summary.html`` (:func:`grid_page`, with the same arguments; an
    ``isolate.json`` in the dir makes it an isolation's page) and ``plotly.min.js`` beside
    it; returns the page's path."""
    import json

    from sweep.report.isolate_report import ISOLATE_JSON

    state = None
    if (sweep_dir / ISOLATE_JSON).exists():
        try:
            state = json.loads((sweep_dir / ISOLATE_JSON).read_text())
        except ValueError:
            state = None
    page = grid_page(sweep_dir, rows, att, pngs, state, against, old_name, sections, legend)
    path = sweep_dir / "summary.html"
    path.write_text(page)
    write_plotly_js(sweep_dir)
    return path


def run_page(job_dir: Path, row: Dict[str, Any], status_line: str, lines: Sequence[str]) -> str:
    """``report.html`` of a single run: its status line (the terminal's) as the headline,
    why it fails (the reason), where the copies part (:func:`sweep.report.summary.job_headline`'s
    ``lines``), both loss curves and their difference, the losses' comparison and the static plot."""
    blocks = []
    if row.get("reason") and row["status"] != "ok":  # the verdict first: what fails it, losses or not
        blocks.append(Block("Reason", f"<pre>{_e(row['reason'])}</pre>", id="reason"))
    if lines:
        blocks.append(Block("Where the copies part, and why", listing(lines), id="parting"))
    figure = losses_figure(row)
    if figure:
        blocks.append(Block("Losses and their difference", chart("losses"), id="curves"))
    record = row.get("result")
    comparison = (getattr(record, "comparison", None) or {})
    if comparison:
        blocks.append(Block("The losses compared (passed: the losses alone, within rtol and atol)", plain_table(
            ("key", "value"), [[k, v] for k, v in comparison.items() if not isinstance(v, (list, dict))]), folded=True))
    if (job_dir / "plot.png").exists():
        blocks.append(Block("Static plot (PNG)", '<p class="pngs"><a href="plot.png">plot.png</a></p>', folded=True))
    tone = "good" if row["status"] == "ok" else "bad"
    return render_page(f"Run {job_dir.name}", str(job_dir), status_line.strip(), blocks, {"losses": figure}, tone)


def write_run_page(job_dir: Path | str, row: Dict[str, Any], status_line: str, lines: Sequence[str]) -> Path:
    """Write ``job_dir/report.html`` (:func:`run_page` of the run's ``row``,
    :func:`sweep.report.summary.collect_job`) and ``plotly.min.js`` beside it; returns the
    page's path."""
    job_dir = Path(job_dir)
    path = job_dir / RUN_PAGE
    path.write_text(run_page(job_dir, row, status_line, lines))
    if losses_figure(row):
        write_plotly_js(job_dir)
    return path
