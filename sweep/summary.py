"""The report of a sweep dir: verdict, culprits, per-factor tables, one row per job.

``python -m sweep.summary SWEEP_DIR [--format FMT] [--max-rows N]`` prints the report
of a finished (or interrupted) multirun and writes ``summary.md``, ``summary.csv``,
``summary.json`` and ``plots/`` into it. The end-of-multirun callback calls
:func:`write_report`.

Rows come from each job dir ``SWEEP_DIR/<num>/``: the factors from Hydra's
``.hydra/overrides.yaml`` (written when the job starts) and the metrics from
``result.json`` (only from what it records, so any old sweep re-renders); a job dir
without ``result.json`` is listed with status ``missing``. A *factor* is an override
key whose value is not the same in every job; the analysis is :mod:`sweep.attribution`.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from omegaconf import OmegaConf
from tabulate import tabulate, tabulate_formats

from sweep.attribution import DRIFT_RULE, attribute, drift_class, factors, label
from sweep.compare import drift_metrics
from sweep.io import read_floats, read_json, write_json
from sweep.plots import write_plots

COMPARISON = ("first_fail_step", "n_fail", "max_abs_diff", "max_rel_diff", "mean_signed_diff")
METRICS = (
    "status", "drift", *COMPARISON, "step0_diff", "runs_low_pct", "trend", "final_ratio",
    "ranks_agree", "dtypes_configured", "dtypes_ran", "notes", "wall_s",
)
BRIEF_METRICS = (
    "status", "drift", "first_fail_step", "n_fail", "max_abs_diff", "mean_signed_diff", "step0_diff",
    "runs_low_pct", "notes",
)
LEVEL_COLUMNS = (
    "factor", "level", "jobs", "judged", "not_judged", "pass_rate_pct", "mean_signed_diff", "worst_abs_diff",
)
CONTRAST_COLUMNS = ("factor", "pairs", "flips", "flip_rate_pct", "mean_abs_shift", "max_abs_shift")
MAX_ROWS = 40
STATUS_ORDER = ("fail", "timeout", "error", "missing", "ok")
LEGEND = {
    "drift": DRIFT_RULE,
    "mean_signed_diff": "mean of distributed - standalone over the steps, loss units (negative: distributed runs low)",
    "step0_diff": "distributed - standalone at step 0, before any update",
    "runs_low_pct": "% of steps where distributed < standalone",
    "trend": "least-squares slope of distributed - standalone, loss units per step",
    "final_ratio": "distributed / standalone at the last step",
    "dtypes_configured": "param/reduce/output dtype of the policy (- = default)",
    "dtypes_ran": "param dtype in forward/gradient/output as observed (? = unknown)",
}


def _job_dirs(sweep_dir: Path) -> List[Path]:
    dirs = [p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()]
    return sorted(dirs, key=lambda p: int(p.name))


def _overrides(job_dir: Path) -> Dict[str, str]:
    path = job_dir / ".hydra" / "overrides.yaml"
    return _pairs(OmegaConf.to_container(OmegaConf.load(path))) if path.exists() else {}


def _dtype_name(value: Optional[str], unknown: str) -> str:
    """``torch.bfloat16`` / ``Float32`` / ``float32`` -> ``bfloat16`` / ``float32``."""
    return unknown if value is None else str(value).rsplit(".", 1)[-1].lower()


def _dtypes(record: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """``dtypes_configured``, ``dtypes_ran`` (``a/b/c`` strings) and ``policy_applied``
    (configured ``param_dtype`` == observed ``param_forward``; ``None`` if either is
    unknown) from ``result["dtypes"]``; all ``None`` for results without it."""
    if not record:
        return {"dtypes_configured": None, "dtypes_ran": None, "policy_applied": None}
    configured, observed = record.get("configured") or {}, record.get("observed") or {}
    wanted, ran = configured.get("param_dtype"), observed.get("param_forward")
    return {
        "dtypes_configured": "/".join(
            _dtype_name(configured.get(k), "-") for k in ("param_dtype", "reduce_dtype", "output_dtype")
        ),
        "dtypes_ran": "/".join(_dtype_name(observed.get(k), "?") for k in ("param_forward", "grad", "output")),
        "policy_applied": None if wanted is None or ran is None else _dtype_name(wanted, "") == _dtype_name(ran, ""),
    }


def _result_metrics(result: Dict[str, Any]) -> Dict[str, Any]:
    """The job's metrics from its ``result.json`` record (see :func:`collect`)."""
    comparison = result.get("comparison") or {}
    metrics: Dict[str, Any] = {k: comparison.get(k) for k in COMPARISON}
    for key in ("max_abs_diff", "max_rel_diff", "mean_signed_diff"):  # non-finite floats are stored as strings
        metrics[key] = None if metrics[key] is None else float(metrics[key])
    if result.get("comparison") and result.get("losses"):
        losses = result["losses"]
        metrics.update(drift_metrics(read_floats(losses["standalone"]), read_floats(losses["distributed"])))
    metrics["ranks_agree"] = result.get("ranks_agree")
    metrics["wall_s"] = result.get("timings_s", {}).get("wall")
    metrics.update(_dtypes(result.get("dtypes")))
    return metrics


def _notes(row: Dict[str, Any]) -> Optional[str]:
    notes = []
    if row["ranks_agree"] is False:
        notes.append("ranks disagree")
    if row["policy_applied"] is False:
        notes.append(f"policy not applied (configured/ran {row['dtypes_configured']} vs {row['dtypes_ran']})")
    engine = (row.get("result") or {}).get("engine")
    if engine:  # the engine's own record: API that ran, workarounds, emulated collectives
        from sweep.engines.hyper_parallel import short_notes

        notes.extend(short_notes(engine))
    return "; ".join(notes) or None


def _pairs(overrides: Sequence[str]) -> Dict[str, str]:
    """``["a=1", "+b=2"]`` -> ``{"a": "1", "b": "2"}``."""
    pairs = {}
    for item in overrides:
        key, _, value = str(item).partition("=")
        pairs[key.lstrip("+~")] = value
    return pairs


def planned_overrides(hydra_cfg: Any) -> Optional[List[List[str]]]:
    """The override list of every job of a multirun, in job order, as Hydra's basic
    sweeper forms them from the ``hydra`` config node (``hydra.sweeper.params`` then the
    command-line overrides, which replace a key's grid); ``None`` for another sweeper."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if not str(hydra_cfg.sweeper.get("_target_", "")).endswith("BasicSweeper"):
        return None
    params = hydra_cfg.sweeper.get("params") or {}
    arguments = [f"{k}={v}" for k, v in params.items()] + list(hydra_cfg.overrides.task)
    overrides = OverridesParser.create().parse_overrides(arguments)
    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


def planned_jobs(sweep_dir: Path | str) -> Optional[List[List[str]]]:
    """:func:`planned_overrides` of the multirun in ``sweep_dir`` (its ``multirun.yaml``,
    which Hydra writes before the first job); ``None`` without it."""
    path = Path(sweep_dir) / "multirun.yaml"
    hydra_cfg = OmegaConf.load(path).get("hydra") if path.exists() else None
    return planned_overrides(hydra_cfg) if hydra_cfg is not None else None


def collect(sweep_dir: Path | str) -> List[Dict[str, Any]]:
    """One dict per job, in job order: every job dir, and every job the multirun planned
    (:func:`planned_jobs`) even if it never started. ``job`` (its number), ``overrides`` (key ->
    value), the metrics of :data:`METRICS` (``None`` where not applicable: errored jobs
    have no losses, older results no ``dtypes``), ``policy_applied``, ``reason`` and
    ``result`` (the full ``result.json`` record, or ``None`` if missing or unreadable).

    Raises:
        FileNotFoundError: ``sweep_dir`` does not exist.
    """
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise FileNotFoundError(f"no sweep dir {sweep_dir}")
    expected = planned_jobs(sweep_dir)
    if not (sweep_dir / "multirun.yaml").exists() and not _job_dirs(sweep_dir):
        raise FileNotFoundError(
            f"{sweep_dir} is not a multirun dir (no multirun.yaml, no numbered job dirs); "
            "a single run's verdict is in its result.json"
        )
    dirs = {int(p.name): p for p in _job_dirs(sweep_dir)}
    rows = []
    for num in sorted(set(dirs) | set(range(len(expected or [])))):
        job_dir = dirs.get(num, sweep_dir / str(num))
        overrides = _overrides(job_dir) or (_pairs(expected[num]) if expected and num < len(expected) else {})
        row: Dict[str, Any] = {"job": num, "overrides": overrides, "policy_applied": None}
        row.update({k: None for k in METRICS})
        result_path = job_dir / "result.json"
        try:
            result = read_json(result_path) if result_path.exists() else None
        except ValueError as exc:
            result = None
            row["reason"] = f"unreadable result.json: {exc}"
        row["result"] = result
        if result is None:
            row["status"] = "missing"
            row.setdefault(
                "reason",
                "no result.json (still running or killed)" if job_dir.exists() else "never started (no job dir)",
            )
        else:
            row.update(_result_metrics(result), status=result["status"], reason=result.get("reason"))
            if not row["overrides"]:
                row["overrides"] = _pairs(result.get("overrides", []))
        row["drift"] = drift_class(row)
        row["notes"] = _notes(row)
        rows.append(row)
    return rows


def table_rows(rows: Sequence[Dict[str, Any]], metrics: Sequence[str] = METRICS) -> Tuple[List[str], List[List[Any]]]:
    """Header and cell values, one row per job in the given order: job, each factor, then ``metrics``."""
    keys = factors(rows)
    header = ["job", *keys, *metrics]
    body = [[row["job"], *(row["overrides"].get(k, "") for k in keys), *(row[m] for m in metrics)] for row in rows]
    return header, body


def _fmt(value: Any) -> Any:
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.3g}"
    return "" if value is None else value


def _failing_first(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Fail, timeout, error, missing, then ok; within a status the largest drift first."""
    def key(row: Dict[str, Any]) -> tuple:
        size = row["max_abs_diff"] if row["max_abs_diff"] is not None and not math.isnan(row["max_abs_diff"]) else 0.0
        return STATUS_ORDER.index(row["status"]), -size, row["job"]

    return sorted(rows, key=key)


def _table(header: Sequence[str], body: Sequence[Sequence[Any]], tablefmt: str, max_rows: Optional[int]) -> str:
    """Tabulated, without columns that are empty in every row, cut after ``max_rows`` rows
    (``None``: all) with a line pointing to the full files."""
    keep = [i for i, column in enumerate(zip(header, *body)) if any(v not in (None, "") for v in column[1:])]
    shown = body if max_rows is None else body[:max_rows]
    text = tabulate(
        [[_fmt(r[i]) for i in keep] for r in shown], headers=[header[i] for i in keep], tablefmt=tablefmt,
        disable_numparse=True,
    )
    if len(shown) < len(body):
        text += f"\n... {len(body) - len(shown)} more rows: see summary.md / summary.csv / summary.json"
    return text


def _legend(metrics: Sequence[str]) -> str:
    """The meaning of each of ``metrics`` that has an entry in :data:`LEGEND`, wrapped."""
    return "\n".join(
        textwrap.fill(f"- {m}: {LEGEND[m]}", width=100, subsequent_indent="  ") for m in metrics if m in LEGEND
    )


def _listing(lines: Sequence[str], max_rows: Optional[int], empty: str, numbered: bool = False) -> str:
    """Lines as a bulleted (or numbered) list, ``empty`` if none, cut like :func:`_table`."""
    if not lines:
        return empty
    shown = lines if max_rows is None else lines[:max_rows]
    text = "\n".join(f"{i}. {line}" if numbered else f"- {line}" for i, line in enumerate(shown, 1))
    if len(shown) < len(lines):
        text += f"\n... {len(lines) - len(shown)} more: see summary.md / summary.json"
    return text


def _factor_tables(att: Dict[str, Any], tablefmt: str, max_rows: Optional[int]) -> Tuple[str, str]:
    """The factor-level and one-factor-contrast tables, the factors that flip pass/fail
    most often first (so the culprit's levels lead even when the table is cut)."""
    if not att["factors"]:
        return "no factor varies", "no factor varies"
    ordered = sorted(att["contrasts"], key=lambda c: -(c["flip_rate_pct"] or 0.0))
    rank = {c["factor"]: i for i, c in enumerate(ordered)}
    levels = sorted(att["levels"], key=lambda s: rank[s["factor"]])
    level_body = [[label(s[k]) if k == "level" else s[k] for k in LEVEL_COLUMNS] for s in levels]
    contrast_body = [[c[k] for k in CONTRAST_COLUMNS] for c in ordered]
    return (
        _table(LEVEL_COLUMNS, level_body, tablefmt, max_rows),
        _table(CONTRAST_COLUMNS, contrast_body, tablefmt, max_rows),
    )


def _sections(
    rows: Sequence[Dict[str, Any]], att: Dict[str, Any], tablefmt: str, max_rows: Optional[int], metrics: Sequence[str]
) -> List[Tuple[str, str]]:
    """``(title, body)`` of each report section after the verdict."""
    levels, contrasts = _factor_tables(att, tablefmt, max_rows)
    header, body = table_rows(_failing_first(rows), metrics)
    not_judged = [f"job {j['job']} {j['status']}: {j['reason'] or 'no reason recorded'}" for j in att["not_judged"]]
    return [
        ("Culprits (ranked by one-factor flips)",
         _listing([c["evidence"] for c in att["culprits"]], max_rows, "none", numbered=True)),
        ("Factor levels (pass rate over judged jobs: ok/fail; not_judged = error/timeout/missing)", levels),
        ("One-factor contrasts (pairs of judged jobs differing in that factor alone)", contrasts),
        ("Interactions", _listing([i["evidence"] for i in att["interactions"]], max_rows, "none")),
        ("Jobs (failing first)", _table(header, body, tablefmt, max_rows) + "\n\n" + _legend(metrics)),
        ("Not judged (excluded from pass rates)", _listing(not_judged, max_rows, "none")),
    ]


def render(
    rows: Sequence[Dict[str, Any]], tablefmt: str = "simple", max_rows: Optional[int] = MAX_ROWS,
    att: Optional[Dict[str, Any]] = None,
) -> str:
    """The terminal report: the verdict, then culprits, factor tables, interactions, the
    jobs (:data:`BRIEF_METRICS`, failing first) and the jobs not judged, every list cut
    after ``max_rows`` (``None``: all). Tables in any tabulate format (``simple``,
    ``github``, ``grid``, ...). ``att`` is :func:`sweep.attribution.attribute` of ``rows``
    (computed when not given)."""
    att = att or attribute(rows)
    parts = [att["verdict"]]
    parts += [f"{title}:\n{body}" for title, body in _sections(rows, att, tablefmt, max_rows, BRIEF_METRICS)]
    return "\n\n".join(parts)


def render_markdown(
    sweep_dir: Path, rows: Sequence[Dict[str, Any]], att: Dict[str, Any], plots: Sequence[Path]
) -> str:
    """``summary.md``: the same sections as :func:`render`, complete, with every metric,
    and links to the ``plots`` (paths under ``sweep_dir``)."""
    parts = [f"# Sweep {sweep_dir}", att["verdict"]]
    parts += [f"## {title}\n\n{body}" for title, body in _sections(rows, att, "github", None, METRICS)]
    links = [f"[{p.stem}]({p.relative_to(sweep_dir)})" for p in plots]
    parts.append("## Plots\n\n" + (", ".join(links) if links else "none"))
    return "\n\n".join(parts) + "\n"


def to_csv(rows: Sequence[Dict[str, Any]]) -> str:
    """One row per job in job order: job, each factor, every column of :data:`METRICS`."""
    header, body = table_rows(rows)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows([["" if v is None else v for v in r] for r in body])
    return buf.getvalue()


def write_report(sweep_dir: Path | str, tablefmt: str = "simple", max_rows: Optional[int] = MAX_ROWS) -> str:
    """Write ``summary.md``, ``summary.csv``, ``summary.json`` and ``plots/*.png`` into
    ``sweep_dir``; returns the terminal report (:func:`render`).

    ``summary.json`` keys: ``sweep_dir``, ``verdict``, ``factors``, ``counts`` (status ->
    jobs), ``judged``, ``not_judged`` (``[{job, status, reason}]``), ``culprits``,
    ``interactions``, ``levels``, ``contrasts``, ``drift`` (class -> job numbers),
    ``drift_rule`` (all as in :func:`sweep.attribution.attribute`), ``plots`` (paths
    relative to ``sweep_dir``) and ``jobs`` (``[{job, overrides, status, reason,
    policy_applied, metrics of METRICS...}]``; the loss sequences stay in each job's
    ``result.json``).

    Raises:
        FileNotFoundError: ``sweep_dir`` does not exist.
    """
    sweep_dir = Path(sweep_dir)
    rows = collect(sweep_dir)
    att = attribute(rows)
    plots = write_plots(sweep_dir / "plots", rows, att["levels"])
    (sweep_dir / "summary.md").write_text(render_markdown(sweep_dir, rows, att, plots))
    (sweep_dir / "summary.csv").write_text(to_csv(rows))
    write_json(
        sweep_dir / "summary.json",
        {
            "sweep_dir": str(sweep_dir),
            **att,
            "plots": [str(p.relative_to(sweep_dir)) for p in plots],
            "jobs": [{k: v for k, v in row.items() if k != "result"} for row in rows],
        },
    )
    return render(rows, tablefmt, max_rows, att)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sweep.summary", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="a multirun dir, e.g. outputs/multirun/2026-11-30_10-00-00")
    parser.add_argument("--format", default="simple", choices=tabulate_formats, metavar="FORMAT",
                        help="tabulate table format: simple, github, grid, ... (any of tabulate.tabulate_formats)")
    parser.add_argument(
        "--max-rows", type=int, default=MAX_ROWS, help=f"rows per table and list on screen (default {MAX_ROWS}; 0: all)"
    )
    args = parser.parse_args(argv)
    try:
        print(write_report(args.sweep_dir, args.format, args.max_rows or None))
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"\nwritten: {args.sweep_dir / 'summary.md'}, summary.csv, summary.json, plots/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
