"""PNG plots of a sweep report: the loss curves and the difference of each job that
drifted, and the effect of each factor.

matplotlib is imported inside the functions (a report without plots never pays for
it) and draws on an Agg canvas: no display, no pyplot global state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Sequence

import numpy as np

from sweep.analysis.attribution import label, level_shifts
from sweep.io import read_floats

STATUS_COLOURS = {"ok": "tab:green", "fail": "tab:red", "not judged": "tab:gray"}


def _figure(nrows: int, ncols: int, width: float, height: float) -> tuple:
    """A figure on an Agg canvas and its ``(nrows, ncols)`` array of axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
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
    diff = got - ref
    first = row.get("first_fail_step")
    fig, axes = _figure(3, 1, 8, 8.5)
    curves, signed, magnitude = axes[:, 0]
    curves.plot(steps, ref, label="standalone")
    curves.plot(steps, got, label="distributed", linestyle="--")
    curves.set_ylabel("loss")
    curves.legend()
    signed.fill_between(steps, -tol, tol, alpha=0.3, label="tolerance band")
    signed.plot(steps, diff, color="tab:red", label="distributed - standalone")
    signed.axhline(0.0, color="black", linewidth=0.5)
    signed.set_ylabel("difference (loss units)")
    signed.legend()
    nonzero = np.isfinite(diff) & (diff != 0)
    magnitude.plot(steps, tol, color="tab:blue", label="tolerance atol + rtol·|standalone|")
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
    fig.suptitle(f"job {row['job']} ({row['status']}, first failing step {first}): {overrides}",
                 fontsize="small", wrap=True)
    fig.savefig(path)
    return path


def plot_factor_effects(rows: Sequence[Dict[str, Any]], levels: Sequence[Dict[str, Any]], path: Path) -> Path:
    """One column per factor. Top: jobs per level by outcome (ok, fail, not judged:
    error/timeout/missing), so errored jobs are counted. Bottom: the effect of each level
    within its one-factor pairs (:func:`sweep.analysis.attribution.level_shifts`: the mean change
    of the mean signed difference, loss units, when only this factor changes to this
    level), labelled with how many of those pairs flip pass to fail; a level with no
    pair has no bar. Writes a PNG to ``path``; returns ``path``.

    Raises:
        ValueError: ``levels`` is empty (no factor varies).
    """
    names = list(dict.fromkeys(s["factor"] for s in levels))
    if not names:
        raise ValueError("no factor varies: nothing to plot")
    shifts = {(s["factor"], s["level"]): s for s in level_shifts(rows)}
    fig, axes = _figure(2, len(names), 3.4 * len(names), 6.5)
    for col, name in enumerate(names):
        stats = [s for s in levels if s["factor"] == name]
        x = np.arange(len(stats))
        ticks = [label(s["level"]) for s in stats]
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
        top.set_title(name)
        effects = [shifts.get((name, s["level"])) for s in stats]
        values = np.array([np.nan if e is None or e["mean_shift"] is None else e["mean_shift"] for e in effects])
        bottom.bar(x, values, color=np.where(values < 0, "tab:red", "tab:blue"))
        for i, e in enumerate(effects):
            if e is not None:
                bottom.annotate(f"{e['to_fail']}/{e['pairs']} flip to fail", (i, 0), ha="center",
                                va="bottom", fontsize="x-small", rotation=90)
        bottom.set_xticks(x, ticks, rotation=45, ha="right")
        bottom.set_ylabel("Δ mean signed diff\nwithin one-factor pairs (loss)")
        bottom.axhline(0.0, color="black", linewidth=0.5)
    axes[0, 0].legend(fontsize="small")
    fig.suptitle("Factor effects: outcomes per level (top); the change when only this factor changes (bottom)",
                 fontsize="small")
    fig.savefig(path)
    return path


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
    :func:`sweep.analysis.attribution.level_stats`). Creates ``plot_dir``; returns the paths written."""
    plot_dir.mkdir(parents=True, exist_ok=True)
    paths = [plot_job(row, plot_dir / f"job_{row['job']}.png") for row in rows if drifted(row)]
    if levels:
        paths.append(plot_factor_effects(rows, levels, plot_dir / "factor_effects.png"))
    return paths
