"""The report of a sweep dir: verdict, culprits, per-factor tables, one row per job.

``python -m sweep.report SWEEP_DIR [--format FMT] [--max-rows N] [--against OLD_DIR]``
prints the report of a finished (or interrupted) multirun and writes ``summary.md``,
``summary.html`` (self-contained), ``summary.csv``, ``summary.json``, ``junit.xml`` and
``plots/`` into it; with ``--against``, it also compares it with another sweep
(``sweep.report.against``). ``--print-only`` prints it and writes nothing, as it does by
itself (saying so in one line) when the dir is not writable: a shared or read-only sweep
dir. The end-of-multirun callback calls :func:`write_report`.

Rows come from each job dir ``SWEEP_DIR/<num>/``: the factors from Hydra's
``.hydra/overrides.yaml`` (written when the job starts) and the metrics from
``result.json`` (only from what it records, so any old sweep re-renders); a job dir
without ``result.json`` is listed with status ``missing``. A *factor* is an override
key whose value is not the same in every job; the verdict is :mod:`sweep.findings`.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from omegaconf import OmegaConf
from tabulate import tabulate, tabulate_formats

from sweep.analysis.grid import factors, label
from sweep.report.findings import attribute
from sweep.analysis.compare import drift_metrics, nonfinite_in_one, tolerance_ratio
from sweep.analysis.dtypes import dtype_evidence
from sweep.report.terminal import fit
from sweep.analysis.evidence import DRIFT_CLASSES, DRIFT_RULE, drift_class, job_evidence, tensor_text_in_class
from sweep.errors import RecordError
from sweep.findings.places import located_text, module_text
from sweep.io import read_floats, read_json, unwritable, write_json
from sweep.layout import JobDir, SweepDir
from sweep.records import JobRecord, code_of
from sweep.report.junit import to_junit
from sweep.report.notes import as_data, text_of
from sweep.report.plots import write_plots

CULPRIT_CODES = ("V101", "V102", "V103", "V104")  # the findings that name a culprit (gate=true fails on them)
COMPARISON = ("first_fail_step", "n_fail", "max_abs_diff", "max_rel_diff", "mean_signed_diff")
METRICS = (
    "status", "drift", "first_diff_step", "first_real_step", "onset", "first_module", "first_tensor", *COMPARISON,
    "step0_diff",
    "runs_low_pct", "trend", "final_ratio", "ranks_agree", "repeats", "dtypes_configured", "dtypes_ran", "notes", "wall_s",
)
BRIEF_METRICS = (
    "status", "drift", "first_diff_step", "first_real_step", "first_module", "first_tensor", "first_fail_step",
    "n_fail", "max_abs_diff", "mean_signed_diff", "step0_diff", "runs_low_pct", "notes",
)
# The terminal's job table (at most 120 columns with the default grid's five factors); the
# rest with --wide and in the files. ``first_real_step`` beside ``first_diff_step``: the step the
# headline and the findings give (left out where it is the first differing step in every row).
TERMINAL_METRICS = ("status", "drift", "first_diff_step", "first_real_step", "max_abs_diff")
LEVEL_COLUMNS = (
    "factor", "level", "jobs", "judged", "not_judged", "pass_rate_pct", "mean_signed_diff", "worst_abs_diff",
)
CONTRAST_COLUMNS = ("factor", "pairs", "flips", "flip_rate_pct", "mean_abs_shift", "max_abs_shift")
MAX_ROWS = 40
STATUS_ORDER = ("fail", "timeout", "error", "missing", "ok")
LEGEND = {
    "drift": DRIFT_RULE,
    "first_diff_step": "first step where distributed and standalone differ at all (any rank; exact unless "
                       "compare.noise_floor is set)",
    "first_real_step": "first step a difference beyond its rounding envelope reaches (the losses, or a traced "
                       "tensor or update beyond its own; the envelope: the standalone copy's twin, nudged by one "
                       "unit in the last place); empty when every difference stays within its envelope (in the "
                       "terminal's table, 'beyond rounding': shown where some job's is another step than its "
                       "first differing one)",
    "onset": "none, step0, periodic, noise, abrupt or growth: how the difference starts, from the update "
             "differences of traced jobs, else from the losses (rules in summary.json)",
    "first_module": "the first module whose inputs agree and whose forward output (or, if every forward agrees, "
                    "whose backward's gradient) differs between the copies, from the tracing rerun's module trace",
    "first_tensor": "the first parameter gradient (after reduction and clipping) or weight (after the step) that differs between "
                    "the copies, from a rerun that records them (compare.trace_after steps past the first difference)",
    "mean_signed_diff": "mean of distributed - standalone over the steps, loss units (negative: distributed runs low)",
    "step0_diff": "distributed - standalone at step 0, before any update",
    "runs_low_pct": "% of steps where distributed < standalone",
    "trend": "least-squares slope of distributed - standalone, loss units per step",
    "final_ratio": "distributed / standalone at the last step",
    "repeats": "repeat=N: how many runs of the job (different launches, same seeds) and whether they agree; "
               "'differ' (nondeterministic) gives the largest loss difference between two of them",
    "dtypes_configured": "param/reduce/output dtype of the policy (- = default)",
    "dtypes_ran": "dtypes observed: param in forward/reduction/gradient/output/master weights/optimizer state "
                  "(? = unknown)",
}


def _overrides(job_dir: Path) -> Dict[str, str]:
    path = JobDir(job_dir).overrides
    if not path.exists():
        return {}
    try:
        items = OmegaConf.to_container(OmegaConf.load(path))
    except Exception:  # an unreadable file: the plan or the record still names the job
        return {}
    return _pairs(items) if isinstance(items, list) else {}


def _result_metrics(result: JobRecord) -> Dict[str, Any]:
    """The job's metrics from its record (see :func:`collect`): the comparison's numbers,
    the drift's shape (``sweep.analysis.compare``), where and how the copies part
    (``sweep.analysis.evidence.job_evidence``), repeats, dtypes
    (``sweep.analysis.dtypes.dtype_evidence``) and the engine's notes."""
    comparison = result.comparison or {}
    metrics: Dict[str, Any] = {k: comparison.get(k) for k in COMPARISON}
    for key in ("max_abs_diff", "max_rel_diff", "mean_signed_diff"):  # non-finite floats are stored as strings
        metrics[key] = None if metrics[key] is None else float(metrics[key])
    if result.comparison and result.losses:
        ref, got = read_floats(result.losses["standalone"]), read_floats(result.losses["distributed"])
        metrics.update(drift_metrics(ref, got))
        metrics["nonfinite_in"] = nonfinite_in_one(ref, got)  # max_abs_diff is the finite steps' then
        metrics["tolerance_ratio"] = tolerance_ratio(ref, got, result.comparison.get("rtol"),
                                                     result.comparison.get("atol"))
    metrics.update(job_evidence(result))
    metrics["first_module"] = module_text(result.first_module)  # the place in words (sweep.findings.places)
    metrics["first_tensor"] = located_text(result.first_tensor, result.world_size)
    metrics["envelope"] = envelope_metrics(result)
    metrics["ranks_agree"] = result.ranks_agree
    metrics["resolution"] = max(result.resolution.values()) if result.resolution else None  # printed losses
    metrics.update(repeat_metrics(result))
    metrics["wall_s"] = result.timings_s.get("wall")
    metrics.update(dtype_evidence(result.dtypes))
    metrics["dtype_notes"] = [as_data(n) for n in metrics["dtype_notes"]]  # JSON-ready (summary.json), code and text
    engine = result.engine or {}
    metrics["engine_notes"] = ([engine["summary"]] if engine.get("summary") else []) + [
        str(note).split(" -- ")[0] for note in result.engine_notes
    ]
    return metrics


def envelope_metrics(result: JobRecord) -> Dict[str, Any]:
    """The job's rounding envelope in short (``JobRecord.envelope``, ``sweep.analysis.envelope``):
    ``measured``, and where measured ``dtype`` (the twin's nudge), ``source``, ``within``,
    ``ratio`` (the largest ``|diff|`` over the envelope), ``first_beyond_step`` and ``band``
    (the tolerance this precision holds, ``rtol = atol``); where not, ``why``."""
    found = result.envelope or {}
    if not found.get("measured"):
        return {"measured": False, "why": found.get("why")}
    loss = found.get("loss") or {}
    return {"measured": True, "dtype": found.get("dtype"), "source": found.get("source"),
            "within": loss.get("within"), "ratio": loss.get("ratio"),
            "first_beyond_step": loss.get("first_beyond_step"), "band": loss.get("band")}


def repeat_metrics(result: JobRecord) -> Dict[str, Any]:
    """``repeats`` (the column: ``"3 agree"``, ``"3 differ by 1.2e-03"``, ``None`` without
    repeats), ``nondeterministic`` (bool, ``None`` without repeats) and ``repeat_spread``
    (``JobRecord.repeat_spread``) of a job's record."""
    if not result.repeats:
        return {"repeats": None, "nondeterministic": None, "repeat_spread": None}
    spread = result.repeat_spread or {}
    n = len(result.repeats)
    if result.nondeterministic:
        worst = max(spread.get("distributed_max_abs") or 0.0, spread.get("standalone_max_abs") or 0.0)
        column = f"{n} differ by {worst:.2g}"
        statuses = spread.get("statuses") or []
        if len(set(statuses)) > 1:
            column += f" ({'/'.join(statuses)})"
    else:
        column = f"{n} agree"
    return {"repeats": column, "nondeterministic": bool(result.nondeterministic), "repeat_spread": spread or None}


def _notes(row: Dict[str, Any]) -> List[Any]:
    """A row's notes, whole (a note may hold ``"; "`` itself; ``sweep.notes.Note`` or a string, not
    yet rendered): the engine's, the record's, a
    non-finite loss's why, ranks and replicas that disagree, a policy not applied, the dtypes'."""
    result = row.get("result")
    notes = list(row.get("engine_notes") or []) + (list(result.notes) if result is not None else [])
    if result is not None and (result.reason or "").startswith("non-finite loss"):  # the why of a max|diff| of 0
        notes.insert(0, str(result.reason).split(": equal, but")[0])
    if row["ranks_agree"] is False:
        notes.append("ranks disagree")
    replicas = getattr(result, "replicas", None) or {}
    if replicas.get("first_step") is not None:  # the same shards, different values (judging.replica_check)
        pairs = ", ".join(f"ranks {a} and {b}" for a, b in replicas.get("pairs") or [])
        notes.append(f"replicas disagree from step {replicas['first_step']}" + (f" ({pairs})" if pairs else ""))
    if row["policy_applied"] is False:
        notes.append(f"policy not applied (configured/ran {row['dtypes_configured']} vs {row['dtypes_ran']})")
    notes.extend(n for n in row.get("dtype_notes") or [] if not (row["policy_applied"] is False  # said above
                                                                   and (n.get("values") or {}).get("key") == "param_forward"))
    return notes


RUN_SWITCHES = ("resume", "replace_grid", "gate", "logger")  # how a multirun runs (and is logged), never a factor


def _pairs(overrides: Sequence[str]) -> Dict[str, str]:
    """``["a=1", "+b=2"]`` -> ``{"a": "1", "b": "2"}``, without the run switches
    (:data:`RUN_SWITCHES`)."""
    pairs = {}
    for item in overrides:
        key, _, value = str(item).partition("=")
        if key.lstrip("+~") not in RUN_SWITCHES:
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
    arguments = [f"{k}={v}" for k, v in params.items()] + list(OmegaConf.to_container(hydra_cfg.overrides.task,
                                                                                       resolve=False))
    overrides = OverridesParser.create().parse_overrides(arguments)
    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


def planned_jobs(sweep_dir: Path | str) -> Optional[List[List[str]]]:
    """:func:`planned_overrides` of the multirun in ``sweep_dir`` (its ``multirun.yaml``,
    which Hydra writes before the first job); ``None`` without it."""
    path = SweepDir(sweep_dir).multirun_yaml
    if not path.exists():
        return None
    try:
        hydra_cfg = OmegaConf.load(path).get("hydra")
        return planned_overrides(hydra_cfg) if hydra_cfg is not None else None
    except Exception as exc:  # not YAML, or not a multirun's config: the job dirs alone tell
        print(f"warning: {path} is unreadable ({str(exc).splitlines()[0]}); reporting the job dirs found",
              file=sys.stderr)
        return None


def collect(sweep_dir: Path | str) -> List[Dict[str, Any]]:
    """One dict per job, in job order: every job dir, and every job the multirun planned
    (:func:`planned_jobs`) even if it never started. ``job`` (its number), ``overrides`` (key ->
    value), the metrics of :data:`METRICS` (``None`` where not applicable: errored jobs
    have no losses, older results no ``dtypes``), ``policy_applied``, ``reason`` and
    ``result`` (the job's :class:`sweep.records.JobRecord`, or ``None`` if missing, or
    unreadable or of the wrong shape: then the job is ``missing`` and ``reason`` says why).

    Raises:
        FileNotFoundError: ``sweep_dir`` does not exist.
    """
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise FileNotFoundError(f"no sweep dir {sweep_dir}")
    layout = SweepDir(sweep_dir)
    expected = planned_jobs(sweep_dir)
    if not layout.multirun_yaml.exists() and not layout.job_dirs():
        raise FileNotFoundError(
            f"{sweep_dir} is not a multirun dir (no multirun.yaml, no numbered job dirs); "
            "a single run's verdict is in its result.json"
        )
    dirs = {int(p.name): p for p in layout.job_dirs()}
    rows = []
    # With a plan, the report covers the planned jobs only (a dir never mixes grids: sweep.run.sweep_dir).
    nums = range(len(expected)) if expected is not None else sorted(dirs)
    for num in nums:
        job_dir = dirs.get(num, sweep_dir / str(num))
        overrides = _pairs(expected[num]) if expected is not None else _overrides(job_dir)
        row: Dict[str, Any] = {"job": num, "overrides": overrides, "policy_applied": None, "engine_notes": [],
                               "period": None, "onset_from": None, "onset_until": None, "nondeterministic": None,
                               "repeat_spread": None, "envelope": None}
        row.update({k: None for k in METRICS})
        result_path = JobDir(job_dir).result
        try:
            result = JobRecord.read(result_path) if result_path.exists() else None
        except (OSError, RecordError) as exc:
            result = None
            row["reason"] = f"unreadable result.json: {exc}"
        row["result"] = result
        if result is not None and expected is not None and result.overrides \
                and _pairs(result.overrides) != overrides:
            row["reason"] = "result.json belongs to another grid's job (" + " ".join(result.overrides) + ")"
            result = row["result"] = None
        if result is None:
            row["status"] = "missing"
            row.setdefault(
                "reason",
                "no result.json (still running or killed)" if job_dir.exists() else "never started (no job dir)",
            )
        else:
            row.update(_result_metrics(result), status=result.status, reason=result.reason)
            if not row["overrides"]:
                row["overrides"] = _pairs(result.overrides)
        rows.append(row)
    for row in rows:
        row["drift"] = drift_class(row)
        row["first_tensor"] = tensor_text_in_class(row)  # the class and the tensor's words in one sense
        items = _notes(row)  # typed notes (sweep.notes.Note) and plain strings, rendered here, at the edge
        row["note_list"] = [text_of(n) for n in items]  # whole, for the rules that count them (sweep.findings.notes)
        row["note_codes"] = [code_of(n) for n in items]  # each note's code (None: a plain string), beside its text
        # the record's own notes as data and text (J106: sweep.findings.job_notes)
        row["record_notes"] = [as_data(n) for n in getattr(row.get("result"), "notes", None) or []]
        row["notes"] = "; ".join(row["note_list"]) or None
    return rows


def table_rows(rows: Sequence[Dict[str, Any]], metrics: Sequence[str] = METRICS) -> Tuple[List[str], List[List[Any]]]:
    """Header and cell values, one row per job in the given order: job, each factor, then ``metrics``."""
    keys = factors(rows)
    header = ["job", *keys, *metrics]
    body = [[row["job"], *(row["overrides"].get(k, "") for k in keys), *(_cell(row, m) for m in metrics)]
            for row in rows]
    return header, body


def _cell(row: Dict[str, Any], metric: str) -> Any:
    """A job's value of ``metric`` for its table: ``max_abs_diff`` says which copy's loss turned
    non-finite where one did (the number is the finite steps' only: a 0 beside a NaN misleads)."""
    where = row.get("nonfinite_in")
    if metric == "max_abs_diff" and where:
        return f"nan ({where['copy']})"
    return row[metric]


def _fmt(value: Any) -> Any:
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.3g}"
    return "" if value is None else value


def _later_only(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The rows with ``first_real_step`` left blank in every row where no job's is another step
    than its first differing one (the terminal's tables: a column only where a job parts beyond
    rounding at another step than it first differs: later, after differences by rounding; or
    earlier, a traced weight beyond its envelope before the losses differ). Where the column is
    shown, every job's step is in it: a blank there says within rounding, never "the same step"."""
    if any(r.get("first_real_step") is not None and r.get("first_real_step") != r.get("first_diff_step")
           for r in rows):
        return list(rows)
    return [dict(r, first_real_step=None) for r in rows]


def _failing_first(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Fail, timeout, error, missing, then ok; within a status the largest drift first."""
    def key(row: Dict[str, Any]) -> tuple:
        size = row["max_abs_diff"] if row["max_abs_diff"] is not None and not math.isnan(row["max_abs_diff"]) else 0.0
        return STATUS_ORDER.index(row["status"]), -size, row["job"]

    return sorted(rows, key=key)


TERMINAL_LABELS = {"first_diff_step": "first\nstep", "first_real_step": "beyond\nrounding",
                   "max_abs_diff": "max abs\ndiff"}


def _terminal_header(name: str) -> str:
    """A column name as a narrow header: words on lines of at most 13 characters."""
    # (an underscore between words only: ``model._target_`` keeps its own)
    label = TERMINAL_LABELS.get(name, re.sub(r"(?<=[A-Za-z0-9])_(?=[A-Za-z0-9])", " ", name))
    return "\n".join(textwrap.wrap(label, 13, break_long_words=False, replace_whitespace=False)) if "\n" not in label \
        else label


def _table(header: Sequence[str], body: Sequence[Sequence[Any]], tablefmt: str, max_rows: Optional[int],
           narrow: bool = False) -> str:
    """Tabulated, without columns that are empty in every row, cut after ``max_rows`` rows
    (``None``: all) with a line pointing to the full files; ``narrow``: headers on short
    lines (:func:`_terminal_header`), for a terminal."""
    keep = [i for i, column in enumerate(zip(header, *body)) if any(v not in (None, "") for v in column[1:])]
    shown = body if max_rows is None else body[:max_rows]
    names = [_terminal_header(header[i]) if narrow else header[i] for i in keep]
    text = tabulate(
        [[_fmt(r[i]) for i in keep] for r in shown], headers=names, tablefmt=tablefmt, disable_numparse=True,
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


def _factor_tables(att: Dict[str, Any], tablefmt: str, max_rows: Optional[int],
                   terminal: bool = False) -> Tuple[str, str]:
    """The factor-level and one-factor-contrast tables, the factors that flip pass/fail
    most often first (so the culprit's levels lead even when the table is cut);
    ``terminal``: a dotted level longer than 30 characters by its last part
    (``…TorchFSDP2``: an engine path would take the table past 120 columns; the files keep it whole)."""
    if not att["factors"]:
        return "no factor varies", "no factor varies"
    ordered = sorted(att["contrasts"], key=lambda c: -(c["flip_rate_pct"] or 0.0))
    rank = {c["factor"]: i for i, c in enumerate(ordered)}
    levels = sorted(att["levels"], key=lambda s: rank[s["factor"]])
    level_body = [[_level_name(label(s[k]), terminal) if k == "level" else s[k] for k in LEVEL_COLUMNS]
                  for s in levels]
    contrast_body = [[c[k] for k in CONTRAST_COLUMNS] for c in ordered]
    return (
        _table(LEVEL_COLUMNS, level_body, tablefmt, max_rows),
        _table(CONTRAST_COLUMNS, contrast_body, tablefmt, max_rows),
    )


def _level_name(text: str, terminal: bool) -> str:
    if terminal and len(text) > 30 and "." in text and " " not in text:
        return "…" + text.rsplit(".", 1)[-1]
    return text


def findings_listing(att: Dict[str, Any], max_rows: Optional[int], markdown: bool = False) -> str:
    """The verdict's findings but the counts, one line each with its code: ``V101 culprit:
    <sentence>`` (``**V101**`` in markdown), cut after ``max_rows`` (``None``: all)."""
    found = [f for f in att["findings"] if f["code"] != "V000"]
    shown = found if max_rows is None else found[:max_rows]
    code = (lambda f: f"**{f['code']}** {f['kind']}") if markdown else (lambda f: f"{f['code']} {f['kind']}")
    text = "\n".join(f"- {code(f)}: {f['sentence']}" for f in shown) or "none"
    if len(shown) < len(found):
        text += f"\n... {len(found) - len(shown)} more findings: see summary.md / summary.json"
    return text


def _sections(
    rows: Sequence[Dict[str, Any]], att: Dict[str, Any], tablefmt: str, max_rows: Optional[int], metrics: Sequence[str],
    legend: bool = True,
) -> List[Tuple[str, str]]:
    """``(title, body)`` of each report section after the headline: the findings, the factor
    tables, the jobs (with the columns' legend where ``legend``)."""
    terminal = metrics is TERMINAL_METRICS or metrics is BRIEF_METRICS
    levels, contrasts = _factor_tables(att, tablefmt, max_rows, terminal=terminal)
    header, body = table_rows(_failing_first(_later_only(rows) if terminal else rows), metrics)
    jobs = _table(header, body, tablefmt, max_rows, narrow=metrics is TERMINAL_METRICS)
    return [
        ("Findings (codes: python -m sweep explain CODE)", findings_listing(att, max_rows, tablefmt == "github")),
        ("Factor levels (pass rate over judged jobs: ok/fail; not_judged = error/timeout/missing)", levels),
        ("One-factor contrasts (pairs of judged jobs differing in that factor alone)", contrasts),
        ("Jobs (failing first)", jobs + ("\n\n" + _legend(metrics) if legend else "")),
    ]


def render(
    rows: Sequence[Dict[str, Any]], tablefmt: str = "simple", max_rows: Optional[int] = MAX_ROWS,
    att: Optional[Dict[str, Any]] = None, wide: bool = False,
) -> str:
    """The terminal report, in 120 columns (``sweep.report.terminal.fit``): the headline, the
    findings (one line each, with its code), then the jobs (failing first: the swept factors
    and :data:`TERMINAL_METRICS`, or with ``wide`` :data:`BRIEF_METRICS`, the first tensor and
    notes too, the factor tables and the columns' legend), every list cut after ``max_rows``
    rows (``None``: all). Tables in any tabulate format (``simple``, ``github``, ``grid``, ...).
    ``att`` is :func:`sweep.report.findings.attribute` of ``rows`` (computed when not given).
    The legend is the files' and the page's (``summary.md``, ``summary.html``), not the
    terminal's unless ``wide``."""
    att = att or attribute(rows)
    metrics = BRIEF_METRICS if wide else TERMINAL_METRICS
    sections = _sections(rows, att, tablefmt, max_rows, metrics, legend=wide)
    if not wide:
        sections = [sections[0], sections[-1]]
    parts = [att["headline"]] + [f"{title}:\n{body}" for title, body in sections]
    return fit("\n\n".join(parts))


def render_markdown(
    sweep_dir: Path, rows: Sequence[Dict[str, Any]], att: Dict[str, Any], plots: Sequence[Path]
) -> str:
    """``summary.md``: the headline, the findings, the factor tables and the jobs with every
    metric and the columns' legend, complete, and links to the ``plots`` (paths under
    ``sweep_dir``)."""
    parts = [f"# Sweep {sweep_dir}", f"**{att['headline']}**"]
    parts += [f"## {title}\n\n{body}" for title, body in _sections(rows, att, "github", None, METRICS)]
    links = [f"[{p.stem}]({p.relative_to(sweep_dir)})" for p in plots]
    parts.append("## Plots\n\n" + (", ".join(links) if links else "none"))
    return "\n\n".join(parts) + "\n"


def constant_overrides(rows: Sequence[Dict[str, Any]]) -> List[str]:
    """Override keys that every job has with one and the same value, in first-seen order
    (the complement of :func:`sweep.analysis.grid.factors`)."""
    keys: List[str] = []
    for row in rows:
        keys.extend(k for k in row["overrides"] if k not in keys)
    varying = set(factors(rows))
    return [k for k in keys if k not in varying]


def csv_rows(rows: Sequence[Dict[str, Any]]) -> Tuple[List[str], List[List[Any]]]:
    """Header and cells of ``summary.csv``: job, each factor, each constant override,
    every column of :data:`METRICS`, ``reason``, then ``versions.<name>`` of every
    version any job recorded (``sweep``, ``python``, ``torch``, ...; empty for missing jobs)."""
    header, body = table_rows(rows)
    constant = constant_overrides(rows)
    versions: List[str] = []
    for row in rows:
        result = row.get("result")
        versions.extend(k for k in ((result.versions or {}) if result is not None else {}) if k not in versions)
    n_factors = len(factors(rows))
    header = header[:1 + n_factors] + constant + header[1 + n_factors:] + ["reason"] + [f"versions.{v}" for v in versions]
    cells = []
    for row, line in zip(rows, body):
        result = row.get("result")
        found = (result.versions or {}) if result is not None else {}
        cells.append(line[:1 + n_factors] + [row["overrides"].get(k, "") for k in constant] + line[1 + n_factors:]
                     + [row.get("reason")] + [found.get(v) for v in versions])
    return header, cells


def to_csv(rows: Sequence[Dict[str, Any]]) -> str:
    """One row per job in job order: the columns of :func:`csv_rows`."""
    header, body = csv_rows(rows)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows([["" if v is None else v for v in r] for r in body])
    return buf.getvalue()


def _failing_plot(path: Path, rows: Sequence[Dict[str, Any]]) -> bool:
    """False for the plot of a failing job (it comes first), True otherwise."""
    failing = {f"job_{r['job']}" for r in rows if r["status"] == "fail"}
    return path.stem not in failing


def answers(sweep_dir: Path, rows: Sequence[Dict[str, Any]],
            against: Optional[Tuple[Path, Sequence[Dict[str, Any]]]] = None) -> List[Any]:
    """Another tool's answers about this sweep dir, as findings that lead its verdict
    (``sweep.findings.answers``): an isolation's (``isolate.json``), a bisection's
    (``bisect.json``), a sweep against another (``against``: its dir and rows)."""
    from sweep.findings import answers as found

    out: List[Any] = []
    for name, make in (("isolate.json", found.isolation), ("bisect.json", found.bisection)):
        path = sweep_dir / name
        if path.exists():
            try:
                out += make(json.loads(path.read_text()))
            except (OSError, ValueError):  # an unreadable state: its own report says so
                pass
    if against is not None:
        from sweep.report.against import match

        out += found.against(match(rows, against[1]), str(against[0]))
    return out


def write_report(
    sweep_dir: Path | str, tablefmt: str = "simple", max_rows: Optional[int] = MAX_ROWS,
    outcome: Optional[Dict[str, Any]] = None, wide: bool = False, plots: bool = True,
    against: Optional[Tuple[Path, Sequence[Dict[str, Any]]]] = None,
) -> str:
    """Write ``summary.md``, ``summary.csv``, ``summary.json``, ``summary.html`` (the page,
    :mod:`sweep.report.page`, with ``plotly.min.js`` beside it) and ``plots/*.png`` into
    ``sweep_dir``; returns the terminal report (:func:`render`). ``against``: another
    sweep's dir and rows (``python -m sweep.report NEW --against OLD``): the page shows both
    sweeps side by side (:func:`sweep.report.against.match`). ``outcome`` (a dict)
    receives ``counts`` and ``judged`` of the report, for an exit status. ``plots=False``
    draws nothing and links the PNGs already in ``plots/`` (drawing takes about a second a
    drifting job: minutes for a re-render of hundreds).

    ``summary.json`` keys: ``sweep_dir``, ``findings`` (the verdict as data: each finding's
    ``code``, ``kind``, ``jobs``, ``levels``, ``steps``, ``values``, ``evidence``, ``strength``
    and rendered ``sentence``, ranked), ``headline``, ``verdict`` (the details), ``factors``,
    ``counts`` (status -> jobs), ``judged``, ``not_judged`` (``[{job, status, reason}]``),
    ``culprits`` (the ranked candidates' numbers), ``interactions``, ``levels``, ``contrasts``,
    ``drift`` (class -> job numbers), ``drift_rule`` (all as in
    :func:`sweep.report.findings.attribute`), ``plots`` (paths
    relative to ``sweep_dir``), ``nondeterministic`` (``[{job, spread, ...}]``: jobs whose
    repeats disagree, ``sweep.findings.tables``) and ``jobs``
    (``[{job, overrides, status, reason, policy_applied, nondeterministic, repeat_spread,
    metrics of METRICS..., note_list: the notes' sentences, note_codes: each one's code or
    null, record_notes: the record's own notes as code, values, ranks and text, dtype_notes
    likewise}]``; the loss sequences stay in each job's ``result.json``).

    Raises:
        FileNotFoundError: ``sweep_dir`` does not exist.
    """
    sweep_dir = Path(sweep_dir)
    layout = SweepDir(sweep_dir)
    rows = collect(sweep_dir)
    att = attribute(rows, answers(sweep_dir, rows, against))
    if outcome is not None:
        outcome.update(counts=att["counts"], judged=att["judged"],
                       culprit=any(f["code"] in CULPRIT_CODES for f in att["findings"]))
    drawn = write_plots(layout.plots, rows, att["levels"]) if plots else sorted(layout.plots.glob("*.png"))
    layout.summary("md").write_text(render_markdown(sweep_dir, rows, att, drawn))
    layout.summary("csv").write_text(to_csv(rows))
    from sweep.report.against import match
    from sweep.report.page import write_grid_page

    write_grid_page(sweep_dir, _failing_first(rows), att,
                    sorted(drawn, key=lambda p: (p.stem != "factor_effects", _failing_plot(p, rows))),
                    against=match(rows, against[1]) if against is not None else None,
                    old_name=str(against[0]) if against is not None else "",
                    sections=[(t, b) for t, b in _sections(rows, att, "html", None, METRICS)
                              if not t.startswith(("Findings", "Jobs"))],
                    legend=_legend(METRICS))
    (sweep_dir / "junit.xml").write_text(to_junit(rows, sweep_dir.name, att.get("findings") or [], att["headline"]))
    write_json(
        layout.summary("json"),
        {
            "sweep_dir": str(sweep_dir),
            **att,
            "plots": [str(p.relative_to(sweep_dir)) for p in drawn],
            "jobs": [{k: v for k, v in row.items() if k != "result"} for row in rows],
        },
    )
    return render(rows, tablefmt, max_rows, att, wide=wide)


def report_text(sweep_dir: Path | str, tablefmt: str = "simple", max_rows: Optional[int] = MAX_ROWS,
                wide: bool = False, against: Optional[Tuple[Path, Sequence[Dict[str, Any]]]] = None) -> str:
    """The terminal report of ``sweep_dir`` (:func:`render`), as :func:`write_report`
    returns it (another tool's answers leading: :func:`answers`), writing nothing.

    Raises:
        FileNotFoundError: ``sweep_dir`` does not exist or is no multirun dir.
    """
    sweep_dir = Path(sweep_dir)
    rows = collect(sweep_dir)
    return render(rows, tablefmt, max_rows, attribute(rows, answers(sweep_dir, rows, against)), wide=wide)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sweep.report", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="a multirun dir, e.g. outputs/multirun/2026-11-30_10-00-00")
    parser.add_argument("--format", default="simple", choices=tabulate_formats, metavar="FORMAT",
                        help="tabulate table format: simple, github, grid, ... (any of tabulate.tabulate_formats)")
    parser.add_argument(
        "--max-rows", type=int, default=MAX_ROWS,
        help=f"rows per table and list on screen (default {MAX_ROWS}; 0 or -1: all)",
    )
    parser.add_argument("--wide", action="store_true",
                        help="the job table with every brief column (first tensor, notes, ...), not only what fits "
                             "120 columns")
    parser.add_argument("--no-plots", action="store_true",
                        help="draw no plots (about a second a drifting job); keep and link those in plots/")
    parser.add_argument("--against", type=Path, default=None, metavar="OLD_DIR",
                        help="another sweep dir: match jobs by config and show what changed (fixed, broke, ...)")
    parser.add_argument("--export-golden", type=Path, default=None, metavar="FILE",
                        help="write a job's loss sequences (step, loss, rank, copy, with its config and versions) "
                             "to FILE, a golden baseline for baseline.file=FILE; sweep_dir is then the job's dir, or a "
                             "sweep dir with --job N")
    parser.add_argument("--job", type=int, default=None, metavar="N",
                        help="with --export-golden and a sweep dir: the job to export")
    parser.add_argument("--print-only", action="store_true",
                        help="print the report and write no file into sweep_dir (no summary.*, junit.xml, plots/); "
                             "taken by itself, with a one-line note, when sweep_dir is not writable")
    args = parser.parse_args(argv)
    if args.max_rows < -1:
        parser.error(f"--max-rows {args.max_rows}: a number of rows >= 1, or 0 or -1 for all")
    if args.export_golden is not None:
        return _export_golden(args.sweep_dir, args.job, args.export_golden)
    if args.job is not None:  # (it was ignored: the whole report printed)
        parser.error("--job N picks the job whose standalone losses --export-golden FILE writes; without "
                     "--export-golden there is nothing to pick it for")
    max_rows = args.max_rows if args.max_rows > 0 else None
    print_only = args.print_only
    if _single_run(args.sweep_dir):
        if args.against is not None:
            parser.error(f"--against compares two sweeps' jobs; {args.sweep_dir} is a single run's dir (its "
                         "result.json): give a multirun dir")
        return _single_report(args.sweep_dir, print_only)
    try:
        old_rows = collect(args.against) if args.against is not None else None  # a bad OLD_DIR: before anything is written
        why = None if print_only or not args.sweep_dir.is_dir() else unwritable(args.sweep_dir)
        if why is not None:
            print(f"note: {args.sweep_dir} is not writable ({why}): the report is printed only, no file written "
                  "(--print-only)", file=sys.stderr)
            print_only = True
        pair = (args.against, old_rows) if old_rows is not None else None
        if print_only:
            print(report_text(args.sweep_dir, args.format, max_rows, wide=args.wide, against=pair))
        else:
            try:
                text = write_report(args.sweep_dir, args.format, max_rows, wide=args.wide, plots=not args.no_plots,
                                    against=pair)
            except OSError as exc:  # a file of the dir that cannot be replaced (another user's, read-only)
                if not args.sweep_dir.is_dir():
                    raise
                print(f"note: {args.sweep_dir}'s report files cannot all be written ({exc.strerror or exc}: "
                      f"{exc.filename or ''}): the report is printed only (--print-only)", file=sys.stderr)
                text, print_only = report_text(args.sweep_dir, args.format, max_rows, wide=args.wide,
                                               against=pair), True
            print(text)
        if old_rows is not None:
            from sweep.report import against

            found = against.match(collect(args.sweep_dir), old_rows)
            print("\n" + against.render(found, str(args.sweep_dir), str(args.against), args.format, max_rows))
    except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not print_only:
        print(f"\nwritten: {args.sweep_dir / 'summary.md'}, summary.html, summary.csv, summary.json, junit.xml, plots/",
              file=sys.stderr)
    return 0


def _single_run(directory: Path) -> bool:
    """A single run's dir (``hydra.run.dir``): its ``result.json``, no multirun's plan or jobs."""
    return JobDir(directory).result.exists() and not SweepDir(directory).multirun_yaml.exists() and \
        not SweepDir(directory).job_dirs()


def _single_report(job_dir: Path, print_only: bool) -> int:
    """A single run's verdict again, as the run printed it (its status line, then its
    findings: :func:`job_headline`), and its ``report.html`` written again unless
    ``print_only`` or the dir is not writable; exit 0, or 2 where ``result.json`` is unreadable."""
    from sweep.report.terminal import fit_job_line
    from sweep.report.job_line import summary_line

    try:
        record = JobRecord.from_dict(read_json(JobDir(job_dir).result))
        lines = job_headline(job_dir)
    except (RecordError, ValueError, OSError) as exc:
        print(f"error: {JobDir(job_dir).result}: {exc}", file=sys.stderr)
        return 2
    status = summary_line(record)
    print(fit_job_line(status))
    for line in lines:
        print(fit(f"  {line}"))
    why = None if print_only else unwritable(job_dir)
    if why is not None:
        print(f"note: {job_dir} is not writable ({why}): the report is printed only", file=sys.stderr)
    elif not print_only:
        try:
            print(f"\nwritten: {write_job_page(job_dir, status)}", file=sys.stderr)
        except OSError as exc:
            print(f"note: {job_dir / 'report.html'} not written ({exc.strerror or exc})", file=sys.stderr)
    return 0


def _export_golden(directory: Path, job: Optional[int], path: Path) -> int:
    """``--export-golden``: exit 0 written, 2 no such job or nothing to export (one line)."""
    from sweep.errors import RecordError
    from sweep.report import golden

    job_dir = directory
    if job is not None or not JobDir(directory).result.exists():  # --job N: job N, whatever the root holds
        jobs = SweepDir(directory).job_dirs() if directory.is_dir() else []
        if job is None and len(jobs) != 1:
            print(f"error: {directory} is not a job dir" + (f" but a sweep dir of {len(jobs)} jobs: add --job N"
                                                             if jobs else ""), file=sys.stderr)
            return 2
        job_dir = SweepDir(directory).job(job) if job is not None else jobs[0]
    try:
        content = golden.export(job_dir, path)
    except (FileNotFoundError, RecordError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ranks = sorted({r["rank"] for r in content["rows"] if r["copy"] == "distributed"})
    print(f"golden: {path} ({content['steps']} steps, standalone and rank{'s' if len(ranks) > 1 else ''} "
          f"{', '.join(map(str, ranks))}, from {Path(job_dir)}); use it with baseline.file={path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def collect_job(job_dir: Path | str) -> Dict[str, Any]:
    """The row :func:`collect` gives a single run's job (as job 0 of a one-job dir).

    Raises:
        FileNotFoundError: ``job_dir`` holds no ``result.json``.
    """
    import shutil
    import tempfile

    source = JobDir(job_dir).result
    if not source.exists():
        raise FileNotFoundError(f"no {source}")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "0").mkdir()
        shutil.copy(source, JobDir(Path(tmp) / "0").result)
        return collect(tmp)[0]


def job_headline(job_dir: Path | str) -> List[str]:
    """What a single run says under its status line: its findings (``sweep.findings.find_job``:
    where the copies part and the drift class, the rounding envelope, the first module and
    tensor, replicas, the notes), one line each, in order; empty for a job without a result."""
    from sweep.findings import find_job
    from sweep.report.findings import sentence

    if not JobDir(job_dir).result.exists():
        return []
    return [sentence(f) for f in find_job(collect_job(job_dir))]


def write_job_page(job_dir: Path | str, status_line: str) -> Path:
    """A single run's ``report.html`` (:func:`sweep.report.page.write_run_page`): the
    terminal's ``status_line`` first, then :func:`job_headline`'s lines and the charts.

    Raises:
        FileNotFoundError: ``job_dir`` holds no ``result.json``.
    """
    from sweep.report.page import write_run_page

    return write_run_page(job_dir, collect_job(job_dir), status_line, job_headline(job_dir))
