"""PNG plots of a sweep report: the loss curves and the difference of each job that
drifted, and the effect of each factor.

matplotlib is imported inside the functions (a report without plots never pays for
it) and draws on an Agg canvas: no display, no pyplot global state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Sequence

import numpy as np

from sweep.analysis.grid import label
from sweep.io import read_floats

STATUS_COLOURS = {"ok": "tab:green", "fail": "tab:red", "not judged": "tab:gray"}


def plain(text: str) -> str:
    """``text`` as matplotlib draws it literally: a ``$`` (a command's ``$SWEEP_JOB_DIR``,
    ``${steps}``) would start mathtext, which fails on most shell text."""
    return str(text).replace("$", r"\$")


def tick_label(text: str, width: int = 24, lines: int = 3) -> str:
    """A level's name as an axis tick: whole if at most ``width`` characters, else broken
    after ``.``, ``_``, ``/``, ``=`` or ``,`` into lines of at most ``width`` (a longer
    piece is cut), the last ``lines`` kept (a dotted path's distinguishing end: ``...
    planted_step_faults.ReplicaSumFSDP2``) behind ``…``."""
    text = str(text)
    if len(text) <= width:
        return text
    pieces, piece = [], ""
    for char in text:
        piece += char
        if char in "._/=,":
            pieces.append(piece)
            piece = ""
    pieces.append(piece)
    out, line = [], ""
    for piece in (p for p in pieces if p):
        while len(piece) > width:
            if line:
                out.append(line)
                line = ""
            out.append(piece[:width])
            piece = piece[width:]
        if len(line) + len(piece) > width:
            out.append(line)
            line = ""
        line += piece
    if line:
        out.append(line)
    out = [o for o in out if o]
    return "\n".join((["…" + out[-lines]] + out[-lines + 1:]) if len(out) > lines else out)


def _figure(nrows: int, ncols: int, width: float, height: float, layout: str | None = "constrained") -> tuple:
    """A figure on an Agg canvas and its ``(nrows, ncols)`` array of axes; ``layout=None``:
    fixed margins set by the caller (``subplots_adjust``), a third faster to draw than
    matplotlib's constrained layout (a sweep of many drifting jobs draws one per job)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout=layout)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def plot_job(row: Dict[str, Any], path: Path) -> Path:
    """Three panels for one job (a row of :func:`sweep.report.summary.collect`, whose ``result``
    is a :class:`sweep.records.JobRecord`): both loss curves per step; their difference
    ``distributed - standalone`` with the tolerance band ``±(atol + rtol·|standalone|)``;
    and ``|difference|`` on a log scale next to the tolerance, where a drift far below
    the band is still visible (steps with no difference at all are left out). The first
    failing step is marked. Writes a PNG to ``path``; returns ``path``.

    Raises:
        ValueError: the job has no recorded losses or comparison (an errored job).
    """
    result = row.get("result")
    if result is None or not result.losses or not result.comparison:
        raise ValueError(f"job {row['job']} has no losses to plot (status {row['status']})")
    ref = np.asarray(read_floats(result.losses["standalone"]))
    got = np.asarray(read_floats(result.losses["distributed"]))
    tol = result.comparison["atol"] + result.comparison["rtol"] * np.abs(ref)
    steps = np.arange(ref.size)
    with np.errstate(invalid="ignore"):  # inf - inf in a diverged run: NaN, not drawn
        diff = got - ref
    first = row.get("first_fail_step")
    fig, axes = _figure(3, 1, 8, 8.5, layout=None)
    # fixed margins wide enough for the y-labels: the difference's ticks with an offset
    # exponent (1e-3 above the axis, not 0.0015 on every tick) keep them inside the figure
    fig.subplots_adjust(left=0.14, right=0.97, top=0.93, bottom=0.06, hspace=0.22)
    curves, signed, magnitude = axes[:, 0]
    curves.plot(steps, ref, label="standalone")
    curves.plot(steps, got, label="distributed", linestyle="--")
    curves.set_ylabel("loss")
    curves.legend()
    signed.fill_between(steps, -tol, tol, alpha=0.3, label="tolerance band")
    signed.plot(steps, diff, color="tab:red", label="distributed - standalone")
    signed.axhline(0.0, color="black", linewidth=0.5)
    signed.set_ylabel("difference (loss units)")
    signed.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    signed.legend()
    nonzero = np.isfinite(diff) & (diff != 0)
    held = tol > 0  # a log axis draws no zero: rtol = atol = 0 (any difference fails) has no curve, a label
    if held.any():
        magnitude.plot(steps[held], tol[held], color="tab:blue", label="tolerance atol + rtol·|standalone|")
    else:
        magnitude.plot([], [], " ", label="tolerance 0: any difference fails")
    if nonzero.any():
        magnitude.semilogy(steps[nonzero], np.abs(diff[nonzero]), ".", markersize=3, color="tab:red",
                           label="|distributed - standalone|")
    magnitude.set_yscale("log")
    magnitude.set_xlabel("step")
    magnitude.set_ylabel("|difference| (log)")
    for ax in (signed, magnitude):
        if first is not None:
            ax.axvline(first, color="black", linestyle=":", linewidth=1, label=f"first failing step {first}")
    magnitude.legend(fontsize="small")
    overrides = " ".join(f"{k}={v}" for k, v in row["overrides"].items())
    where = f"first failing step {first}" if first is not None else "within tolerance"
    fig.suptitle(plain(f"job {row['job']} ({row['status']}, {where}): {overrides}"), fontsize="small", wrap=True)
    fig.savefig(path)
    return path


def plot_factor_effects(rows: Sequence[Dict[str, Any]], levels: Sequence[Dict[str, Any]], path: Path) -> Path:
    """One column per factor. Top: jobs per level by outcome (ok, fail, not judged:
    error/timeout/missing), so errored jobs are counted; red means fail and nothing else.
    Bottom: how far the jobs of each level are from standalone, ``max_abs_diff`` (loss
    units, log scale): the worst job and the median job of the level (blue shades), and
    the tolerance at a loss of 1 (``atol + rtol``) as a dotted line; a level whose jobs
    equal standalone bit for bit has no bar. Sizes, not signed means, so levels that drift
    both ways do not cancel. The legend sits below the panels. Writes a PNG to ``path``;
    returns ``path``.

    Raises:
        ValueError: ``levels`` is empty (no factor varies).
    """
    names = list(dict.fromkeys(s["factor"] for s in levels))
    if not names:
        raise ValueError("no factor varies: nothing to plot")
    # at least 7 inches: the title and the legend below the panels fit one factor too
    fig, axes = _figure(2, len(names), max(3.2 * len(names) + 0.6, 7.0), 6.5)
    judged = [r for r in rows if r["status"] in ("ok", "fail") and r.get("max_abs_diff") is not None]
    sizes = [float(r["max_abs_diff"]) for r in judged if float(r["max_abs_diff"]) > 0]
    tol = _tolerance(judged)
    for col, name in enumerate(names):
        stats = [s for s in levels if s["factor"] == name]
        x = np.arange(len(stats))
        ticks = [plain(tick_label(label(s["level"]))) for s in stats]
        top, bottom = axes[0, col], axes[1, col]
        ok = np.array([s["judged"] * (s["pass_rate_pct"] or 0.0) / 100.0 for s in stats])
        fail = np.array([s["judged"] for s in stats]) - ok
        other = np.array([s["not_judged"] for s in stats])
        top.bar(x, ok, color=STATUS_COLOURS["ok"], label="ok")
        top.bar(x, fail, bottom=ok, color=STATUS_COLOURS["fail"], label="fail")
        top.bar(x, other, bottom=ok + fail, color=STATUS_COLOURS["not judged"], label="not judged")
        top.set_xticks(x, ticks, rotation=45, ha="right")
        top.set_ylabel("jobs")
        top.yaxis.get_major_locator().set_params(integer=True)
        top.set_title(plain(name))
        worst, median = [], []
        for s in stats:
            diffs = [float(r["max_abs_diff"]) for r in judged if r["overrides"].get(name) == s["level"]]
            worst.append(max(diffs) if diffs and max(diffs) > 0 else np.nan)
            median.append(float(np.median(diffs)) if diffs and np.median(diffs) > 0 else np.nan)
        bottom.bar(x - 0.2, worst, width=0.4, color="tab:blue", label="worst job")
        bottom.bar(x + 0.2, median, width=0.4, color="lightsteelblue", label="median job")
        if tol:  # (none at rtol = atol = 0: a log axis draws no zero)
            bottom.axhline(tol, color="black", linestyle=":", linewidth=1, label="tolerance at loss 1")
        bottom.set_yscale("log")
        if sizes:
            bottom.set_ylim(min(sizes + ([tol] if tol else [])) / 3, max(sizes + ([tol] if tol else [])) * 3)
        bottom.set_xticks(x, ticks, rotation=45, ha="right")
        bottom.set_ylabel("max |difference|\n(loss, log)" if col == 0 else "")
    handles = [h for ax in (axes[0, 0], axes[1, 0]) for h in ax.get_legend_handles_labels()[0]]
    labels = [lab for ax in (axes[0, 0], axes[1, 0]) for lab in ax.get_legend_handles_labels()[1]]
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize="small")
    fig.suptitle("Factor effects: outcomes per level (top); how far its jobs are from standalone (bottom)",
                 fontsize="small")
    fig.savefig(path)
    return path


def _tolerance(rows: Sequence[Dict[str, Any]]) -> float | None:
    """``atol + rtol`` of the jobs' comparisons (the tolerance at a loss of 1), if known."""
    for row in rows:
        comparison = getattr(row.get("result"), "comparison", None) or {}
        if comparison.get("atol") is not None and comparison.get("rtol") is not None:
            return float(comparison["atol"]) + float(comparison["rtol"])
    return None


def plot_record(record: Any, path: Path) -> Path:
    """:func:`plot_job` of a single run's :class:`sweep.records.JobRecord` (its own dir's
    ``plot.png``); returns ``path``."""
    overrides = dict(str(o).partition("=")[::2] for o in record.overrides)
    row = {"job": "run", "status": record.status, "overrides": overrides, "result": record,
           "first_fail_step": (record.comparison or {}).get("first_fail_step")}
    return plot_job(row, path)


def drifted(row: Dict[str, Any]) -> bool:
    """A job worth a plot: it failed, or it passed with a non-zero difference."""
    result = row.get("result")
    if result is None or not result.losses or not result.comparison:
        return False
    return row["status"] == "fail" or (row.get("max_abs_diff") or 0.0) > 0.0


def write_plots(plot_dir: Path, rows: Sequence[Dict[str, Any]], levels: Sequence[Dict[str, Any]]) -> List[Path]:
    """``plot_dir/job_<num>.png`` for each job that drifted (:func:`drifted`), and
    ``plot_dir/factor_effects.png`` when a factor varies (``levels`` from
    :func:`sweep.analysis.grid.level_stats`). Creates ``plot_dir``; returns the paths written.
    Drawn in this process, one after another: forked workers drew them faster, but a fork of a
    process that holds other threads (a MindSpore sweep's) can deadlock, and one did in CI."""
    plot_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for row in rows:
        if drifted(row):
            paths += _drawn(plot_job, row, plot_dir / f"job_{row['job']}.png")
    if levels:
        paths += _drawn(plot_factor_effects, rows, levels, plot_dir / "factor_effects.png")
    return paths


def _drawn(draw: Any, *args: Any) -> List[Path]:
    """``[draw(*args)]``, or ``[]`` with a warning when matplotlib fails on it: one plot
    never takes the report's tables and files with it."""
    import warnings

    try:
        return [draw(*args)]
    except Exception as exc:  # matplotlib's own errors (a text it cannot lay out, ...)
        warnings.warn(f"{args[-1]}: not drawn ({type(exc).__name__}: {exc})", stacklevel=2)
        return []
