"""Interactive charts of the report's pages (``summary.html``, a run's ``report.html``),
drawn by plotly.js in the browser from figure specs built here.

A spec is plotly's figure JSON (``{"data": [...], "layout": {...}}``, checked by plotly's
own validator when it is serialised: :func:`figure_json`); the page loads
``plotly.min.js`` from beside itself (:func:`write_plotly_js`, the file the ``plotly``
package ships, written once per sweep or run dir), so the page works from a file, offline
and as a CI artifact, and stays small: the script is about 4.8 MB, the specs of the default
grid about 0.3 MB.

The charts:

- :func:`curves_figure`: ``distributed - standalone`` per step of every job on one chart,
  one line per job (click its legend entry to show or hide it; hover reads the step,
  both losses and the difference), against the tolerance band ``±(atol + rtol·|standalone|)``
  of ``numpy.isclose`` (the narrowest over the jobs at each step, so a line outside it fails).
- :func:`levels_figure`: a factor × level view: the pass rate of each level's judged jobs
  (%) beside its worst ``max_abs_diff`` (log scale), from
  :func:`sweep.analysis.attribution.level_stats`.
- :func:`losses_figure`: a single run's two loss curves above their difference.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from sweep.io import read_floats

PLOTLY_JS = "plotly.min.js"  # beside the page; the page's <script src> names it
POINTS_BUDGET = 16_000  # points over all the curves of a page: about 0.6 MB of JSON, so the page stays < 1.5 MB
MIN_POINTS = 60  # per job, however many jobs: the shape of each curve stays readable
COLOURS = {"ok": "#2a9d8f", "fail": "#d62828", "other": "#888888"}
CONFIG = {"displaylogo": False, "responsive": True}


def _num(value: float, digits: int) -> Optional[float]:
    """``value`` to ``digits`` significant digits for the page's JSON (``None``, a gap in
    the line, where it is not finite: JSON has no NaN)."""
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.{digits}g}")


def keep_steps(n: int, budget: int, must: Sequence[int] = ()) -> List[int]:
    """Indices of ``n`` steps to draw with at most about ``budget`` points: all of them when
    they fit, else evenly spaced ones plus ``must`` (the first failing step, the largest
    difference), sorted. ``budget`` below 2 keeps the first and last step."""
    if n <= budget:
        return list(range(n))
    budget = max(budget, 2)
    spaced = {round(i * (n - 1) / (budget - 1)) for i in range(budget)}
    return sorted(spaced | {m for m in must if m is not None and 0 <= m < n})


def _losses(row: Dict[str, Any]) -> Optional[tuple]:
    result = row.get("result")
    if result is None or not result.losses or not result.comparison:
        return None
    ref = read_floats(result.losses["standalone"])
    got = read_floats(result.losses["distributed"])
    n = min(len(ref), len(got))
    return ref[:n], got[:n], result.comparison


def _diff(a: float, b: float) -> float:
    try:
        return b - a
    except (OverflowError, ValueError):
        return math.nan


def job_name(row: Dict[str, Any], keys: Sequence[str], width: int = 44, named: bool = False) -> str:
    """``job 3: bf16 dp4`` (``named``: ``job 3: mp_policy=bf16 mesh=dp4``): the job and its
    values of ``keys`` (the swept factors), dotted values by their last part, cut to
    ``width`` characters (the legend's; the hover names the keys)."""
    values = " ".join((f"{k.rsplit('.', 1)[-1]}=" if named else "") + short(row['overrides'].get(k, '(unset)'), 18)
                      for k in keys)
    text = f"job {row['job']}" + (f": {values}" if values else "")
    return text if len(text) <= width else text[:width - 1] + "…"


def short(value: Any, width: int = 24) -> str:
    """A value as a cell or a legend shows it: a dotted path by its last part
    (``sweep.engines.torch_fsdp2.TorchFSDP2`` -> ``TorchFSDP2``), then cut to ``width``
    characters with ``…``; the page gives the whole value on hover."""
    text = "" if value is None else str(value)
    if "." in text and " " not in text and "/" not in text and not _is_number(text):
        text = text.rsplit(".", 1)[-1] or text
    return text if len(text) <= width else text[:width - 1] + "…"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def curves_figure(rows: Sequence[Dict[str, Any]], keys: Sequence[str], budget: int = POINTS_BUDGET,
                  extra: Sequence[Dict[str, Any]] = (), extra_name: str = "old") -> Optional[Dict[str, Any]]:
    """The difference of every job with losses on one chart (``None`` when no job has
    any): trace ``i`` is the tolerance band's upper edge for ``i = 0``, its lower edge
    (filled) for ``i = 1``, then one line per job in ``rows`` order, ``meta`` = its job
    number, coloured by status, failing ones drawn thicker. ``extra`` rows (another sweep's
    matched jobs, ``--against``) are added dashed and hidden until clicked in the legend,
    named with ``extra_name``. Each line keeps at most ``budget / jobs`` points
    (:func:`keep_steps`, at least :data:`MIN_POINTS`), its first failing step and largest
    difference included. Units: loss units against steps."""
    jobs = [(row, found) for row in rows if (found := _losses(row)) is not None]
    olds = [(row, found) for row in extra if (found := _losses(row)) is not None]
    if not jobs:
        return None
    per_job = max(MIN_POINTS, budget // max(1, len(jobs) + len(olds)))
    band: List[Optional[float]] = []
    for _, (ref, _, cmp) in jobs:
        if cmp.get("atol") is None or cmp.get("rtol") is None:
            continue
        tol = [cmp["atol"] + cmp["rtol"] * abs(r) if math.isfinite(r) else math.inf for r in ref]
        longer = band if len(band) > len(tol) else tol
        band = [min(a, b) for a, b in zip(band, tol)] + longer[min(len(band), len(tol)):]
    longest = max(len(found[0]) for _, found in jobs)
    band_steps = keep_steps(len(band), per_job)
    upper = [_num(band[i], 4) for i in band_steps]
    data: List[Dict[str, Any]] = [
        {"type": "scatter", "mode": "lines", "x": band_steps, "y": upper, "line": {"width": 0},
         "name": "tolerance band", "legendgroup": "band", "hoverinfo": "skip", "showlegend": False},
        {"type": "scatter", "mode": "lines", "x": band_steps, "y": [None if u is None else -u for u in upper],
         "line": {"width": 0}, "fill": "tonexty", "fillcolor": "rgba(70,130,180,0.18)",
         "name": "tolerance ±(atol + rtol·|standalone|), narrowest over the jobs", "legendgroup": "band",
         "hoverinfo": "skip"},
    ]
    for group, dashed in ((jobs, False), (olds, True)):
        for row, (ref, got, cmp) in group:
            diff = [_diff(a, b) for a, b in zip(ref, got)]
            finite = [abs(d) if math.isfinite(d) else -1.0 for d in diff]
            worst = max(range(len(diff)), key=finite.__getitem__) if diff else None
            steps = keep_steps(len(diff), per_job, (cmp.get("first_fail_step"), worst))
            status = row.get("status")
            name = (f"{extra_name} " if dashed else "") + job_name(row, keys)
            hover_name = (f"{extra_name} " if dashed else "") + job_name(row, keys, width=120, named=True)
            data.append({
                "type": "scatter", "mode": "lines", "name": name, "meta": row["job"],
                "x": steps, "y": [_num(diff[i], 4) for i in steps],
                "customdata": [[_num(ref[i], 8), _num(got[i], 8)] for i in steps],
                "line": {"width": 2.2 if status == "fail" else 1.2, "dash": "dash" if dashed else "solid",
                         "color": COLOURS.get(status, COLOURS["other"])},
                "opacity": 0.9,
                "visible": "legendonly" if dashed else True,
                "legendgroup": "old" if dashed else f"job{row['job']}",
                "hovertemplate": (f"<b>{hover_name}</b> ({status})<br>step %{{x}}<br>standalone %{{customdata[0]}}"
                                  "<br>distributed %{customdata[1]}<br>diff %{y:.3g}<extra></extra>"),
            })
    layout = {
        "title": {"text": "distributed − standalone, every job (click a legend entry to show or hide it)",
                  "font": {"size": 14}},
        "xaxis": {"title": {"text": "step"}, "range": [0, max(longest - 1, 1)]},
        "yaxis": {"title": {"text": "difference (loss units)"}, "exponentformat": "e", "zeroline": True},
        "height": 460, "margin": {"l": 70, "r": 20, "t": 40, "b": 50},
        "legend": {"font": {"size": 10}}, "hovermode": "closest",
    }
    return {"data": data, "layout": layout}


def levels_figure(levels: Sequence[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """Factor × level: one row per ``factor=level`` (``levels`` from
    :func:`sweep.analysis.attribution.level_stats`): its pass rate over judged jobs (%, a
    bar, left) and its worst ``max_abs_diff`` (loss units, a dot on a log scale, right;
    a level with no difference at all has no dot); hover gives the whole names and the job
    counts. ``None`` without levels."""
    if not levels:
        return None
    names = [f"{short(s['factor'].rsplit('.', 1)[-1], 20)}={short(s['level'], 20)}" for s in levels]
    full = [[f"{s['factor']}={s['level']}", s["jobs"], s["judged"]] for s in levels]
    rates = [s["pass_rate_pct"] for s in levels]
    worst = [s["worst_abs_diff"] if s["worst_abs_diff"] and s["worst_abs_diff"] > 0 else None for s in levels]
    colours = ["#d62828" if r is not None and r < 100 else "#2a9d8f" for r in rates]
    hover = "%{customdata[0]}<br>%{customdata[1]} jobs, %{customdata[2]} judged<br>"
    data = [
        {"type": "bar", "orientation": "h", "y": names, "x": rates, "customdata": full, "name": "pass rate",
         "marker": {"color": colours}, "xaxis": "x", "yaxis": "y",
         "hovertemplate": hover + "pass rate %{x:.0f}%<extra></extra>"},
        {"type": "scatter", "mode": "markers", "y": names, "x": [_num(w, 4) for w in worst], "customdata": full,
         "name": "worst |diff|", "marker": {"color": colours, "size": 10}, "xaxis": "x2", "yaxis": "y",
         "hovertemplate": hover + "worst |diff| %{x:.3g}<extra></extra>"},
    ]
    layout = {
        "title": {"text": "Factor × level: pass rate (left) and worst |distributed − standalone| (right)",
                  "font": {"size": 14}},
        "xaxis": {"domain": [0, 0.45], "range": [0, 100], "title": {"text": "pass rate (% of judged jobs)"}},
        "xaxis2": {"domain": [0.55, 1], "type": "log", "title": {"text": "worst max_abs_diff (loss units)"},
                   "exponentformat": "e"},
        "yaxis": {"autorange": "reversed", "automargin": True},
        "showlegend": False, "height": 120 + 26 * len(levels), "margin": {"l": 10, "r": 20, "t": 40, "b": 50},
    }
    return {"data": data, "layout": layout}


def losses_figure(row: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """A single run: standalone and distributed losses per step (top) and their difference
    against the tolerance band (bottom); hover reads each step. ``None`` without losses."""
    found = _losses(row)
    if found is None:
        return None
    ref, got, cmp = found
    steps = keep_steps(len(ref), POINTS_BUDGET // 2, (cmp.get("first_fail_step"),))
    diff = [_diff(ref[i], got[i]) for i in steps]
    data: List[Dict[str, Any]] = [
        {"type": "scatter", "mode": "lines", "name": "standalone", "x": steps, "y": [_num(ref[i], 8) for i in steps],
         "hovertemplate": "step %{x}<br>standalone %{y}<extra></extra>"},
        {"type": "scatter", "mode": "lines", "name": "distributed", "x": steps, "y": [_num(got[i], 8) for i in steps],
         "line": {"dash": "dash"}, "hovertemplate": "step %{x}<br>distributed %{y}<extra></extra>"},
    ]
    if cmp.get("atol") is not None and cmp.get("rtol") is not None:
        tol = [_num(cmp["atol"] + cmp["rtol"] * abs(ref[i]), 4) for i in steps]
        data += [
            {"type": "scatter", "mode": "lines", "x": steps, "y": tol, "line": {"width": 0}, "xaxis": "x2",
             "yaxis": "y2", "hoverinfo": "skip", "showlegend": False, "legendgroup": "band"},
            {"type": "scatter", "mode": "lines", "x": steps, "y": [None if t is None else -t for t in tol],
             "line": {"width": 0}, "fill": "tonexty", "fillcolor": "rgba(70,130,180,0.18)", "xaxis": "x2",
             "yaxis": "y2", "hoverinfo": "skip", "name": "tolerance band", "legendgroup": "band"},
        ]
    data.append({"type": "scatter", "mode": "lines", "name": "distributed − standalone", "x": steps,
                 "y": [_num(d, 4) for d in diff], "xaxis": "x2", "yaxis": "y2", "line": {"color": "#d62828"},
                 "hovertemplate": "step %{x}<br>diff %{y:.3g}<extra></extra>"})
    layout = {
        "grid": {"rows": 2, "columns": 1, "pattern": "independent"},
        "yaxis": {"title": {"text": "loss"}, "domain": [0.55, 1]},
        "yaxis2": {"title": {"text": "difference"}, "domain": [0, 0.42], "exponentformat": "e"},
        "xaxis": {"anchor": "y", "matches": "x2", "showticklabels": False},
        "xaxis2": {"anchor": "y2", "title": {"text": "step"}},
        "height": 560, "margin": {"l": 70, "r": 20, "t": 30, "b": 50}, "hovermode": "x unified",
    }
    return {"data": data, "layout": layout}


def figure_json(figure: Dict[str, Any]) -> str:
    """``figure`` as JSON, checked by plotly's validator (``plotly.io.to_json``): a
    misspelt attribute raises ``ValueError`` here, not silently in the reader's browser."""
    import plotly.io as pio

    return pio.to_json(figure, validate=True, pretty=False, engine="json")


def write_plotly_js(directory: Path) -> Path:
    """``directory/plotly.min.js``: plotly.js as the installed ``plotly`` package ships it
    (``plotly.offline.get_plotlyjs``), written unless a file of the same size is there
    (once per sweep or run dir); returns its path."""
    from plotly.offline import get_plotlyjs

    path = Path(directory) / PLOTLY_JS
    script = get_plotlyjs()
    if not path.exists() or path.stat().st_size != len(script.encode()):
        path.write_text(script)
    return path


def figures_script(figures: Dict[str, Dict[str, Any]]) -> str:
    """The page's figures as one JSON object in a ``<script type="application/json">``:
    name -> plotly spec (``</`` escaped so no string closes the tag)."""
    body = "{" + ",".join(f"{json.dumps(k)}:{figure_json(v)}" for k, v in figures.items()) + "}"
    body = body.replace("</", "<\\/")
    return f'<script type="application/json" id="figures">{body}</script>'
