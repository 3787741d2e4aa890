"""The grid's arithmetic: factors, levels, one-factor pairs and what each job's row says, as data.

Pure functions over the rows :func:`sweep.report.summary.collect` returns (dicts with ``job``,
``overrides`` (key -> value string), ``status``, the comparison's metrics and the evidence of
``sweep.analysis.evidence.job_evidence``). Nothing here builds a sentence: the verdict's rules
(``sweep.findings``) read these and return findings; the report renders them.

Terms:

- *factor*: an override key whose value is not the same in every job; its values are its
  *levels* (a job without the key has level ``None``, shown ``(unset)``).
- *judged* job: status ``ok`` or ``fail``; ``error``, ``timeout`` and ``missing`` are counted
  but left out of pass rates, pairs and culprits.
- *failed* job: it fails for a cause; a job that fails its tolerance only within its rounding
  envelope (``sweep.analysis.evidence.tolerance_only``) counts as *passed* here.
- *one-factor pair*: two judged jobs whose levels differ in exactly one factor; it *flips*
  when one fails and the other passes; its *shift* is the change of ``mean_signed_diff``.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from sweep.analysis.compare import COPY_NOTE_KINDS
from sweep.analysis.evidence import tolerance_only

Row = Dict[str, Any]
Pair = Tuple[str, Row, Row]
STATUSES = ("ok", "fail", "error", "timeout", "missing")
JUDGED = ("ok", "fail")


def factors(rows: Sequence[Row]) -> List[str]:
    """Override keys whose value differs between jobs (a key missing in a job counts as a
    value), in first-seen order."""
    keys: List[str] = []
    for row in rows:
        keys.extend(k for k in row["overrides"] if k not in keys)
    return [k for k in keys if len({row["overrides"].get(k) for row in rows}) > 1]


def level(row: Row, factor: str) -> Optional[str]:
    """The job's level of ``factor`` (``None``: unset)."""
    return row["overrides"].get(factor)


def levels(rows: Sequence[Row], factor: str) -> List[Optional[str]]:
    """The levels of ``factor`` in ``rows``, first-seen order."""
    return list(dict.fromkeys(level(r, factor) for r in rows))


def label(value: Optional[str]) -> str:
    """A level as shown: ``(unset)`` for a job without the key."""
    return "(unset)" if value is None else str(value)


def judged(rows: Iterable[Row]) -> List[Row]:
    """The judged rows (status ``ok`` or ``fail``)."""
    return [r for r in rows if r["status"] in JUDGED]


def failed(row: Row) -> bool:
    """Whether a job fails for a cause: status ``fail``, and not only by a tolerance finer than
    its precision holds (``sweep.analysis.evidence.tolerance_only``)."""
    return row["status"] == "fail" and not tolerance_only(row)


def passed(row: Row) -> bool:
    """Whether a judged job carries no fault: status ``ok``, or a failure of the tolerance only."""
    return row["status"] == "ok" or tolerance_only(row)


def finite(values: Iterable[Optional[float]]) -> np.ndarray:
    """The finite floats of ``values`` (``None`` dropped)."""
    arr = np.asarray([v for v in values if v is not None], dtype=np.float64)
    return arr[np.isfinite(arr)]


def mean(values: Iterable[Optional[float]]) -> Optional[float]:
    """The mean of the finite values, ``None`` without any."""
    arr = finite(values)
    return float(np.mean(arr)) if arr.size else None


def largest(values: Iterable[Optional[float]]) -> Optional[float]:
    """The largest finite value, ``None`` without any."""
    arr = finite(values)
    return float(np.max(arr)) if arr.size else None


def shift(a: Row, b: Row) -> Optional[float]:
    """``mean_signed_diff`` of ``a`` minus that of ``b`` (loss units), ``None`` if either is unknown."""
    if a["mean_signed_diff"] is None or b["mean_signed_diff"] is None:
        return None
    return a["mean_signed_diff"] - b["mean_signed_diff"]


def level_stats(rows: Sequence[Row]) -> List[Dict[str, Any]]:
    """One dict per (factor, level), factors in :func:`factors` order, levels first-seen:
    ``factor``, ``level``, ``jobs``, ``judged``, ``not_judged``, ``pass_rate_pct`` (share of
    judged jobs whose status is ``ok``, %; ``None`` if none judged), ``mean_signed_diff`` (over
    the judged jobs, loss units) and ``worst_abs_diff`` (largest ``max_abs_diff``)."""
    stats = []
    for factor in factors(rows):
        for value in levels(rows, factor):
            group = [r for r in rows if level(r, factor) == value]
            done = judged(group)
            stats.append({
                "factor": factor, "level": value, "jobs": len(group), "judged": len(done),
                "not_judged": len(group) - len(done),
                "pass_rate_pct": float(100.0 * np.mean([r["status"] == "ok" for r in done])) if done else None,
                "mean_signed_diff": mean(r["mean_signed_diff"] for r in done),
                "worst_abs_diff": largest(r["max_abs_diff"] for r in done),
            })
    return stats


def one_factor_pairs(rows: Sequence[Row]) -> List[Pair]:
    """All ``(factor, a, b)``: judged jobs ``a`` before ``b`` (row order) whose levels differ in
    ``factor`` and agree in every other factor."""
    keys = factors(rows)
    pairs: List[Pair] = []
    for factor in keys:
        groups: Dict[tuple, List[Row]] = defaultdict(list)
        for row in judged(rows):
            groups[tuple(level(row, k) for k in keys if k != factor)].append(row)
        pairs.extend((factor, a, b) for group in groups.values() for a, b in combinations(group, 2)
                     if level(a, factor) != level(b, factor))
    return pairs


def contrasts(rows: Sequence[Row]) -> List[Dict[str, Any]]:
    """Per factor, over its one-factor pairs: ``factor``, ``pairs``, ``flips`` (one fails for
    a cause, the other does not), ``flip_rate_pct``, ``mean_abs_shift`` and ``max_abs_shift``
    (``|shift|``, loss units; ``None`` without finite values)."""
    by_factor: Dict[str, List[Pair]] = defaultdict(list)
    for pair in one_factor_pairs(rows):
        by_factor[pair[0]].append(pair)
    out = []
    for factor in factors(rows):
        pairs = by_factor[factor]
        flips = sum(failed(a) != failed(b) for _, a, b in pairs)
        shifts = np.abs(finite(shift(a, b) for _, a, b in pairs))
        out.append({"factor": factor, "pairs": len(pairs), "flips": flips,
                    "flip_rate_pct": 100.0 * flips / len(pairs) if pairs else None,
                    "mean_abs_shift": float(np.mean(shifts)) if shifts.size else None,
                    "max_abs_shift": float(np.max(shifts)) if shifts.size else None})
    return out


def oriented(pairs: Sequence[Pair], factor: str, value: Optional[str]) -> List[Tuple[Row, Row]]:
    """The pairs along ``factor`` as ``(job at value, job at another level)``."""
    return [(x, y) for f, a, b in pairs if f == factor for x, y in ((a, b), (b, a)) if level(x, factor) == value]


def flips_to_fail(pairs: Sequence[Tuple[Row, Row]]) -> List[Tuple[Row, Row]]:
    """The oriented pairs whose first job fails for a cause where the second passes."""
    return [(x, y) for x, y in pairs if failed(x) and passed(y)]


def by_overrides(rows: Sequence[Row]) -> Dict[tuple, Row]:
    """The judged rows keyed by their overrides (sorted ``(key, value)`` pairs)."""
    return {key_of(r["overrides"]): r for r in judged(rows)}


def key_of(overrides: Dict[str, Any]) -> tuple:
    """Overrides as a hashable key (sorted ``(key, str(value))``)."""
    return tuple(sorted((k, str(v)) for k, v in overrides.items()))


def notes_of(row: Row) -> List[str]:
    """A row's notes, whole (``note_list``: a note may hold ``"; "`` itself); a row built
    without it: the ``notes`` column, ``"; "``-separated."""
    if "note_list" in row:
        return list(row["note_list"] or [])
    return [n for n in (row.get("notes") or "").split("; ") if n]


def has_note(row: Row, note: str) -> bool:
    """Whether ``note`` is one of the row's notes (:func:`notes_of`)."""
    return note in notes_of(row)


def copies_unequal(row: Row) -> bool:
    """Whether the job's copies are not the same experiment: a note of
    ``sweep.analysis.compare.COPY_NOTE_KINDS`` (they draw different random numbers on sharded
    data, or only one holds some tensor), so its drift measures no fault (V153)."""
    return any(n.split(":")[0] in COPY_NOTE_KINDS for n in notes_of(row))


def departures(row: Row) -> set:
    """The job's departures from its engine's contract: the notes of its collective ledger and of
    its optimizer as it ran (``JobRecord.collectives["notes"]``, ``JobRecord.optimizer["notes"]``)."""
    result = row.get("result")
    found = set()
    for part in (getattr(result, "collectives", None), getattr(result, "optimizer", None)):
        if isinstance(part, dict):
            found.update(str(n) for n in part.get("notes") or [])
    return found


def hiding_kind(factor: str) -> Optional[str]:
    """What a swept ``factor`` sets when it is no place for a fix: ``"workload"`` (role
    ``workload``, ``sweep.config.roles``: what both copies train), ``"verdict"`` (role
    ``verdict``: how the copies are judged), ``None`` for the rest (how the copies train). A
    level of either can hide a fault, never fix it."""
    from sweep.config.roles import VERDICT, WORKLOAD
    from sweep.config.schema import fields_with  # the schema imports Hydra: only when judged

    for role in (WORKLOAD, VERDICT):
        paths = fields_with(role)
        if factor in paths or any(p.startswith(factor + ".") for p in paths):
            return role
    return None


def workload_factor(factor: str) -> bool:
    """Whether ``factor`` can only hide a fault (:func:`hiding_kind` is not ``None``)."""
    return hiding_kind(factor) is not None


def separating_level(rows: Sequence[Row], jobs: Sequence[Row]) -> Optional[Tuple[str, Any]]:
    """The one ``(factor, level)`` whose jobs are exactly ``jobs``, if any (the first in factor order)."""
    nums = {r["job"] for r in jobs}
    for factor in factors(rows):
        for value in levels(rows, factor):
            if {r["job"] for r in rows if level(r, factor) == value} == nums:
                return factor, value
    return None


def carrier(rows: Sequence[Row], real: Sequence[Row]) -> Optional[Tuple[List[Tuple[str, List[Any]]], int]]:
    """Where every job of ``real`` shares levels that some other jobs lack: ``([(factor,
    [levels])], m)``, the factors whose levels hold the fewest jobs (``m``) among those that
    narrow them, or ``None``. Only judged jobs count: a level whose other levels' jobs all
    errored (``mp_policy=fp32`` beside bf16 jobs an engine refused) holds every judged job and
    narrows nothing."""
    if not real:
        return None
    rows = judged(rows)
    found = []
    for factor in factors(rows):
        values = list(dict.fromkeys(level(r, factor) for r in real))
        if len(values) == len(levels(rows, factor)):
            continue  # every level holds one: it does not narrow them
        found.append((len([r for r in rows if level(r, factor) in values]), factor, values))
    if not found:
        return None
    fewest = min(n for n, _, _ in found)
    return [(factor, values) for n, factor, values in found if n == fewest], fewest
