"""Interactive charts of the report's pages (``summary.html``, a run's ``report.html``),
drawn by plotly.js in the browser from figure specs built here.

A spec is plotly's figure JSON (``{"data": [...], "layout": {...}}``, checked by plotly's
own validator when it is serialised: :func:`figure_json`); the page loads
``plotly.min.js`` from beside itself (:func:`write_plotly_js`: a hard link to the file the
``plotly`` package ships, no copy), so the page works from a file, offline
and as a CI artifact, and stays small: the script is about 4.8 MB, the specs of the default
grid about 0.3 MB.

The charts:

- :func:`curves_figure`: ``distributed - standalone`` per step of every job on one chart,
  one line per job (click its legend entry to show or hide it; hover reads the step,
  both losses and the difference), against the tolerance band ``±(atol + rtol·|standalone|)``
  of ``numpy.isclose`` (the narrowest over the jobs at each step, so a line outside it fails).
- :func:`levels_figure`: a factor × level view: the pass rate of each level's judged jobs
  (%) beside its worst ``max_abs_diff`` (log scale), from
  :func:`sweep.analysis.grid.level_stats`.
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


def _envelope(row: Dict[str, Any]) -> Optional[tuple]:
    """``(per-step envelope E_t, margin, dtype, source)`` of a row's measured rounding envelope
    (``JobRecord.envelope``, ``sweep.analysis.envelope``), ``None`` where it was not measured."""
    found = getattr(row.get("result"), "envelope", None) or {}
    if not found.get("measured") or not found.get("envelope"):
        return None
    env = [float(v) for v in found["envelope"]]
    return env, float(found.get("margin") or 1.0), found.get("dtype"), found.get("source")


def envelope_figure(rows: Sequence[Dict[str, Any]], keys: Sequence[str], budget: int = POINTS_BUDGET
                    ) -> Optional[Dict[str, Any]]:
    """Every job's difference in units of its own rounding envelope (``(distributed -
    standalone) / E_t``, ``E_t`` the twin's measured envelope, ``sweep.analysis.envelope``)
    against the band ``±margin`` (``compare.envelope_margin``): inside it a job differs by float
    rounding, outside it by a cause. Trace 0 and 1 are the band's edges, then one line per
    job that differs and whose envelope was measured, coloured by status. ``None`` when no job
    has both."""
    jobs = [(row, found, env) for row in rows if (found := _losses(row)) is not None
            and (env := _envelope(row)) is not None and row.get("first_diff_step") is not None]
    if not jobs:
        return None
    margin = max(env[1] for _, _, env in jobs)
    longest = max(len(found[0]) for _, found, _ in jobs)
    per_job = max(MIN_POINTS, budget // max(1, len(jobs)))
    data: List[Dict[str, Any]] = [
        {"type": "scatter", "mode": "lines", "x": [0, longest - 1], "y": [margin, margin], "line": {"width": 0},
         "hoverinfo": "skip", "showlegend": False, "legendgroup": "band"},
        {"type": "scatter", "mode": "lines", "x": [0, longest - 1], "y": [-margin, -margin], "line": {"width": 0},
         "fill": "tonexty", "fillcolor": "rgba(233,196,106,0.25)", "legendgroup": "band", "hoverinfo": "skip",
         "name": f"rounding: within ±{margin:g} x the twin's envelope"},
    ]
    for row, (ref, got, cmp), (env, _, dtype, source) in jobs:
        units = [_diff(a, b) / e if e > 0 and math.isfinite(e) else (0.0 if _diff(a, b) == 0 else math.nan)
                 for a, b, e in zip(ref, got, env)]
        finite = [abs(u) if math.isfinite(u) else -1.0 for u in units]
        worst = max(range(len(units)), key=finite.__getitem__) if units else None
        steps = keep_steps(len(units), per_job, (worst,))
        status = row.get("status")
        data.append({
            "type": "scatter", "mode": "lines", "name": job_name(row, keys), "meta": row["job"],
            "x": steps, "y": [_num(units[i], 4) for i in steps],
            "line": {"width": 1.4, "color": COLOURS.get(status, COLOURS["other"])}, "opacity": 0.9,
            "legendgroup": f"job{row['job']}",
            "hovertemplate": (f"<b>{job_name(row, keys, width=120, named=True)}</b> ({status}; envelope {dtype}, "
                              f"{source})<br>step %{{x}}<br>diff / envelope %{{y:.3g}}<extra></extra>"),
        })
    layout = {
        "title": {"text": "distributed − standalone in units of each job's rounding envelope", "font": {"size": 14}},
        "xaxis": {"title": {"text": "step"}, "range": [0, max(longest - 1, 1)]},
        "yaxis": {"title": {"text": "difference / envelope"}, "zeroline": True},
        "height": 420, "margin": {"l": 70, "r": 20, "t": 40, "b": 50},
        "legend": {"font": {"size": 10}}, "hovermode": "closest",
    }
    return {"data": data, "layout": layout}


def levels_figure(levels: Sequence[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """Factor × level: one row per ``factor=level`` (``levels`` from
    :func:`sweep.analysis.grid.level_stats`): its pass rate over judged jobs (%, a
    bar, left, labelled with its rate: a 0 % level is a labelled, outlined stub at the axis,
    a level without judged jobs is labelled ``not judged``) and its worst ``max_abs_diff``
    (loss units, a dot on a log scale, right; a level with no difference at all has no
    dot); hover gives the whole names and the job counts. ``None`` without levels."""
    if not levels:
        return None
    names = [f"{short(s['factor'].rsplit('.', 1)[-1], 20)}={short(s['level'], 20)}" for s in levels]
    full = [[f"{s['factor']}={s['level']}", s["jobs"], s["judged"]] for s in levels]
    rates = [s["pass_rate_pct"] for s in levels]
    worst = [s["worst_abs_diff"] if s["worst_abs_diff"] and s["worst_abs_diff"] > 0 else None for s in levels]
    colours = ["#d62828" if r is not None and r < 100 else "#2a9d8f" for r in rates]
    hover = "%{customdata[0]}<br>%{customdata[1]} jobs, %{customdata[2]} judged<br>"
    # Every bar is labelled with its rate, so a level whose judged jobs all fail shows "0%"
    # at the axis (a bar of no length, outlined) where a level that never ran shows
    # "not judged": the two never look alike.
    labels = [f"{r:.0f}%" if r is not None else "not judged" for r in rates]
    data = [
        {"type": "bar", "orientation": "h", "y": names, "x": [0 if r is None else r for r in rates],
         "customdata": full, "name": "pass rate", "text": labels, "cliponaxis": False,
         "textposition": ["outside" if not r else "auto" for r in rates],
         "textfont": {"size": 11}, "insidetextanchor": "end",
         "marker": {"color": colours, "line": {"color": colours, "width": [3 if r == 0 else 0 for r in rates]}},
         "xaxis": "x", "yaxis": "y", "hovertemplate": hover + "pass rate %{text}<extra></extra>"},
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
    against the tolerance band and, where measured, the rounding envelope's band ``±margin x
    E_t`` (``sweep.analysis.envelope``: inside it float rounding) (bottom); hover reads each
    step. ``None`` without losses."""
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
    env = _envelope(row)
    if env is not None:
        bound = [_num(env[1] * env[0][i], 4) if i < len(env[0]) else None for i in steps]
        data += [
            {"type": "scatter", "mode": "lines", "x": steps, "y": bound, "line": {"width": 0}, "xaxis": "x2",
             "yaxis": "y2", "hoverinfo": "skip", "showlegend": False, "legendgroup": "envelope"},
            {"type": "scatter", "mode": "lines", "x": steps, "y": [None if b is None else -b for b in bound],
             "line": {"width": 0}, "fill": "tonexty", "fillcolor": "rgba(233,196,106,0.35)", "xaxis": "x2",
             "yaxis": "y2", "hoverinfo": "skip", "legendgroup": "envelope",
             "name": f"rounding envelope x{env[1]:g} ({env[2] or env[3]})"},
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


def package_plotly_js() -> Optional[Path]:
    """The ``plotly.min.js`` file the installed ``plotly`` package ships
    (``plotly/package_data/``, what ``plotly.offline.get_plotlyjs`` reads), or ``None``
    where it is no plain file (a package inside a zip)."""
    from importlib import resources

    try:
        path = Path(str(resources.files("plotly").joinpath("package_data", PLOTLY_JS)))
    except (ModuleNotFoundError, TypeError):
        return None
    return path if path.is_file() else None


def write_plotly_js(directory: Path) -> Path:
    """``directory/plotly.min.js``: plotly.js as the installed ``plotly`` package ships it, as
    a hard link to the package's own file, so a run or sweep dir holds no 4.8 MB copy of its
    own and the page still opens offline, and from a copy of the dir (a link is a file); a
    copy (``plotly.offline.get_plotlyjs``) only where no link can be made (another
    filesystem, a package file this user may not link). Left as it is when it already is
    that file, or a copy of its size; returns its path."""
    import os

    from plotly.offline import get_plotlyjs

    path = Path(directory) / PLOTLY_JS
    source = package_plotly_js()
    if path.exists():
        if source is not None and os.path.samefile(path, source):
            return path
        if path.stat().st_size == (source.stat().st_size if source is not None else len(get_plotlyjs().encode())):
            return path
        path.unlink()
    if source is not None:
        try:
            os.link(source, path)
            return path
        except FileExistsError:  # another writer of the same dir linked it first
            return path
        except OSError:  # another filesystem, or protected_hardlinks: a copy
            pass
    path.write_text(get_plotlyjs())
    return path


NARROW_PX = 600  # a chart narrower than this (a phone: 390 px) is drawn with its narrow patch
MAX_LEGEND_NARROW = 6  # legend entries a narrow chart keeps, below the plot; more: none (hover names each line)


def _merge(base: Any, patch: Any) -> Any:
    """``patch`` laid over ``base``: dicts key by key (recursively), anything else replaced;
    as the page's script merges them (``sweep/report/assets/page.js``)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        return {**base, **{k: _merge(base.get(k), v) for k, v in patch.items()}}
    return patch


def narrow_patch(figure: Dict[str, Any]) -> Dict[str, Any]:
    """How ``figure`` is drawn in a chart narrower than :data:`NARROW_PX` (a phone):
    ``{"layout": {...}, "data": [{...} per trace]}``, laid over the figure by
    :func:`_merge`. No title (the block's heading names the chart), small margins that grow
    to fit the tick labels (``automargin``); the legend below the plot, or none when it has
    more than :data:`MAX_LEGEND_NARROW` entries (a grid's jobs: hover names each line, the
    table's filters pick them); panels side by side (two x axes with domains over one y
    axis, the factor chart) stacked, one under the other, so no axis title crosses the
    other's."""
    layout = figure.get("layout") or {}
    data = figure.get("data") or []
    patch: Dict[str, Any] = {"title": {"text": ""}, "margin": {"l": 8, "r": 8, "t": 10, "b": 8}}
    for key in layout:
        if key.startswith(("xaxis", "yaxis")):
            patch[key] = {"automargin": True, "title": {"font": {"size": 11}}}
        if key.startswith("xaxis"):  # a few ticks (labels like 2.2e−5 side by side need room), set below the
            # axis by an invisible tick, clear of the lowest y label at the corner
            patch[key].update(nticks=4, ticks="outside", ticklen=6, tickcolor="rgba(0,0,0,0)")
    entries = [t for t in data if t.get("showlegend", True) and t.get("name")]
    if layout.get("showlegend") is not False:
        if len(entries) > MAX_LEGEND_NARROW:
            patch["showlegend"] = False
        else:
            patch["legend"] = {"orientation": "h", "x": 0, "xanchor": "left", "y": 0, "yanchor": "bottom",
                               "yref": "container", "font": {"size": 10}}
            patch["margin"]["b"] = 30 + 18 * len(entries)
    traces: List[Dict[str, Any]] = [{} for _ in data]
    x, x2 = layout.get("xaxis") or {}, layout.get("xaxis2") or {}
    if "domain" in x and "domain" in x2 and not layout.get("grid") and all(t.get("yaxis", "y") == "y" for t in data):
        categories = len({str(v) for t in data for v in (t.get("y") or [])})
        patch["height"] = 2 * (26 * categories + 40) + 90
        patch["xaxis"] = _merge(patch.get("xaxis", {}), {"domain": [0, 1], "anchor": "y"})
        patch["xaxis2"] = _merge(patch.get("xaxis2", {}), {"domain": [0, 1], "anchor": "y2"})
        patch["yaxis"] = _merge(patch.get("yaxis", {}), {"domain": [0.56, 1]})
        patch["yaxis2"] = _merge(layout.get("yaxis") or {}, {"domain": [0, 0.44], "anchor": "x2", "automargin": True})
        traces = [{"yaxis": "y2"} if t.get("xaxis") == "x2" else {} for t in data]
    return {"layout": patch, "data": traces}


def figures_script(figures: Dict[str, Dict[str, Any]]) -> str:
    """The page's figures as one JSON object in a ``<script type="application/json">``:
    name -> plotly spec, each with its ``narrow`` patch (:func:`narrow_patch`; the spec with
    it laid over is checked by plotly's validator too), ``</`` escaped so no string closes
    the tag."""
    parts = []
    for name, figure in figures.items():
        patch = narrow_patch(figure)
        figure_json({"data": [_merge(t, p) for t, p in zip(figure["data"], patch["data"])],
                     "layout": _merge(figure.get("layout") or {}, patch["layout"])})  # the narrow page's, checked
        parts.append(f"{json.dumps(name)}:{figure_json(figure)[:-1]},\"narrow\":{json.dumps(patch)}}}")
    body = ("{" + ",".join(parts) + "}").replace("</", "<\\/")
    return f'<script type="application/json" id="figures">{body}</script>'
