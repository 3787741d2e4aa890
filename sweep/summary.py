"""The summary table of a sweep dir: one row per job, re-renderable at any time.

``python -m sweep.summary SWEEP_DIR [--format FMT]`` prints the table of a finished
(or interrupted) multirun and writes ``summary.md``, ``summary.csv`` and
``summary.json`` into it. The end-of-multirun callback calls :func:`write_report`.

Rows come from each job dir ``SWEEP_DIR/<num>/``: the factors from Hydra's
``.hydra/overrides.yaml`` (written when the job starts) and the metrics from
``result.json``; a job dir without ``result.json`` is listed with status ``missing``.
A *factor* is an override key whose value is not the same in every job.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Sequence

from omegaconf import OmegaConf
from tabulate import tabulate

from sweep.io import read_json, write_json

METRICS = ("status", "first_fail_step", "n_fail", "max_abs_diff", "max_rel_diff", "mean_signed_diff", "wall_s")


def _job_dirs(sweep_dir: Path) -> List[Path]:
    dirs = [p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()]
    return sorted(dirs, key=lambda p: int(p.name))


def _overrides(job_dir: Path) -> Dict[str, str]:
    path = job_dir / ".hydra" / "overrides.yaml"
    if not path.exists():
        return {}
    pairs = {}
    for item in OmegaConf.to_container(OmegaConf.load(path)):
        key, _, value = str(item).partition("=")
        pairs[key.lstrip("+~")] = value
    return pairs


def collect(sweep_dir: Path | str) -> List[Dict[str, Any]]:
    """One dict per job dir: ``job`` (its number), ``overrides`` (key -> value), the
    metrics of :data:`METRICS` (``None`` where not applicable), ``reason`` and ``result``
    (the full ``result.json`` record, or ``None`` if missing or unreadable).

    Raises:
        FileNotFoundError: ``sweep_dir`` does not exist.
    """
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise FileNotFoundError(f"no sweep dir {sweep_dir}")
    rows = []
    for job_dir in _job_dirs(sweep_dir):
        row: Dict[str, Any] = {"job": int(job_dir.name), "overrides": _overrides(job_dir)}
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
            row.setdefault("reason", "no result.json (job not run, still running or killed)")
        else:
            row["status"] = result["status"]
            row["reason"] = result.get("reason")
            row["wall_s"] = result.get("timings_s", {}).get("wall")
            if not row["overrides"]:
                row["overrides"] = dict(o.partition("=")[::2] for o in result.get("overrides", []))
            for key in ("first_fail_step", "n_fail", "max_abs_diff", "max_rel_diff", "mean_signed_diff"):
                row[key] = (result.get("comparison") or {}).get(key)
        rows.append(row)
    return rows


def factors(rows: Sequence[Dict[str, Any]]) -> List[str]:
    """Override keys whose value differs between jobs (a key missing in a job counts
    as a value), in first-seen order."""
    keys: List[str] = []
    for row in rows:
        keys.extend(k for k in row["overrides"] if k not in keys)
    return [k for k in keys if len({row["overrides"].get(k) for row in rows}) > 1]


def table_rows(rows: Sequence[Dict[str, Any]]) -> tuple[List[str], List[List[Any]]]:
    """Header and cell values: job, each factor, then :data:`METRICS`."""
    keys = factors(rows)
    header = ["job", *keys, *METRICS]
    body = [[row["job"], *(row["overrides"].get(k, "") for k in keys), *(row[m] for m in METRICS)] for row in rows]
    return header, body


def _fmt(value: Any) -> Any:
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.3g}"
    return "" if value is None else value


def render(rows: Sequence[Dict[str, Any]], tablefmt: str = "github") -> str:
    """The table as text in any tabulate format (``github``, ``simple``, ``grid``, ...),
    followed by one line per job that did not pass with its reason."""
    header, body = table_rows(rows)
    text = tabulate([[_fmt(v) for v in r] for r in body], headers=header, tablefmt=tablefmt, disable_numparse=True)
    counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "fail", "error", "timeout", "missing")}
    verdict = f"{len(rows)} jobs: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    notes = [f"job {r['job']} {r['status']}: {r['reason']}" for r in rows if r["status"] not in ("ok",) and r["reason"]]
    return "\n".join([verdict, "", text, *([""] + notes if notes else [])])


def to_csv(rows: Sequence[Dict[str, Any]]) -> str:
    header, body = table_rows(rows)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows([["" if v is None else v for v in r] for r in body])
    return buf.getvalue()


def write_report(sweep_dir: Path | str, tablefmt: str = "github") -> str:
    """Write ``summary.md`` / ``summary.csv`` / ``summary.json`` into ``sweep_dir``;
    returns the table rendered in ``tablefmt`` for the terminal.

    ``summary.json``: ``{"sweep_dir", "factors", "jobs": [{job, overrides, status,
    reason, metrics...}]}`` (the loss sequences stay in each job's ``result.json``).
    """
    sweep_dir = Path(sweep_dir)
    rows = collect(sweep_dir)
    (sweep_dir / "summary.md").write_text(f"# Sweep {sweep_dir}\n\n" + render(rows, "github") + "\n")
    (sweep_dir / "summary.csv").write_text(to_csv(rows))
    write_json(
        sweep_dir / "summary.json",
        {
            "sweep_dir": str(sweep_dir),
            "factors": factors(rows),
            "jobs": [{k: v for k, v in row.items() if k != "result"} for row in rows],
        },
    )
    return render(rows, tablefmt)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sweep.summary", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="a multirun dir, e.g. outputs/multirun/2026-11-30_10-00-00")
    parser.add_argument("--format", default="simple", help="tabulate table format (simple, github, grid, ...)")
    args = parser.parse_args(argv)
    try:
        print(write_report(args.sweep_dir, args.format))
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"\nwritten: {args.sweep_dir / 'summary.md'}, summary.csv, summary.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
