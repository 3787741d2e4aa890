"""Which factor causes the drift: attribution over the rows of a sweep.

Pure functions, no I/O, over the rows :func:`sweep.report.summary.collect` returns: dicts with
``job`` (int), ``overrides`` (key -> value string), ``status`` and the metrics
``first_fail_step``, ``max_abs_diff``, ``mean_signed_diff`` (floats or ``None``).

Terms used throughout:

- *factor*: an override key whose value is not the same in every job; its values are
  its *levels* (a job without the key has level ``None``).
- *judged* job: status ``ok`` or ``fail``. Jobs with ``error``, ``timeout`` or
  ``missing`` have no verdict: they are counted and listed, but left out of pass
  rates, pairs and culprits.
- *one-factor pair*: two judged jobs whose levels differ in exactly one factor; it
  *flips* when one job passes and the other fails. Its *shift* is the change of
  ``mean_signed_diff`` (loss units) between the two jobs.
- *culprit*: a level ``f=v`` that, in its one-factor pairs along ``f``, fails where the
  other level passes more often than it passes where the other level fails.

What one job's evidence means (its first real step, onset and drift class) is
:mod:`sweep.analysis.evidence`'s; this module reads it over the jobs.
"""

from __future__ import annotations

import re

from collections import Counter, defaultdict
from itertools import combinations
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from sweep.analysis.compare import COPY_NOTE_KINDS, ONSET_RULE, RANDOM_DRAWS_NOTE
from sweep.analysis.evidence import DRIFT_CLASSES, DRIFT_RULE, class_gloss, drift_class, parting_step, rounding_only
from sweep.analysis.rounding import losses_within_floor, policy_departed, within_floor
from sweep.analysis.trace import ROUNDING_REL, UPDATE_ONSET_RULE
from sweep.config.roles import VERDICT, WORKLOAD

Row = Dict[str, Any]
NONFINITE = re.compile(r"non-finite loss from step (\d+) in both copies")  # sweep.analysis.judging.verdict's reason
Pair = Tuple[str, Row, Row]

STATUSES = ("ok", "fail", "error", "timeout", "missing")
JUDGED = ("ok", "fail")
ONSET_WORDS = {"abrupt": "an abrupt onset", "growth": "a steady growth", "noise": "random-sign noise"}


def factors(rows: Sequence[Row]) -> List[str]:
    """Override keys whose value differs between jobs (a key missing in a job counts
    as a value), in first-seen order."""
    keys: List[str] = []
    for row in rows:
        keys.extend(k for k in row["overrides"] if k not in keys)
    return [k for k in keys if len({row["overrides"].get(k) for row in rows}) > 1]


def _level(row: Row, factor: str) -> Optional[str]:
    return row["overrides"].get(factor)


def _levels(rows: Sequence[Row], factor: str) -> List[Optional[str]]:
    return list(dict.fromkeys(_level(r, factor) for r in rows))


def _judged(rows: Iterable[Row]) -> List[Row]:
    return [r for r in rows if r["status"] in JUDGED]


def _finite(values: Iterable[Optional[float]]) -> np.ndarray:
    arr = np.asarray([v for v in values if v is not None], dtype=np.float64)
    return arr[np.isfinite(arr)]


def _mean(values: Iterable[Optional[float]]) -> Optional[float]:
    arr = _finite(values)
    return float(np.mean(arr)) if arr.size else None


def _max(values: Iterable[Optional[float]]) -> Optional[float]:
    arr = _finite(values)
    return float(np.max(arr)) if arr.size else None


def _shift(a: Row, b: Row) -> Optional[float]:
    """``mean_signed_diff`` of ``a`` minus that of ``b``, or ``None`` if either is unknown."""
    if a["mean_signed_diff"] is None or b["mean_signed_diff"] is None:
        return None
    return a["mean_signed_diff"] - b["mean_signed_diff"]


def label(level: Optional[str]) -> str:
    """A level as shown in reports: ``(unset)`` for a job without the key."""
    return "(unset)" if level is None else str(level)


def level_stats(rows: Sequence[Row]) -> List[Dict[str, Any]]:
    """One dict per (factor, level), factors in :func:`factors` order, levels first-seen.

    Keys: ``factor``, ``level``, ``jobs`` (all jobs at that level), ``judged``,
    ``not_judged`` (error/timeout/missing), ``pass_rate_pct`` (share of judged jobs that
    pass, in %; ``None`` if none judged), ``mean_signed_diff`` (mean over the judged
    jobs, loss units), ``worst_abs_diff`` (largest ``max_abs_diff``); the last two are
    ``None`` when no judged job has a finite value.
    """
    stats = []
    for factor in factors(rows):
        for level in _levels(rows, factor):
            group = [r for r in rows if _level(r, factor) == level]
            judged = _judged(group)
            stats.append({
                "factor": factor,
                "level": level,
                "jobs": len(group),
                "judged": len(judged),
                "not_judged": len(group) - len(judged),
                "pass_rate_pct": float(100.0 * np.mean([r["status"] == "ok" for r in judged])) if judged else None,
                "mean_signed_diff": _mean(r["mean_signed_diff"] for r in judged),
                "worst_abs_diff": _max(r["max_abs_diff"] for r in judged),
            })
    return stats


def one_factor_pairs(rows: Sequence[Row]) -> List[Pair]:
    """All ``(factor, a, b)``: judged jobs ``a`` before ``b`` (row order) whose levels
    differ in ``factor`` and agree in every other factor."""
    keys = factors(rows)
    pairs: List[Pair] = []
    for factor in keys:
        groups: Dict[tuple, List[Row]] = defaultdict(list)
        for row in _judged(rows):
            groups[tuple(_level(row, k) for k in keys if k != factor)].append(row)
        pairs.extend(
            (factor, a, b)
            for group in groups.values()
            for a, b in combinations(group, 2)
            if _level(a, factor) != _level(b, factor)
        )
    return pairs


def contrasts(rows: Sequence[Row]) -> List[Dict[str, Any]]:
    """Per factor, over its one-factor pairs: ``factor``, ``pairs``, ``flips`` (pairs
    where one job passes and the other fails), ``flip_rate_pct`` (%, ``None`` without
    pairs), ``mean_abs_shift`` and ``max_abs_shift`` (``|Δ mean_signed_diff|`` between
    the two jobs, loss units; ``None`` without finite values)."""
    by_factor: Dict[str, List[Pair]] = defaultdict(list)
    for pair in one_factor_pairs(rows):
        by_factor[pair[0]].append(pair)
    out = []
    for factor in factors(rows):
        pairs = by_factor[factor]
        flips = sum(a["status"] != b["status"] for _, a, b in pairs)
        shifts = np.abs(_finite(_shift(a, b) for _, a, b in pairs))
        out.append({
            "factor": factor,
            "pairs": len(pairs),
            "flips": flips,
            "flip_rate_pct": 100.0 * flips / len(pairs) if pairs else None,
            "mean_abs_shift": float(np.mean(shifts)) if shifts.size else None,
            "max_abs_shift": float(np.max(shifts)) if shifts.size else None,
        })
    return out


def _oriented(pairs: Sequence[Pair], factor: str, level: Optional[str]) -> List[Tuple[Row, Row]]:
    """The pairs along ``factor`` as ``(job at level, job at another level)``."""
    return [
        (x, y)
        for f, a, b in pairs
        if f == factor
        for x, y in ((a, b), (b, a))
        if _level(x, factor) == level
    ]


def _flips_to_fail(oriented: Sequence[Tuple[Row, Row]]) -> List[Tuple[Row, Row]]:
    return [(x, y) for x, y in oriented if x["status"] == "fail" and y["status"] == "ok"]


def _signature(failing: Sequence[Row]) -> str:
    """Direction, onset and drift class of failing jobs, as a sentence fragment."""
    failing = list({r["job"]: r for r in failing}.values())  # a job can stand in several pairs
    diverged = [int(m.group(1)) for m in (NONFINITE.match(r.get("reason") or "") for r in failing) if m]
    if len(diverged) == len(failing):  # equal non-finite losses: no drift to describe
        return f"losses non-finite in both copies from step {min(diverged)} ({len(diverged)} of {len(failing)} jobs)"
    mean = _mean(r["mean_signed_diff"] for r in failing)
    signs = _finite(r["mean_signed_diff"] for r in failing)
    low, high = int(np.sum(signs < 0)), int(np.sum(signs > 0))
    if low and high:  # the mean would hide it: say which way each job drifts
        direction = f"runs low in {low} and high in {high} of {len(failing)} jobs"
    else:
        direction = "differs" if not mean else ("runs low" if mean < 0 else "runs high")
    detail = "mean signed diff " + ("nan" if mean is None else f"{mean:+.3g}")
    low = _mean(r.get("runs_low_pct") for r in failing)
    if low is not None:
        detail += f"; below standalone on {low:.0f}% of steps"
    return f"distributed {direction} ({detail}); {_onset_sentence(failing)}"


def precision_pointer(row: Row) -> Optional[str]:
    """Where a job's policy computes in another dtype than its standalone copy (a
    ``mp_policy.param_dtype`` against the default ``baseline.precision=float32``), the
    sentence that says so and names the comparison that holds the precision equal:
    ``baseline.precision=policy`` (the standalone copy under the same policy, on one
    rank). ``None`` otherwise (no record, no param_dtype, or already ``policy``)."""
    config = getattr(row.get("result"), "config", None) or {}
    param = ((config.get("mp_policy") or {}).get("param_dtype"))
    precision = str((config.get("baseline") or {}).get("precision") or "float32")
    if not param or precision == "policy" or str(param) == precision:
        return None
    return (f"mp_policy.param_dtype={param} against a {precision} standalone copy: the precision alone parts the "
            "copies at step 0, so this compares dtypes, not engines; baseline.precision=policy runs the standalone "
            "copy under the same policy and leaves what the engine does")


def precision_failures(rows: Sequence[Row]) -> Optional[str]:
    """The param dtype when every failing job parts at step 0 with a policy dtype its
    standalone copy does not compute in (:func:`precision_pointer`), else ``None``: the
    sweep then compares dtypes, and ``baseline.precision=policy`` is the comparison meant."""
    failing = [r for r in rows if r["status"] == "fail"]
    if not failing or any(drift_class(r) != "step0" or not precision_pointer(r) for r in failing):
        return None
    params = sorted({str(r["result"].config["mp_policy"]["param_dtype"]) for r in failing})
    return "/".join(params)


def onset_words(row: Row, cls: Optional[str]) -> str:
    """The onset in words (:data:`ONSET_WORDS`). A random-sign onset is called noise only
    where the job's repeats disagree (nondeterminism shown); otherwise its update errors
    take both signs, which a deterministic fault can do too: with repeats that agree it is
    deterministic, without repeats ``repeat=3`` tells."""
    if row.get("onset") != "noise":
        return ONSET_WORDS[row["onset"]]
    if row.get("nondeterministic"):
        return "random-sign noise (its repeats disagree)"
    if row.get("nondeterministic") is False:
        return "update errors of both signs, deterministic (its repeats agree): not noise"
    if cls == "rounding":
        return "update errors of both signs"
    return "update errors of both signs (noise only if repeats disagree: repeat=3 tells nondeterminism from a " \
           "deterministic cause)"


def _onset_sentence(jobs: Sequence[Row]) -> str:
    """Where the earliest of ``jobs`` parts from standalone, with that same job's class
    (so the step and the class never come from different jobs), and how many share it."""
    jobs = [r for r in jobs if drift_class(r)]
    if not jobs:
        return "no step-level detail recorded"
    jobs = [r for r in jobs if drift_class(r) != "rounding"] or jobs  # a real drift first
    first = min(jobs, key=lambda r: (parting_step(r), r["job"]))
    cls = drift_class(first)
    step = first.get("first_diff_step", first.get("first_fail_step"))
    period = f", every {first['period']} steps" if cls == "periodic" and first.get("period") else ""
    same = sum(drift_class(r) == cls for r in jobs)
    text = f"parts from standalone at step {step} (job {first['job']}"
    parting = parting_step(first)
    if parting > step:
        text += f"; by float rounding, beyond it from step {parting}"
    elif parting < step:  # the losses rounded it away for a few steps
        text += f"; the weights differ beyond float rounding after update {parting - 1} already"
    if first.get("first_fail_step") is not None and first["first_fail_step"] != step:
        text += f"; first outside tolerance at step {first['first_fail_step']}"
    text += f"), {cls}{period} ({class_gloss(first, cls)})"
    pointer = precision_pointer(first) if cls == "step0" else None
    if pointer:
        text += f"; {pointer}"
    if first.get("onset") in ONSET_WORDS:
        text += f", {onset_words(first, cls)}"
        if first.get("onset_until") is not None:
            text += (f", over after update {first['onset_until']} (a fault on a few steps only: what differs "
                     "later is its aftermath)")
    if first.get("first_module"):
        text += f"; first differing module: {first['first_module']}"
    if first.get("first_tensor"):
        again = " (from another launch of this nondeterministic job)" if first.get("nondeterministic") else ""
        text += f"; first differing tensor{again}: {first['first_tensor']}"
    if len(jobs) > 1:
        text += f"; {same} of {len(jobs)} such jobs are {cls}"
    return text


def culprits(rows: Sequence[Row]) -> List[Dict[str, Any]]:
    """Culprit levels, most convincing first.

    Keys: ``factor``, ``level``, ``pairs`` (its one-factor pairs along the factor),
    ``to_fail`` (pairs where it fails and the other level passes), ``to_pass`` (the
    reverse), ``score`` (``(to_fail - to_pass) / pairs``, in (0, 1]), ``mean_shift``
    (mean ``Δ mean_signed_diff`` towards this level, loss units, or ``None``),
    ``evidence`` (one sentence). Ranked by score, then ``to_fail``, then ``|mean_shift|``.
    Ranked by score, then ``to_fail``, then a level that causes the drift before one that
    only exposes it (``exposes_only``), then a level of a non-workload factor before a
    workload's (:func:`workload_factor`), then by name. An empty list when no one-factor
    change turns a pass into a fail.
    """
    pairs = one_factor_pairs(rows)
    found = []
    for factor in factors(rows):
        for level in _levels(rows, factor):
            oriented = _oriented(pairs, factor, level)
            to_fail = _flips_to_fail(oriented)
            to_pass = sum(x["status"] == "ok" and y["status"] == "fail" for x, y in oriented)
            if len(to_fail) <= to_pass:
                continue
            passing = [y for _, y in oriented if y["status"] == "ok"]
            others = "/".join(label(v) for v in _levels(passing, factor))
            evidence = (
                f"{factor}={label(level)}: fails in {len(to_fail)} of {len(passing)} one-factor pairs where "
                f"{factor}={others} passes; {_signature([x for x, _ in to_fail])}"
            )
            if to_pass:
                evidence += f"; passes in {to_pass} pairs where the other level fails"
            hidden = [y for _, y in to_fail if y.get("first_diff_step") is not None and not rounding_only(y)]
            exposes = bool(to_fail) and len(hidden) == len(to_fail)
            rounded = [y for _, y in to_fail if y.get("first_diff_step") is not None and rounding_only(y)]
            if rounded and not exposes:  # a side within rounding: no "present at both levels" rests on it
                evidence += (f"; the passing {factor}={others} jobs differ from standalone by float rounding only "
                             f"(max |diff| {_max(y['max_abs_diff'] for y in rounded):.3g}), not by the drift")
            if exposes:
                worst_fail = _max(x["max_abs_diff"] for x, _ in to_fail)
                worst_pass = _max(y["max_abs_diff"] for y in hidden)
                evidence += (
                    f"; but the passing {factor}={others} jobs differ from standalone too, below tolerance "
                    f"(max |diff| {worst_pass:.3g} against {worst_fail:.3g}): the drift is present at both levels, "
                    f"{factor}={label(level)} exposes it and {factor}={others} hides it below tolerance; "
                    f"{factor} changes its size, it does not cause it"
                )
            drawn = all(_has_note(x, RANDOM_DRAWS_NOTE) for x, _ in to_fail)
            if drawn:
                evidence += f"; but every such failing job notes: {RANDOM_DRAWS_NOTE}"
            found.append({
                "factor": factor,
                "level": level,
                "random_draws_only": drawn,
                "pairs": len(oriented),
                "to_fail": len(to_fail),
                "to_pass": to_pass,
                "score": (len(to_fail) - to_pass) / len(oriented),
                "mean_shift": _mean(_shift(x, y) for x, y in oriented),
                "exposes_only": exposes,
                "passing_pairs": len(passing),  # the pairs where the other level passes
                "other_levels": others,
                "failing_jobs": sorted({x["job"] for x, _ in to_fail}),
                "evidence": evidence,
            })
    # Ties are ties: the order depends on the evidence (pairs), never on sub-tolerance noise
    # or on the order the factors were typed in; equal ones are reported together (ties()).
    # of culprits weighed alike, one that causes the drift before one that only exposes it
    # and, of those, a level of how the copies train before one of what they train (a workload's:
    # sharded data that lets a clip-before-reduce fault show exposes it, the engine carries it)
    return sorted(found, key=lambda c: (-c["score"], -c["to_fail"], bool(c["exposes_only"]),
                                        workload_factor(c["factor"]), c["factor"], label(c["level"])))


def ties(ranked: Sequence[Dict[str, Any]], rows: Sequence[Row]) -> List[Dict[str, Any]]:
    """The culprits that this sweep cannot tell from the top one: equal score and flips,
    failing in the same jobs. With each, the smallest extra job that would separate it
    from the top one: a failing job's overrides with the tie's factor set to another
    level (if that job fails, the top culprit is enough; if it passes, the tie matters).
    Keys: ``factor``, ``level``, ``separate_with`` (override strings), ``separating_job``
    (that job, where it ran), ``together`` (it ran and passed equal to standalone or within
    float rounding: the two fail only together) and ``exposes`` (it ran and passed, but
    differs from standalone beyond rounding: the drift is there without the tie's level,
    below tolerance, so the tie only exposes it)."""
    if not ranked:
        return []
    top = ranked[0]
    found = []
    for c in ranked[1:]:
        if (c["score"], c["to_fail"], c["failing_jobs"]) != (top["score"], top["to_fail"], top["failing_jobs"]):
            continue
        job = next(r for r in rows if r["job"] == top["failing_jobs"][0])
        other = next((v for v in _levels(rows, c["factor"]) if v != c["level"]), None)
        overrides = dict(job["overrides"], **{c["factor"]: other}) if other is not None else job["overrides"]
        ran = next((r for r in rows if r["overrides"] == overrides and r["status"] in ("ok", "fail")), None)
        passed = ran is not None and ran["status"] == "ok"
        hidden = passed and ran.get("first_diff_step") is not None and not rounding_only(ran)
        found.append({"factor": c["factor"], "level": c["level"],
                      "separate_with": sorted(f"{k}={v}" for k, v in overrides.items() if v is not None),
                      # the separating job ran already and passed: the two fail only together, unless
                      # it carries the drift below tolerance (the tie's level only exposes it)
                      "together": passed and not hidden, "exposes": hidden, "separating_job": ran and ran["job"]})
    return found


def _exposer_sentence(rows: Sequence[Row], tie: Dict[str, Any]) -> str:
    """``optimizer=sgd exposes it, not causes it: job 2 (optimizer=adam) passes but differs
    from standalone too ...``, for a tie of :func:`ties` with ``exposes``."""
    job = next(r for r in rows if r["job"] == tie["separating_job"])
    return (f"{tie['factor']}={label(tie['level'])} exposes it, it does not cause it: job {job['job']} "
            f"({tie['factor']}={label(_other(rows, tie))}) passes but differs from standalone too, below tolerance "
            f"(max |diff| {float(job.get('max_abs_diff') or 0.0):.3g}, from step {job.get('first_diff_step')}), "
            f"so {tie['factor']}={label(_other(rows, tie))} hides the drift, it does not remove it")


def departures(row: Row) -> set:
    """The job's departures from its engine's contract: the notes of its collective ledger
    and of its optimizer as it ran (``JobRecord.collectives["notes"]``,
    ``JobRecord.optimizer["notes"]``: ``no all_reduce over dp_replicate in step 0``, ...)."""
    result = row.get("result")
    found = set()
    for part in (getattr(result, "collectives", None), getattr(result, "optimizer", None)):
        if isinstance(part, dict):
            found.update(str(n) for n in part.get("notes") or [])
    return found


def hiding_kind(factor: str) -> Optional[str]:
    """What a swept ``factor`` (a field, ``data.split``, or a config group, ``optimizer``) sets
    when it is no place for a fix: ``"workload"`` (role ``workload``, ``sweep.config.roles``:
    what both copies train; another level is another experiment, replicated data where a
    clip-before-reduce fault cannot show, another optimizer), ``"verdict"`` (role
    ``verdict``: how the copies are judged, a looser tolerance); ``None`` for the rest (how
    the copies train: the engine, the transfer, the precision policy ...). A level of either
    can hide a fault, never fix it."""
    from sweep.config.schema import fields_with  # the schema imports Hydra: only when judged

    for role in (WORKLOAD, VERDICT):
        paths = fields_with(role)
        if factor in paths or any(p.startswith(factor + ".") for p in paths):
            return role
    return None


def workload_factor(factor: str) -> bool:
    """Whether ``factor`` can only hide a fault (:func:`hiding_kind`: a workload's or a
    verdict's)."""
    return hiding_kind(factor) is not None


def fixes(rows: Sequence[Row], workload: bool = False) -> List[Dict[str, Any]]:
    """The overrides this sweep proves to be a fix: ``factor=level`` such that every failing
    job, with that one factor set to ``level`` and nothing else changed, ran in this sweep
    and passes, equal to standalone or within float rounding (:func:`rounding_only`). A
    level under which the jobs still differ beyond rounding, below tolerance, hides the
    drift (Adam's normalisation of a scaled gradient): it is no fix, and is not listed; nor
    is one whose passing job carries a departure from the engine's contract that its
    failing job has too (:func:`departures`: a collective missing in both, which the level
    only hides). None is listed when the failing jobs draw random numbers on sharded data,
    nor a level of a :func:`workload_factor` (it changes what both copies train: it hides
    the fault); ``workload=True`` lists those alone (the levels that hide it so).

    Returns ``[{"factor", "level", "override" (``"k=v"``), "jobs" ([[failing, passing], ...])}]``,
    sorted by override, so the typed order of the factors never changes it; empty when
    nothing fails or no level passes for every failing job."""
    failing = [r for r in rows if r["status"] == "fail"]
    if not failing or any(_has_note(r, RANDOM_DRAWS_NOTE) for r in failing):
        return []
    by_overrides = {tuple(sorted((k, str(v)) for k, v in r["overrides"].items())): r for r in _judged(rows)}
    found = []
    for factor in factors(rows):
        if workload_factor(factor) != workload:
            continue
        for level in _levels(rows, factor):
            jobs = []
            for x in failing:
                key = tuple(sorted((k, str(v)) for k, v in dict(x["overrides"], **{factor: level}).items()))
                y = by_overrides.get(key)
                if y is None or y is x or y["status"] != "ok" or (
                        y.get("first_diff_step") is not None and not rounding_only(y)) or (
                        departures(x) & departures(y)):  # the same departure, hidden: no fix
                    break
                jobs.append([x["job"], y["job"]])
            else:
                found.append({"factor": factor, "level": level, "override": f"{factor}={label(level)}", "jobs": jobs})
    return sorted(found, key=lambda f: f["override"])


def fix_sentence(rows: Sequence[Row]) -> Optional[str]:
    """One sentence naming :func:`fixes`, with the pairs that prove the first; where only a
    workload level passes every failing job, a sentence that it hides the drift and is no
    fix; ``None`` when the sweep proves neither."""
    found = fixes(rows)
    if not found:
        hiding = fixes(rows, workload=True)
        if not hiding:
            return None
        names = " or ".join(f["override"] for f in hiding[:3])
        what = {"workload": "sets what both copies train (the workload)",
                "verdict": "sets how the copies are judged (the tolerance)"}
        why = "; ".join(f"{factor} {what[hiding_kind(factor) or 'workload']}"
                        for factor in dict.fromkeys(f["factor"] for f in hiding[:3]))
        return (f"No fix proven: {names} passes in every failing job's place, but {why}, so it hides the drift, "
                "it does not fix it")
    pairs = found[0]["jobs"]
    shown = ", ".join(f"{a} -> {b}" for a, b in pairs[:4]) + (f" (+{len(pairs) - 4})" if len(pairs) > 4 else "")
    names = " or ".join(f["override"] for f in found[:3])
    return (f"Fix proven by this sweep: {names}; every failing job passes with it, nothing else changed "
            f"(jobs {shown})")


def _other(rows: Sequence[Row], tie: Dict[str, Any]) -> Any:
    """The level of ``tie``'s factor in its separating job."""
    job = next(r for r in rows if r["job"] == tie["separating_job"])
    return job["overrides"].get(tie["factor"])


def scalers(rows: Sequence[Row]) -> List[Dict[str, Any]]:
    """Factors that scale the drift or flip its sign, from one-factor pairs in which both
    jobs differ from standalone beyond float rounding (neither :func:`rounding_only` nor with
    losses within its rounding floor, ``sweep.analysis.rounding.losses_within_floor``): ``{factor, level, other, ratio, pairs, sign_flips,
    evidence}``. ``ratio`` is the geometric mean of ``max_abs_diff`` at ``level`` over
    that at ``other`` (reported when >= 2); ``sign_flips`` counts pairs whose
    ``mean_signed_diff`` have opposite signs (reported when most pairs do)."""
    pairs = [(f, a, b) for f, a, b in one_factor_pairs(rows)
             if (a.get("max_abs_diff") or 0) > 0 and (b.get("max_abs_diff") or 0) > 0
             and not (rounding_only(a) or rounding_only(b))  # rounding has a size and a sign, but no cause
             and not (losses_within_floor(a) or losses_within_floor(b))]  # nor do losses within their floor
    out = []
    for factor in factors(rows):
        for level in _levels(rows, factor):
            for other in _levels(rows, factor):
                if other == level:
                    continue
                both = [(x, y) for f, a, b in pairs if f == factor for x, y in ((a, b), (b, a))
                        if _level(x, factor) == level and _level(y, factor) == other]
                if not both:
                    continue
                ratio = float(np.exp(np.mean([np.log(x["max_abs_diff"] / y["max_abs_diff"]) for x, y in both])))
                flips = sum((x["mean_signed_diff"] or 0) * (y["mean_signed_diff"] or 0) < 0 for x, y in both)
                parts = []
                if ratio >= 2.0:
                    parts.append(f"scales the drift {ratio:.1f}x against {factor}={label(other)}")
                if flips * 2 > len(both) and label(level) < label(other):
                    parts.append(f"flips its sign against {factor}={label(other)} ({flips} of {len(both)} pairs)")
                if parts:
                    out.append({"factor": factor, "level": level, "other": other, "ratio": ratio,
                                "pairs": len(both), "sign_flips": flips,
                                "evidence": f"{factor}={label(level)} " + " and ".join(parts)
                                            + f" ({len(both)} one-factor pairs where both differ)"})
    return out


def confounded(rows: Sequence[Row]) -> Optional[Dict[str, Any]]:
    """When no single factor separates a failing job from a passing one: the failing job
    and its nearest passing job (fewest differing factors), the factors in which they
    differ together, and for each of those factors the extra job that would test it alone
    (the failing job's overrides with that factor at the passing job's level). ``None``
    when some pair differs in one factor only, or nothing both fails and passes."""
    judged = _judged(rows)
    fails = [r for r in judged if r["status"] == "fail"]
    passes = [r for r in judged if r["status"] == "ok"]
    keys = factors(rows)
    best = None
    for f in fails:
        for p in passes:
            differ = [k for k in keys if _level(f, k) != _level(p, k)]
            if best is None or len(differ) < len(best[2]):
                best = (f, p, differ)
    if best is None or len(best[2]) < 2:
        return None
    f, p, differ = best
    separate = {k: sorted(f"{key}={value}" for key, value in dict(f["overrides"], **{k: _level(p, k)}).items()
                          if value is not None) for k in differ}
    return {"failing": f["job"], "passing": p["job"],
            "factors": [{"factor": k, "failing_level": _level(f, k), "passing_level": _level(p, k)} for k in differ],
            "separate_with": separate}


def notes_summary(rows: Sequence[Row]) -> Optional[str]:
    """The notes of the jobs (settings without effect, policies not applied, ranks that
    disagree, engine workarounds, emulated collectives), counted by kind, in one sentence."""
    kinds: Counter = Counter()
    for row in rows:
        for note in (row.get("notes") or "").split("; "):
            if note:
                kinds[note.split(":")[0].split(" (")[0]] += 1
    if not kinds:
        return None
    return "Notes: " + "; ".join(f"{kind} ({n} job{'s' if n > 1 else ''})" for kind, n in kinds.most_common(6))


REPLICAS_NOTE = "replicas disagree from step "  # the start of a job's note (sweep.report.summary)


def replica_jobs(rows: Sequence[Row]) -> List[int]:
    """The jobs whose replicas disagree (ranks holding the same shards, different values)."""
    return [r["job"] for r in rows if any(n.startswith(REPLICAS_NOTE) for n in (r.get("notes") or "").split("; "))]


def replica_sentence(rows: Sequence[Row]) -> Optional[str]:
    """``Replicas disagree in jobs 3, 5 (job 3: replicas disagree from step 1 (ranks 0 and 2)):
    ranks that hold the same shards hold different values, the reduction across replicas
    is missing or wrong``; ``None`` when every job's replicas agree."""
    jobs = replica_jobs(rows)
    if not jobs:
        return None
    first = next(r for r in rows if r["job"] == jobs[0])
    note = next(n for n in (first.get("notes") or "").split("; ") if n.startswith(REPLICAS_NOTE))
    listed = ", ".join(map(str, jobs))
    start = [r for r in rows if r["job"] in jobs and r.get("first_tensor_kind") == "initial"
             and note.startswith(REPLICAS_NOTE + "0")]
    cause = ("the copies start apart there (job {}: {}): an initialisation that differs by rank, not the "
             "reduction".format(start[0]["job"], start[0]["first_tensor"]) if start
             else "the reduction across replicas is missing or wrong")
    return (f"Replicas disagree in job{'s' if len(jobs) > 1 else ''} {listed} (job {jobs[0]}: {note}): ranks that "
            f"hold the same shards hold different values; {cause}")


def _has_note(row: Row, note: str) -> bool:
    return note in (row.get("notes") or "").split("; ")


def copy_notes(rows: Sequence[Row]) -> Optional[str]:
    """The notes saying the two copies are not equal in what they draw or hold
    (``sweep.analysis.compare.COPY_NOTE_KINDS``: random draws under sharded data, tensors
    only one copy holds), each in full with its jobs, in one sentence; ``None`` without."""
    jobs: Dict[str, List[int]] = defaultdict(list)
    for row in rows:
        for note in (row.get("notes") or "").split("; "):
            if note.split(":")[0] in COPY_NOTE_KINDS:
                jobs[note].append(row["job"])
    if not jobs:
        return None
    return "Copies not equal: " + "; ".join(
        f"{note} (job{'s' if len(js) > 1 else ''} {', '.join(map(str, js))})" for note, js in jobs.items())


def nondeterministic_jobs(rows: Sequence[Row]) -> List[Dict[str, Any]]:
    """The jobs whose repeats disagree (``repeat=N``; ``sweep.run.repeats.run_repeats``): ``job``,
    ``status`` (repeat 0's), ``overrides``, ``spread`` (``repeat_spread`` of the record)."""
    return [{"job": r["job"], "status": r["status"], "overrides": r["overrides"], "spread": r.get("repeat_spread")}
            for r in rows if r.get("nondeterministic")]


def _spread_text(spread: Optional[Dict[str, Any]]) -> str:
    spread = spread or {}
    worst = max(spread.get("distributed_max_abs") or 0.0, spread.get("standalone_max_abs") or 0.0)
    text = f"{spread.get('repeats', '?')} repeats differ by up to {worst:.3g}"
    statuses = spread.get("statuses") or []
    if len(set(statuses)) > 1:
        text += f", status {'/'.join(statuses)}"
    fails = spread.get("first_fail_range")
    if fails:
        text += f", first failing step {fails[0]}" + (f"-{fails[1]}" if fails[1] != fails[0] else "")
    return text


def repeats_sentence(rows: Sequence[Row], evidence: Optional[Iterable[int]] = None) -> Optional[str]:
    """What the repeats say about the verdict: the nondeterministic jobs with their spread,
    and whether the verdict rests on them (``evidence``: the jobs it rests on; ``None``:
    all judged jobs); or that every repeated job's repeats agree; ``None`` without repeats."""
    nd = [r for r in nondeterministic_jobs(rows) if r["status"] in JUDGED]
    if not nd:
        repeated = [r for r in _judged(rows) if r.get("nondeterministic") is False]
        if not repeated:
            return None
        return (f"Repeats agree: each of the {len(repeated)} repeated job{'s' if len(repeated) > 1 else ''} gave the "
                "same losses in every launch")
    listed = "; ".join(f"job {r['job']} ({_spread_text(r['spread'])})" for r in nd)
    jobs = set(evidence) if evidence is not None else {r["job"] for r in _judged(rows)}
    if any(r["job"] in jobs for r in nd):
        return (f"Nondeterministic: {listed}; this verdict rests on {'them' if len(nd) > 1 else 'it'}, and a "
                "rerun may judge differently")
    return f"Nondeterministic, but not part of the evidence above: {listed}"


def interactions(rows: Sequence[Row], ranked: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Culprits that flip pass/fail only under some levels of another factor.

    For each culprit ``f=v`` of ``ranked`` (from :func:`culprits`) and each other factor
    ``g``, its pairs are split by the level of ``g`` they share; reported when it turns
    a pass into a fail under some levels of ``g`` (``with_levels``) and never under
    others that have pairs (``without_levels``). Keys: ``factor``, ``level``,
    ``with_factor``, ``with_levels``, ``flips``/``pairs`` (under ``with_levels``),
    ``without_levels``, ``without_pairs``, ``evidence``. A symmetric finding
    (``f=v`` only with ``g=w`` and ``g=w`` only with ``f=v``) is reported once.
    """
    pairs = one_factor_pairs(rows)
    found, seen = [], set()
    for culprit in ranked:
        factor, level = culprit["factor"], culprit["level"]
        oriented = _oriented(pairs, factor, level)
        for other in (g for g in factors(rows) if g != factor):
            by_level: Dict[Optional[str], List[Tuple[Row, Row]]] = defaultdict(list)
            for x, y in oriented:
                by_level[_level(x, other)].append((x, y))
            flips = {w: len(_flips_to_fail(group)) for w, group in by_level.items()}
            with_levels = [w for w, n in flips.items() if n]
            without_levels = [w for w, n in flips.items() if not n]
            key = frozenset({(factor, (level,)), (other, tuple(with_levels))})
            if not with_levels or not without_levels or key in seen:
                continue
            seen.add(key)
            n_flips, n_with = sum(flips.values()), sum(len(by_level[w]) for w in with_levels)
            n_without = sum(len(by_level[w]) for w in without_levels)
            found.append({
                "factor": factor,
                "level": level,
                "with_factor": other,
                "with_levels": with_levels,
                "flips": n_flips,
                "pairs": n_with,
                "without_levels": without_levels,
                "without_pairs": n_without,
                "evidence": (
                    f"{factor}={label(level)} turns a pass into a fail only when "
                    f"{other}={'/'.join(label(w) for w in with_levels)} ({n_flips} of {n_with} pairs), "
                    f"never when {other}={'/'.join(label(w) for w in without_levels)} (0 of {n_without} pairs)"
                ),
            })
    return found


def _short(reason: Optional[str], width: int = 120) -> str:
    text = (reason or "no reason recorded").splitlines()[0]
    return text if len(text) <= width else text[: width - 3] + "..."


def verdict(rows: Sequence[Row], ranked: Sequence[Dict[str, Any]], found: Sequence[Dict[str, Any]]) -> str:
    """One paragraph: job counts by status, then the culprit with its evidence (or why
    none is named). ``ranked`` from :func:`culprits`, ``found`` from :func:`interactions`."""
    if not rows:
        return "0 jobs: nothing to judge."
    counts = Counter(r["status"] for r in rows)
    text = f"{len(rows)} job{'s' if len(rows) != 1 else ''}: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES
                                                                         if counts[s])
    not_judged = len(rows) - len(_judged(rows))
    if not_judged:
        text += f"; {not_judged} not judged (error/timeout/missing: excluded from pass rates, listed below)"
    if not _judged(rows):
        reasons = Counter(_short(r.get("reason")) for r in rows)
        listed = "; ".join(f"{n} x {reason}" for reason, n in reasons.most_common(3))
        return text + f". Nothing could be judged: no job produced a comparison ({listed})."
    notes = notes_summary(rows)

    scaled = "".join(f" {s['evidence']}." for s in scalers(rows)[:3])

    unequal = copy_notes(rows)
    replicas = replica_sentence(rows)

    def tails(evidence: Optional[Iterable[int]] = None) -> str:
        repeats = repeats_sentence(rows, evidence)
        return scaled + (f" {repeats}." if repeats else "") + (f" {replicas}." if replicas else "") + \
            (f" {unequal}." if unequal else "") + (f" {notes}." if notes else "")

    tail = tails()
    if not counts["fail"]:
        differ = [r for r in _judged(rows) if drift_class(r)]
        verb = "differs" if len(differ) == 1 else "differ"
        if differ and all(rounding_only(r) for r in differ):
            floored = [r for r in differ if within_floor(r)]
            how = (f"traced tensors within rel {ROUNDING_REL:g}, or grown past it with random signs below tolerance: "
                   "summation order, e.g. of sharded data")
            if floored:
                worst = max(floored, key=lambda r: float(r["max_rel_diff"]) / float(r["rounding_floor"]["rel"]))
                floor = worst["rounding_floor"]
                how = (f"{len(floored)} with losses within their rounding floor, the largest at "
                       f"{float(worst['max_rel_diff']) / float(floor['rel']):.2g}x it (job {worst['job']}: "
                       f"rel {float(worst['max_rel_diff']):.2g} against {float(floor['rel']):.2g}, {floor['dtype']}); "
                       + ("the rest " + how if len(floored) < len(differ) else "no sign or size of theirs is a contrast"))
                lowered = [r for r in floored if precision_pointer(r)]
                if lowered:  # (named by the dtype those jobs compute in, not the worst job's)
                    dtypes = sorted({str(r["rounding_floor"]["dtype"]) for r in lowered})
                    how += (f"; a {' or '.join(dtypes)} forward against a float32 standalone copy rounds "
                            f"{'them' if len(lowered) == len(floored) else f'{len(lowered)} of them'}, "
                            "baseline.precision=policy compares the engines alone")
            return text + (f". No culprit: every judged job passes; {len(differ)} {verb} from standalone by float "
                           f"rounding only ({how}), which no factor causes.") + tail
        real = [r for r in differ if not rounding_only(r)]
        carrier = _carrier(rows, real) if real and len(real) < len(differ) else None
        if carrier is not None:  # a drift below tolerance that some levels carry, the rest rounding only
            names, held = carrier
            share = f"all {held} of its jobs" if held == len(real) else f"{len(real)} of its {held} jobs"
            return text + (f". No job fails, but {len(real)} differ from standalone beyond float rounding, below "
                           f"tolerance: jobs with {names} ({share}), a drift too small to fail at this tolerance; "
                           f"the other {len(differ) - len(real)} differ by rounding only. "
                           f"The earliest {_onset_sentence(real)}.") + tail
        if differ:
            return text + (f". No job fails, but {len(differ)} {verb} from standalone below tolerance; the earliest "
                           f"{_onset_sentence(differ)}.") + tail
        printed = _max(r.get("resolution") for r in _judged(rows))
        if printed is not None:  # losses read from rounded text: never "bit for bit"
            return text + (f". No culprit: every judged job passes, equal to the printed precision ({printed:.0e}) "
                           "of its losses.") + tail
        return text + ". No culprit: every judged job passes, bit for bit where the run is deterministic." + tail
    if ranked:
        top = ranked[0]
        evidence = {row["job"] for pair in _oriented(one_factor_pairs(rows), top["factor"], top["level"])
                    for row in pair}
        fix = fix_sentence(rows)
        tail = (f" {fix}." if fix else "") + tails(evidence)
        only = [i for i in found if (i["factor"], i["level"]) == (top["factor"], top["level"])]
        context = f"; only with {only[0]['with_factor']}={'/'.join(map(label, only[0]['with_levels']))}" if only else ""
        word = "Exposed by (not caused by)" if top.get("exposes_only") else "Culprit"
        if top.get("random_draws_only"):
            word = "No culprit from this alone (the failing jobs draw random numbers on sharded data)"
        tied = ties(ranked, rows)
        together = [t for t in tied if t["together"]]
        exposers = [t for t in tied if t["exposes"]]
        tied = [t for t in tied if not t["together"] and not t["exposes"]]
        if together:
            names = " and ".join([f"{top['factor']}={label(top['level'])}"]
                                 + [f"{t['factor']}={label(t['level'])}" for t in together])
            text += (f". Only together: {names} fail in the same jobs, and "
                     + "; ".join(f"job {t['separating_job']} ({t['factor']}={label(_other(rows, t))}) passes"
                                 for t in together) + ": an interaction, not one factor")
            word = "Evidence" if word == "Culprit" else word
        if tied:
            names = " or ".join([f"{top['factor']}={label(top['level'])}"]
                                + [f"{t['factor']}={label(t['level'])}" for t in tied])
            text += (f". Indistinguishable in this sweep: {names} (they fail in the same jobs); to separate them, "
                     f"add the job {' '.join(tied[0]['separate_with'])}. {word}: {top['evidence']}{context}.")
        else:
            text += f". {word}: {top['evidence']}{context}."
        for t in exposers:
            text += " " + _exposer_sentence(rows, t) + "."
        rest = [c for c in ranked[1:]
                if (c["factor"], c["level"]) not in {(t["factor"], t["level"]) for t in tied + together + exposers}]
        # weighed alike with the top one (the headline names them with it), failing other jobs
        alike = [c for c in rest if (c["score"], c["to_fail"], bool(c.get("exposes_only")))
                 == (top["score"], top["to_fail"], bool(top.get("exposes_only")))
                 and not c.get("random_draws_only")][:2]
        if alike:
            text += (" Weighed alike with it: " + ", ".join(f"{c['factor']}={label(c['level'])}" for c in alike)
                     + " (the same score, in other jobs): " + "; ".join(c["evidence"] for c in alike) + ".")
        rest = [c for c in rest if c not in alike]
        if rest:
            text += " Also: " + ", ".join(f"{c['factor']}={label(c['level'])}" for c in rest[:3]) + "."
        return text + tail
    mixed = confounded(rows)
    if mixed is not None:
        names = " or ".join(f"{f['factor']}={label(f['failing_level'])}" for f in mixed["factors"])
        first = mixed["factors"][0]["factor"]
        return text + (
            f". No single swept factor separates a failing job from a passing one: the nearest pair (job "
            f"{mixed['failing']} fails, job {mixed['passing']} passes) differs in "
            f"{', '.join(f['factor'] for f in mixed['factors'])} together. Indistinguishable in this sweep: {names} "
            f"(or only together); to separate them, add the job {' '.join(mixed['separate_with'][first])}."
        ) + tail
    if not one_factor_pairs(rows):
        return text + ". No culprit can be named: no two judged jobs differ in exactly one factor." + tail
    dtype = precision_failures(rows)
    precision = (f" Every failing job computes in mp_policy.param_dtype={dtype} against a float32 standalone copy "
                 "and parts from it at step 0: the precision alone does that. baseline.precision=policy runs the "
                 "standalone copy under the same policy, which leaves what the engine does.") if dtype else ""
    return text + (
        ". No culprit among the swept factors: no one-factor change turns a pass into a fail"
        + (" (every judged job fails: the drift is common to all of them)." if not counts["ok"] else ".")
    ) + precision + tail


def _carrier(rows: Sequence[Row], real: Sequence[Row]) -> Optional[Tuple[str, int]]:
    """Where every job of ``real`` (the jobs beyond float rounding) shares levels that some
    other jobs lack: ``("k=v or k=w", m)``, the factor's levels that hold them (the factors
    whose levels hold the fewest jobs, ``m``, joined by " and "), or ``None`` (no factor
    narrows them, or nothing to narrow)."""
    if not real:
        return None
    found = []
    for factor in factors(rows):
        levels = list(dict.fromkeys(_level(r, factor) for r in real))
        if len(levels) == len(_levels(rows, factor)):
            continue  # every level holds one: it does not narrow them
        jobs = [r for r in rows if _level(r, factor) in levels]
        found.append((len(jobs), factor, levels))
    if not found:
        return None
    fewest = min(n for n, _, _ in found)
    names = " and ".join(f"{factor}=" + " or ".join(label(v) for v in levels)
                         for n, factor, levels in found if n == fewest)
    return names, fewest


def _separating_level(rows: Sequence[Row], differ: Sequence[Row]) -> Optional[Tuple[str, Any]]:
    """The one ``(factor, level)`` whose jobs are exactly the jobs in ``differ``, if any
    (the first in factor order)."""
    nums = {r["job"] for r in differ}
    for factor in factors(rows):
        for level in _levels(rows, factor):
            if {r["job"] for r in rows if _level(r, factor) == level} == nums:
                return factor, level
    return None


def headline(rows: Sequence[Row], ranked: Sequence[Dict[str, Any]]) -> str:
    """The verdict in at most three short sentences, without nested parentheses: the job
    counts; then the deciding factor with its evidence, or, when nothing fails, the factor
    that changes the losses at all and by how much against the tolerance
    (``tolerance_ratio``: the largest ``|diff| / (atol + rtol |standalone|)`` of a job,
    ``numpy.isclose``'s bound); the details are :func:`verdict`'s."""
    if not rows:
        return "0 jobs: nothing to judge."
    counts = Counter(r["status"] for r in rows)
    text = f"{len(rows)} job{'s' if len(rows) != 1 else ''}: " + ", ".join(
        f"{counts[s]} {s}" for s in STATUSES if counts[s]) + "."
    judged = _judged(rows)
    if not judged:
        return text + " Nothing could be judged: no job produced a comparison."
    if counts["fail"]:
        if not ranked:
            split = replica_jobs([r for r in rows if r["status"] == "fail"])
            if split:
                return text + (f" Replicas disagree in {len(split)} of the failing jobs: the reduction across "
                               "replicas is missing or wrong.")
            dtype = precision_failures(rows)
            if dtype:
                return text + (f" Each parts at step 0 by its {dtype} parameters against a float32 standalone copy: "
                               "compare with baseline.precision=policy.")
            return text + " No single swept factor decides it: see the details."
        top = ranked[0]
        name = f"{top['factor']}={label(top['level'])}"
        if top.get("random_draws_only"):
            return text + f" No culprit: the failing {name} jobs draw random numbers on sharded data."
        word = "Exposed by, not caused by" if top.get("exposes_only") else "Culprit"
        # culprits the sweep weighs alike (the same score and flips, each failing other jobs): all named
        # (another level of the same factor too: two levels that both fail are both named)
        equal = [c for c in ranked if c is not top
                 and (c["score"], c["to_fail"], bool(c.get("exposes_only")), bool(c.get("random_draws_only")))
                 == (top["score"], top["to_fail"], bool(top.get("exposes_only")), False)][:2]
        tied = ties(ranked, rows)
        together = [t for t in tied if t["together"]]  # as the details say: an interaction
        exposers = [t for t in tied if t["exposes"]]  # as the details say: they expose it, named after it
        equal = [c for c in equal if (c["factor"], c["level"]) not in {(t["factor"], t["level"]) for t in exposers}]
        named = [top, *equal]
        failing = [r for r in rows if r["job"] in {j for c in named for j in c.get("failing_jobs") or []}]
        steps = [s for s in (parting_step(r) for r in failing) if s is not None]
        classes = Counter(c for c in (drift_class(r) for r in failing) if c)
        where = f" They part from standalone from step {min(steps)}" if steps else ""
        diverged = [int(m.group(1)) for m in (NONFINITE.match(r.get("reason") or "") for r in failing) if m]
        if diverged and not where:  # equal in both copies, and no training: said, never a pass
            where = f" Their losses turn non-finite in both copies from step {min(diverged)}"
        if where and classes:
            kinds = [k for k, _ in classes.most_common()] if equal else [classes.most_common(1)[0][0]]
            where += f"; drift class{'es' if len(kinds) > 1 else ''} {', '.join(kinds)}"
        split = [j for j in replica_jobs(failing)]
        if split and where:
            where += f"; replicas disagree in {len(split)} of them"

        def against(c: Dict[str, Any]) -> str:
            n = c.get("passing_pairs", c["pairs"])
            other = f" where {c['factor']}={c['other_levels']} passes" if c.get("other_levels") else ""
            return f"failing in {c['to_fail']} of {n} one-factor pairs{other}"

        if together:
            names = " and ".join([name] + [f"{t['factor']}={label(t['level'])}" for t in together])
            return text + (f" Only together: {names} fail, an interaction, not one factor ({against(top)})."
                           + (where + "." if where else ""))
        if equal:
            names = " and ".join(f"{c['factor']}={label(c['level'])}" for c in named)
            each = f"failing in {top['to_fail']} of {top.get('passing_pairs', top['pairs'])} one-factor pairs"
            return text + f" {word}s, weighed alike: {names}, each {each} where its other level passes." \
                + (where + "." if where else "")
        exposed = "".join(f"; exposed by {t['factor']}={label(t['level'])}, which {t['factor']}="
                          f"{label(_other(rows, t))} hides below tolerance" for t in exposers)
        return text + f" {word}: {name}, {against(top)}{exposed}." + (where + "." if where else "")
    return text + _quiet_headline(rows, judged)


def _quiet_headline(rows: Sequence[Row], judged: Sequence[Row]) -> str:
    """The headline's sentence where no job fails (:func:`headline`), with one more where a
    job ran another precision than configured: equal losses do not say the policy ran."""
    departed = [r["job"] for r in judged if policy_departed(r)]
    tail = (f" {len(departed)} job{'s' if len(departed) != 1 else ''} ran another precision than configured "
            f"(job{'s' if len(departed) != 1 else ''} {', '.join(map(str, departed[:4]))}): see the notes.") \
        if departed else ""
    return _no_fail(rows, judged) + tail


def _no_fail(rows: Sequence[Row], judged: Sequence[Row]) -> str:
    """Where no job fails: equal, rounding only, the one level that changes the losses (or
    moves them beyond rounding), or below tolerance; one sentence with a leading space."""
    text = ""
    differ = [r for r in judged if r.get("first_diff_step") is not None]
    if not differ:
        printed = _max(r.get("resolution") for r in judged)
        if printed is not None:  # losses read from rounded text: equal is equal to what was printed
            return text + f" No job fails: every job equals standalone to the printed precision ({printed:.0e})."
        return text + " No job fails: every job equals standalone bit for bit."
    size = _max(r.get("max_abs_diff") for r in differ)
    ratio = _max(r.get("tolerance_ratio") for r in differ)
    against = f", {ratio:.1g}x the tolerance" if ratio is not None else ""
    steps = [s for s in (parting_step(r) for r in differ) if s is not None]
    since = f", from step {min(steps)}" if steps else ""
    found = _separating_level(rows, differ)
    if all(rounding_only(r) for r in differ):
        return text + (f" No job fails. {len(differ)} of {len(judged)} differ by float rounding only, up to "
                       f"{size:.1e}{against}.")
    if found is not None and len(differ) < len(judged):
        return text + (f" No job fails. Only {found[0]}={label(found[1])} changes the losses: {len(differ)} of "
                       f"{len(differ)} jobs, up to {size:.1e}{against}{since}.")
    real = [r for r in differ if not rounding_only(r)]
    carrier = _carrier(rows, real) if real else None
    if carrier is not None:  # the rest differ by rounding only: the levels that move them beyond it
        size = _max(r.get("max_abs_diff") for r in real)
        ratio = _max(r.get("tolerance_ratio") for r in real)
        steps = [s for s in (parting_step(r) for r in real) if s is not None]
        names, held = carrier
        share = f"{len(real)} jobs" if held == len(real) else f"{len(real)} of its {held} jobs"
        return text + (f" No job fails. Only {names} moves the losses beyond float "
                       f"rounding: {share}, up to {size:.1e}"
                       + (f", {ratio:.1g}x the tolerance" if ratio is not None else "")
                       + (f", from step {min(steps)}" if steps else "")
                       + f"; the other {len(differ) - len(real)} differ by rounding only.")
    return text + f" No job fails. {len(differ)} of {len(judged)} differ below tolerance, up to {size:.1e}{against}{since}."


def attribute(rows: Sequence[Row]) -> Dict[str, Any]:
    """Everything above for one sweep, JSON-ready.

    Keys: ``headline`` (:func:`headline`: at most three short sentences), ``verdict``
    (the details, one paragraph), ``factors``, ``counts`` (status -> jobs), ``judged``,
    ``not_judged`` (``[{job, status, reason}]``), ``levels`` (:func:`level_stats`),
    ``contrasts``, ``culprits``, ``interactions``, ``ties`` (:func:`ties`), ``scalers``
    (:func:`scalers`), ``fixes`` (:func:`fixes`), ``nondeterministic`` (:func:`nondeterministic_jobs`), ``drift`` (class ->
    numbers of the judged jobs that differ),
    ``drift_rule`` (``sweep.analysis.evidence.DRIFT_RULE``), ``onset_rule`` (``sweep.analysis.compare.ONSET_RULE``).
    """
    ranked = culprits(rows)
    found = interactions(rows, ranked)
    drift: Dict[str, List[int]] = {cls: [] for cls in DRIFT_CLASSES}
    for row in rows:
        cls = drift_class(row)
        if cls:
            drift[cls].append(row["job"])
    counts = Counter(r["status"] for r in rows)
    return {
        "headline": headline(rows, ranked),
        "verdict": verdict(rows, ranked, found),
        "factors": factors(rows),
        "counts": {s: counts[s] for s in STATUSES},
        "judged": len(_judged(rows)),
        "not_judged": [
            {"job": r["job"], "status": r["status"], "reason": r.get("reason")}
            for r in rows
            if r["status"] not in JUDGED
        ],
        "levels": level_stats(rows),
        "contrasts": contrasts(rows),
        "culprits": ranked,
        "interactions": found,
        "ties": ties(ranked, rows),
        "confounded": confounded(rows) if not ranked else None,
        "scalers": scalers(rows),
        "fixes": fixes(rows),
        "nondeterministic": nondeterministic_jobs(rows),
        "drift": drift,
        "drift_rule": DRIFT_RULE,
        "onset_rule": f"{UPDATE_ONSET_RULE}. Jobs not traced: {ONSET_RULE}",
    }
