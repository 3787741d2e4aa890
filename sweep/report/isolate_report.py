"""The report of an isolation (``hydra/sweeper=isolate``), in the grid report's style.

``python -m sweep.report.isolate_report SWEEP_DIR [--format FMT]`` prints it again from the
sweep dir's ``isolate.json`` (and rewrites ``isolate.md``). The sweeper writes
``isolate.json`` after every batch and both files at the end (:func:`write_isolation`).

Sections: the verdict paragraph (the answer, whether it is an interaction, the two
jobs that prove it, the cost next to the grid's); the changes between the two
endpoints; the proof's two jobs with their metrics; every probe with its overrides and
verdict; the jobs not judged.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from tabulate import tabulate, tabulate_formats

from sweep.io import unwritable, write_json

ISOLATE_JSON = "isolate.json"
ISOLATE_MD = "isolate.md"
METRICS = ("first_fail_step", "n_fail", "max_abs_diff", "mean_signed_diff")


def _fmt(value: Any) -> Any:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3g}"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return "" if value is None else value


def _table(header: Sequence[str], body: Sequence[Sequence[Any]], tablefmt: str) -> str:
    if not body:
        return "none"
    return tabulate([[_fmt(v) for v in row] for row in body], headers=list(header), tablefmt=tablefmt,
                    disable_numparse=True)


def _jobs_by_num(state: Dict[str, Any]) -> Dict[int, Dict[str, Any]]:
    return {row["job"]: row for row in state.get("jobs", [])}


def _value(v: Optional[str]) -> str:
    return "(default)" if v is None else str(v)


def _drift(row: Dict[str, Any]) -> str:
    try:
        mean = float(row.get("mean_signed_diff"))
    except (TypeError, ValueError):
        return ""
    if row.get("status") != "fail" or math.isnan(mean):
        return ""
    where = row.get("nonfinite_in")
    if where:  # its max |diff| is the finite steps' only (0 beside a NaN)
        return f"; the {where['copy']} loss non-finite from step {where['step']}, the other copy's finite"
    if row.get("first_fail_step") is None:  # failed on something else than its losses (replicas that disagree)
        return f"; its losses within tolerance, it fails on: {row['reason']}" if row.get("reason") else ""
    direction = "runs low" if mean < 0 else "runs high" if mean > 0 else "differs"
    return (f"; the distributed loss {direction} (mean signed diff {mean:+.3g}, max |diff| "
            f"{_fmt(row.get('max_abs_diff'))}) from step {row.get('first_fail_step')}")


def reason_text(status: str, why: Dict[str, Any]) -> str:
    """One sentence on an isolation's ``status`` from what it rests on (``why``:
    ``sweep.analysis.isolate.Isolation.why``)."""
    if status == "endpoints":
        return (f"nothing to isolate: the passing config is {why.get('passing')} and the failing config is "
                f"{why.get('failing')} (needs pass and fail)")
    if status == "budget" and not why.get("endpoints_judged"):
        return "the budget ran out before both endpoints were judged"
    if status == "budget":
        return f"the budget of {why.get('budget')} probes ran out; the smallest failing set so far"
    return "ddmin finished: no smaller failing set reachable by removing changes"


def verdict(state: Dict[str, Any]) -> str:
    """The first paragraph: cost, answer, interaction, proof, caveats."""
    n, grid = state.get("n_jobs", 0), state.get("grid_jobs")
    jobs = _jobs_by_num(state)
    not_judged = sum(r["status"] not in ("ok", "fail") for r in jobs.values())
    unresolved = sum(p["verdict"] == "unresolved" for p in state.get("probes", []))
    cost = f"Isolation: {n} jobs"
    if grid:
        cost += f" ({100.0 * n / grid:.0f}% of the {grid} jobs of {state.get('grid') or 'the full grid'})"
    cost += f", {len(state.get('probes', []))} probes"
    if not_judged or unresolved:
        cost += f"; {not_judged} job(s) not judged (error/timeout), {unresolved} probe(s) unresolved: routed around"
    status = state.get("status")
    if status == "running":
        return cost + ". Still running or interrupted: no answer yet (resume with the same command, resume=true)."
    if status == "endpoints" or not state.get("minimal"):
        return f"{cost}. Nothing isolated: {state.get('reason')}."
    minimal = state["minimal"]
    text = f"{cost}. Minimal failure-inducing change: {state['answer']}."
    removals = state.get("removals") or {}
    proof = state.get("proof") or {}
    if proof.get("passing") and proof.get("failing"):
        good, bad = jobs.get(proof["passing"][0], {}), jobs.get(proof["failing"][0], {})
        text += (f" Proof: job {good.get('job')} passes and job {bad.get('job')} fails; they differ in exactly "
                 f"{'these overrides' if len(minimal) > 1 else 'this override'}{_drift(bad)}.")
    conditions = state.get("conditions") or {}
    context = state.get("context") or []
    if len(minimal) >= 2:
        alone = ", ".join(f"without {k}: {v or 'not run'}" for k, v in removals.items())
        if "unresolved" in removals.values():  # (a pass within an envelope too wide to show the fault)
            text += (f" These {len(minimal)} changes fail together ({alone}): not proven an interaction, a probe "
                     "without one of them passes only within a rounding envelope too wide to show the fault, or "
                     "its repeats disagree.")
        else:
            text += f" Interaction: these {len(minimal)} changes fail only together ({alone})."
    others = state.get("others") or {}
    other_jobs = ", ".join(map(str, (others.get("jobs") or [])[:1]))
    if others.get("verdict") == "fail" and others.get("answer"):  # a second, independent cause
        alone = "also fails alone" if len(others.get("minimal") or []) == 1 else "also fails without it"
        text += (f" Not the only cause: {alone}: {others['answer']} (job {other_jobs}), so "
                 f"{'either change' if len(minimal) == 1 else 'either set'} fails on its own.")
    elif others.get("verdict") == "fail":
        text += f" Not the only cause: every other change together fails without it too (job {other_jobs})."
    elif len(minimal) == 1 and not conditions:
        if others.get("verdict") == "pass":
            text += (f" One change decides it: every other change together passes without it (job {other_jobs}), "
                     "the rest of the passing config unchanged.")
        else:
            text += " This change fails on its own, the rest of the passing config unchanged; whether another " \
                    "change fails without it was not tested."
    for key, c in conditions.items():
        passing_jobs = [j for p in context if p["key"] == key and p["verdict"] == "pass" for j in p["jobs"][:1]]
        fails, passes = "/".join(_value(v) for v in c["fails"]), "/".join(_value(v) for v in c["passes"])
        text += (f" Interaction: it fails only with {key}={fails}; with {key}={passes} it passes "
                 f"(job{'s' if len(passing_jobs) > 1 else ''} {', '.join(map(str, passing_jobs))}).")
    if context:
        untouched = sorted({p["key"] for p in context} - set(conditions))
        if untouched:
            text += f" Under every other level of {', '.join(untouched)} it still fails or has no verdict."
        if state.get("deciding"):
            text += f" Deciding factors: {', '.join(state['deciding'])}."
    if status == "budget":
        text += f" Stopped by the budget (max_jobs={state.get('max_jobs')}): the smallest failing set so far."
    elif state.get("unproven"):
        text += (f" Not proven 1-minimal in {', '.join(state['unproven'])}: the probe without it had no verdict "
                 "(unresolved or error).")
    return text


def sections(state: Dict[str, Any], tablefmt: str, full: bool = False) -> List[tuple]:
    """``(title, body)`` of each section after the verdict; ``full`` adds each probe's
    complete override list to the probe table (``isolate.md``)."""
    jobs = _jobs_by_num(state)
    in_minimal = {c["key"] for c in state.get("minimal") or []}
    changes = [[c["key"], _value(c["passing"]), _value(c["failing"]), "*" if c["key"] in in_minimal else ""]
               for c in state.get("changes") or []]
    proof_rows = []
    for role in ("passing", "failing"):
        for num in (state.get("proof") or {}).get(role, []):
            row = jobs.get(num, {})
            proof_rows.append([role, num, row.get("status"), *(row.get(m) for m in METRICS),
                               " ".join(row.get("overrides", []))])
    probe_rows = []
    for p in state.get("probes", []):
        first = jobs.get(p["jobs"][0], {}) if p["jobs"] else {}
        statuses = "/".join(jobs.get(j, {}).get("status", "?") for j in p["jobs"])
        probe_rows.append([p["probe"], p["phase"], p.get("granularity"), p["jobs"], p["applied"], p["verdict"],
                           statuses, *(first.get(m) for m in METRICS)]
                          + ([" ".join(first.get("overrides", []))] if full else []))
    not_judged = [f"job {r['job']} {r['status']}: {r.get('reason') or 'no reason recorded'}"
                  for r in jobs.values() if r["status"] not in ("ok", "fail")]
    not_judged += [f"probe {p['probe']} ({p['applied']}) unresolved: its repeats disagree ({p['jobs']})"
                   for p in state.get("probes", []) if p["verdict"] == "unresolved"]
    grid, n = state.get("grid_jobs"), state.get("n_jobs", 0)
    cost = (f"{n} jobs (repeat={state.get('repeat')}, max_jobs={state.get('max_jobs')}) in "
            f"{state.get('wall_s', 0.0):.0f} s; the full grid: {grid} jobs"
            + (f" ({grid / n:.1f}x as many)" if grid and n else ""))
    ends = {end: " ".join(f"{k}={v}" for k, v in (state.get(end) or {}).items() if v is not None)
            for end in ("passing", "failing")}
    return [
        ("Endpoints", f"{state.get('endpoints_from', '')}\npassing: {ends['passing']}\nfailing: {ends['failing']}"),
        ("Changes (passing -> failing; * = in the minimal set)",
         _table(("key", "passing", "failing", "minimal"), changes, tablefmt)),
        ("Proof (two jobs that differ in exactly the minimal set)",
         _table(("role", "job", "status", *METRICS, "overrides"), proof_rows, tablefmt)),
        ("Probes (launch order; a probe = the passing config plus the changes listed; verdict over its repeats)",
         _table(("probe", "phase", "n", "jobs", "changes applied", "verdict", "statuses", *METRICS)
                + (("overrides",) if full else ()), probe_rows, tablefmt)),
        ("Context (the minimal failing config with one other grid factor changed; a pass makes it a condition)",
         _table(("key", "level", "verdict", "jobs"),
                [[c["key"], c["level"], c["verdict"], c["jobs"]] for c in state.get("context") or []], tablefmt)
         + ("" if state.get("context_complete", True) else "\n(cut by the budget: not every level was tried)")),
        ("Not judged (routed around: never taken as a pass or a fail)",
         "\n".join(f"- {line}" for line in not_judged) or "none"),
        ("Cost", cost),
    ]


def render(state: Dict[str, Any], tablefmt: str = "simple") -> str:
    """The terminal report of an ``isolate.json`` state."""
    return "\n\n".join([verdict(state)] + [f"{title}:\n{body}" for title, body in sections(state, tablefmt)])


def render_markdown(state: Dict[str, Any]) -> str:
    """``isolate.md``: the same sections with GitHub tables, every probe's overrides included."""
    parts = [f"# Isolation {state.get('sweep_dir', '')}", verdict(state)]
    parts += [f"## {title}\n\n{body}" for title, body in sections(state, "github", full=True)]
    return "\n\n".join(parts) + "\n"


def write_isolation(sweep_dir: Path | str, state: Dict[str, Any], final: bool = True, tablefmt: str = "simple") -> str:
    """Write ``isolate.json`` (and when ``final``, ``isolate.md``) into ``sweep_dir``;
    returns the terminal report.

    ``isolate.json`` keys: ``sweep_dir``, ``status`` (``running``, ``isolated``,
    ``budget``, ``endpoints``), ``reason``, ``endpoints_from``, ``passing`` / ``failing``
    (override maps), ``changes`` and ``minimal`` (``[{key, passing, failing}]``),
    ``answer``, ``deciding`` (keys: the minimal set's, then the conditions'),
    ``interaction`` (two or more deciding factors), ``one_minimal``, ``unproven`` (keys), ``removals`` (key ->
    verdict of the minimal set without it), ``context`` (``[{key, level, verdict,
    jobs}]``: grid and from_sweep modes), ``context_complete``, ``conditions`` (key ->
    ``{fails, passes, unknown}`` levels), ``proof`` (``{passing: [jobs], failing:
    [jobs]}``), ``probes`` (``[{probe, phase, round, granularity, changes, applied,
    verdict, jobs}]``), ``jobs`` (``[{job, overrides, status, reason, metrics...}]``),
    ``n_jobs``, ``grid_jobs`` (jobs of ``grid``, which says which grid), ``repeat``, ``max_jobs``, ``wall_s``.
    """
    sweep_dir = Path(sweep_dir)
    write_json(sweep_dir / ISOLATE_JSON, state)
    if final:
        (sweep_dir / ISOLATE_MD).write_text(render_markdown(state))
    return render(state, tablefmt)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sweep.report.isolate_report", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="the sweep dir of an isolation (holds isolate.json)")
    parser.add_argument("--format", default="simple", choices=tabulate_formats, metavar="FORMAT")
    parser.add_argument("--print-only", action="store_true",
                        help="print the report and write nothing (isolate.md stays as it is); taken by itself, with "
                             "a one-line note, when DIR is not writable")
    args = parser.parse_args(argv)
    path = args.sweep_dir / ISOLATE_JSON
    if not path.exists():
        print(f"error: no {ISOLATE_JSON} in {args.sweep_dir}", file=sys.stderr)
        return 2
    state = json.loads(path.read_text())
    why = None if args.print_only else unwritable(args.sweep_dir)
    if why is not None:
        print(f"note: {args.sweep_dir} is not writable ({why}): the report is printed only, no file written "
              "(--print-only)", file=sys.stderr)
    if args.print_only or why is not None:
        print(render(state, args.format))
    else:
        print(write_isolation(args.sweep_dir, state, final=True, tablefmt=args.format))
    return 0


if __name__ == "__main__":
    sys.exit(main())
