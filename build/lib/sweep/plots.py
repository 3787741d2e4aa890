"""PNG plots of a sweep report: the loss curves of each failing job, and the effect of
each factor.

matplotlib is imported inside the functions (a report without plots never pays for
it) and draws on an Agg canvas: no display, no pyplot global state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Sequence

import numpy as np

from sweep.attribution import label
from sweep.io import read_floats


def _figure(nrows: int, ncols: int, width: float, height: float) -> tuple:
    """A figure on an Agg canvas and its ``(nrows, ncols)`` array of axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def plot_job(row: Dict[str, Any], path: Path) -> Path:
    """Two panels for one job (a row of :func:`sweep.summary.collect`, whose ``result`` is
    a :class:`sweep.records.JobRecord`): both loss curves
    per step, and their difference ``distributed - standalone`` with the tolerance band
    ``±(atol + rtol·|standalone|)``. Writes a PNG to ``path``; returns ``path``.

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
    fig, axes = _figure(2, 1, 8, 6)
    curves, diff = axes[:, 0]
    curves.plot(steps, ref, label="standalone")
    curves.plot(steps, got, label="distributed", linestyle="--")
    curves.set_ylabel("loss")
    curves.legend()
    diff.fill_between(steps, -tol, tol, alpha=0.3, label="tolerance")
    diff.plot(steps, got - ref, color="tab:red", label="distributed - standalone")
    diff.axhline(0.0, color="black", linewidth=0.5)
    diff.set_xlabel("step")
    diff.set_ylabel("difference")
    diff.legend()
    overrides = " ".join(f"{k}={v}" for k, v in row["overrides"].items())
    fig.suptitle(f"job {row['job']} ({row['status']}, first fail step {row['first_fail_step']}): {overrides}",
                 fontsize="small", wrap=True)
    fig.savefig(path)
    return path


def plot_factor_effects(levels: Sequence[Dict[str, Any]], path: Path) -> Path:
    """One column per factor, one bar per level: pass rate in % (top) and mean signed
    difference in loss units (bottom, red when negative: distributed runs low), from
    :func:`sweep.attribution.level_stats`. Each level is labelled with its number of
    judged jobs; levels without any have no bar. Writes a PNG to ``path``; returns ``path``.

    Raises:
        ValueError: ``levels`` is empty (no factor varies).
    """
    names = list(dict.fromkeys(s["factor"] for s in levels))
    if not names:
        raise ValueError("no factor varies: nothing to plot")
    fig, axes = _figure(2, len(names), 3.2 * len(names), 6)
    for col, name in enumerate(names):
        stats = [s for s in levels if s["factor"] == name]
        ticks = [f"{label(s['level'])} (n={s['judged']})" for s in stats]
        for ax, key, ylabel in ((axes[0, col], "pass_rate_pct", "pass rate (%)"),
                                (axes[1, col], "mean_signed_diff", "mean signed diff")):
            values = np.array([np.nan if s[key] is None else s[key] for s in stats])
            ax.bar(np.arange(len(stats)), values, color=np.where(values < 0, "tab:red", "tab:blue"))
            ax.set_xticks(np.arange(len(stats)), ticks, rotation=45, ha="right")
            ax.set_ylabel(ylabel)
        axes[0, col].set_ylim(0, 100)
        axes[0, col].set_title(name)
        axes[1, col].axhline(0.0, color="black", linewidth=0.5)
    fig.savefig(path)
    return path


def write_plots(plot_dir: Path, rows: Sequence[Dict[str, Any]], levels: Sequence[Dict[str, Any]]) -> List[Path]:
    """``plot_dir/job_<num>.png`` for each failing job whose result holds its losses, and
    ``plot_dir/factor_effects.png`` when a factor varies (``levels`` from
    :func:`sweep.attribution.level_stats`). Creates ``plot_dir``; returns the paths written."""
    plot_dir.mkdir(parents=True, exist_ok=True)
    failing = [r for r in rows if r["status"] == "fail" and r["result"] is not None and r["result"].losses]
    paths = [plot_job(row, plot_dir / f"job_{row['job']}.png") for row in failing]
    if levels:
        paths.append(plot_factor_effects(levels, plot_dir / "factor_effects.png"))
    return paths
