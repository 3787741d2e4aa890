"""The grid's evidence about factors, as data: culprit candidates, ties, interactions, fixes,
scaling and sign contrasts, and the nearest pair when nothing separates.

Pure functions over report rows (``sweep.analysis.grid``); each returns dicts of numbers, job
numbers and levels, never a sentence. The verdict's rules (``sweep.findings``) decide what to
say from them.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from sweep.analysis.compare import RANDOM_DRAWS_NOTE
from sweep.analysis.evidence import masks, rounding_only
from sweep.analysis.grid import (Pair, Row, by_overrides, copies_unequal, departures, factors, failed, flips_to_fail,
                                 has_note, judged, key_of, label, largest, level, levels, mean, one_factor_pairs,
                                 oriented, passed, shift, workload_factor)
from sweep.analysis.rounding import departure, drift_sign, losses_within, measured


def _unexplained(row: Row) -> bool:
    """A job whose copies differ and not by rounding only (:func:`rounding_only`; without a measured
    envelope every difference counts): no fix passes through it."""
    return row.get("first_diff_step") is not None and not rounding_only(row)


def _hidden(row: Row) -> bool:
    """A passing job whose copies differ beyond a measured rounding envelope
    (``sweep.analysis.rounding.measured``): a drift hidden below the tolerance. Without an envelope
    (a command job without repeats) a correct script's float rounding cannot be told from such a
    drift, and no level is called an exposer on it."""
    return _unexplained(row) and measured(row)


def resolving(both: Sequence[Tuple[Row, Row]]) -> Tuple[List[Tuple[Row, Row]], List[Tuple[Row, Row]]]:
    """A level's oriented one-factor pairs (``(x, y)``: ``x`` has the level, ``grid.oriented``)
    split into those that can show what the level does and those that cannot, ``(kept,
    masked)``: a pair whose pass is a job that differs only within a rounding envelope too wide
    to show the departure the level makes (``sweep.analysis.evidence.masks``: a bfloat16 job's
    band against the float32 job the fault fails): ``y`` of a flip to fail against that flip's
    ``x``, ``x`` of another pair against the smallest departure of the level's flips. A coarser
    precision hides a fault in its rounding; its pass neither fixes the fault nor makes it an
    interaction."""
    flips = flips_to_fail(both)
    sizes = [d for d in (departure(x) for x, _ in flips) if d is not None]
    least = min(sizes) if sizes else None
    kept: List[Tuple[Row, Row]] = []
    masked: List[Tuple[Row, Row]] = []
    for x, y in both:
        flip = failed(x) and passed(y)
        hidden = masks(y, departure(x)) if flip else passed(x) and masks(x, least)
        (masked if hidden else kept).append((x, y))
    return kept, masked


def _candidate(rows: Sequence[Row], pairs: Sequence[Pair], factor: str, value: Optional[str]
               ) -> Optional[Dict[str, Any]]:
    """One culprit candidate (:func:`candidates`), or ``None`` where ``factor=value`` turns no
    more passes into fails than the reverse, in the pairs that can show it (:func:`resolving`)."""
    both, masked = resolving(oriented(pairs, factor, value))
    to_fail = flips_to_fail(both)
    to_pass = sum(passed(x) and failed(y) for x, y in both)
    if len(to_fail) <= to_pass:
        return None
    partners = [y for _, y in both if passed(y)]
    hidden = [y for _, y in to_fail if _hidden(y)]
    rounded = [y for _, y in to_fail if y.get("first_diff_step") is not None and rounding_only(y)]
    failing = sorted({x["job"] for x, _ in to_fail})
    return {
        "factor": factor, "level": value, "pairs": len(both), "to_fail": len(to_fail), "to_pass": to_pass,
        "score": (len(to_fail) - to_pass) / len(both),
        "mean_shift": mean(shift(x, y) for x, y in both),
        "exposes_only": bool(to_fail) and len(hidden) == len(to_fail),
        "random_draws_only": all(has_note(x, RANDOM_DRAWS_NOTE) for x, _ in to_fail),
        "passing_pairs": len(partners), "other_levels": [label(v) for v in levels(partners, factor)],
        "failing_jobs": failing,
        "hidden_jobs": sorted({y["job"] for y in hidden}), "hidden_max_abs": largest(y["max_abs_diff"] for y in hidden),
        "failing_max_abs": largest(x["max_abs_diff"] for x, _ in to_fail),
        "rounded_levels": [label(v) for v in levels(rounded, factor)],
        "rounded_max_abs": largest(y["max_abs_diff"] for y in rounded),
        "masked_jobs": sorted({(y if failed(x) else x)["job"] for x, y in masked}),
    }


def candidates(rows: Sequence[Row]) -> List[Dict[str, Any]]:
    """Culprit candidates, most convincing first: every ``factor=level`` that, in its one-factor
    pairs along the factor, fails (for a cause) where the other level passes more often than the
    reverse. Keys: ``factor``, ``level``, ``pairs``, ``to_fail``, ``to_pass``, ``score``
    (``(to_fail - to_pass) / pairs``), ``mean_shift`` (loss units), ``exposes_only`` (every
    passing partner differs beyond rounding: it exposes the drift, it does not cause it),
    ``random_draws_only``, ``passing_pairs``, ``other_levels``, ``failing_jobs``,
    ``hidden_jobs``/``hidden_max_abs`` (the partners beyond rounding), ``failing_max_abs``,
    ``rounded_levels``/``rounded_max_abs`` (partners within their envelope), ``masked_jobs``
    (the passes left out of its pairs: within an envelope too wide to show it, :func:`resolving`). Ranked by score,
    then ``to_fail``, then a cause before an exposer, then a non-workload factor before a
    workload's, then by name: ties are ties, never broken by sub-tolerance noise or typing order."""
    pairs = one_factor_pairs(rows)
    found = [c for factor in factors(rows) for value in levels(rows, factor)
             if (c := _candidate(rows, pairs, factor, value)) is not None]
    return sorted(found, key=lambda c: (-c["score"], -c["to_fail"], bool(c["exposes_only"]),
                                        workload_factor(c["factor"]), c["factor"], label(c["level"])))


def alike(top: Dict[str, Any], other: Dict[str, Any]) -> bool:
    """Whether two candidates weigh alike: the same score, flips, and exposer-or-cause."""
    return ((other["score"], other["to_fail"], bool(other.get("exposes_only")))
            == (top["score"], top["to_fail"], bool(top.get("exposes_only"))))


def ties(ranked: Sequence[Dict[str, Any]], rows: Sequence[Row]) -> List[Dict[str, Any]]:
    """The candidates this sweep cannot tell from the top one (equal score and flips, failing in
    the same jobs), each with the smallest job that would separate it: a failing job's overrides
    with the tie's factor at another level. Keys: ``factor``, ``level``, ``separate_with``
    (override strings), ``separating_job`` (that job, where it ran), ``other_level`` (its level
    there), ``together`` (it ran and passes within rounding: they fail only together) and
    ``exposes`` (it ran, passes, but differs beyond rounding: the tie only exposes the drift)."""
    if not ranked:
        return []
    top, found = ranked[0], []
    for c in ranked[1:]:
        if (c["score"], c["to_fail"], c["failing_jobs"]) != (top["score"], top["to_fail"], top["failing_jobs"]):
            continue
        job = next(r for r in rows if r["job"] == top["failing_jobs"][0])
        other = next((v for v in levels(rows, c["factor"]) if v != c["level"]), None)
        overrides = dict(job["overrides"], **{c["factor"]: other}) if other is not None else job["overrides"]
        ran = next((r for r in rows if r["overrides"] == overrides and r["status"] in ("ok", "fail")), None)
        passes = ran is not None and passed(ran)
        # the separating job ran and passes, differing otherwise than by rounding: the tie only exposes the drift
        # (without a measured envelope too: the job ran, so no tie is left to separate)
        hidden = passes and _unexplained(ran)
        found.append({"factor": c["factor"], "level": c["level"], "other_level": other,
                      "separate_with": sorted(f"{k}={v}" for k, v in overrides.items() if v is not None),
                      "together": passes and not hidden, "exposes": hidden,
                      "separating_job": ran["job"] if ran is not None else None,
                      "separating_max_abs": float(ran.get("max_abs_diff") or 0.0) if ran is not None else None,
                      "separating_first_diff": ran.get("first_diff_step") if ran is not None else None})
    return found


def interactions(rows: Sequence[Row], ranked: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Candidates that flip a pass into a fail only under some levels of another factor: for
    each candidate ``f=v`` and other factor ``g``, its pairs split by the level of ``g`` they
    share; reported when it flips under some (``with_levels``) and never under others that have
    pairs (``without_levels``), once per symmetric finding. Keys: ``factor``, ``level``,
    ``with_factor``, ``with_levels``, ``flips``, ``pairs``, ``without_levels``, ``without_pairs``,
    ``without_failing`` (of the latter, the pairs whose job without the level fails too)."""
    pairs = one_factor_pairs(rows)
    found, seen = [], set()
    for c in (c for c in ranked if not c.get("random_draws_only")):  # V153/V105 speak for those
        both = resolving(oriented(pairs, c["factor"], c["level"]))[0]
        for other in (g for g in factors(rows) if g != c["factor"]):
            by_level: Dict[Optional[str], List[Tuple[Row, Row]]] = defaultdict(list)
            for x, y in both:
                by_level[level(x, other)].append((x, y))
            flips = {w: len(flips_to_fail(group)) for w, group in by_level.items()}
            with_levels = [w for w, n in flips.items() if n]
            without_levels = [w for w, n in flips.items() if not n]
            key = frozenset({(c["factor"], (c["level"],)), (other, tuple(with_levels))})
            if not with_levels or not without_levels or key in seen:
                continue
            seen.add(key)
            found.append({"factor": c["factor"], "level": c["level"], "with_factor": other,
                          "with_levels": with_levels, "flips": sum(flips.values()),
                          "pairs": sum(len(by_level[w]) for w in with_levels), "without_levels": without_levels,
                          "without_pairs": sum(len(by_level[w]) for w in without_levels),
                          # (of those, the pairs whose job without the level fails as well: it shows nothing there)
                          "without_failing": sum(1 for w in without_levels for _, y in by_level[w] if failed(y))})
    return found


def fixes(rows: Sequence[Row], workload: bool = False) -> List[Dict[str, Any]]:
    """The overrides this sweep proves to be a fix: ``factor=level`` such that every failing
    job, with that one factor at ``level`` and nothing else changed, ran and passes, equal to
    standalone or within its rounding envelope, and does not carry a departure from the engine's
    contract its failing job has too (it would only hide it), nor passes only within a rounding
    envelope too wide to show the failing job's departure (``sweep.analysis.evidence.masks``:
    a coarser precision hides a fault). None where the failing jobs draw
    random numbers on sharded data; a level of a workload or verdict factor only with
    ``workload=True`` (it hides the drift, never fixes it). Returns ``[{"factor", "level",
    "override", "jobs": [[failing, passing], ...]}]`` sorted by override."""
    failing = [r for r in rows if failed(r)]
    if not failing or any(has_note(r, RANDOM_DRAWS_NOTE) for r in failing):
        return []
    index = by_overrides(rows)
    found = []
    for factor in factors(rows):
        if workload_factor(factor) != workload:
            continue
        for value in levels(rows, factor):
            jobs = []
            for x in failing:
                y = index.get(key_of(dict(x["overrides"], **{factor: value})))
                if y is None or y is x or not passed(y) or _unexplained(y) or (departures(x) & departures(y)) \
                        or masks(y, departure(x)):  # within an envelope too wide to show x's departure
                    break
                jobs.append([x["job"], y["job"]])
            else:
                found.append({"factor": factor, "level": value, "override": f"{factor}={label(value)}", "jobs": jobs})
    return sorted(found, key=lambda f: f["override"])


def scalers(rows: Sequence[Row]) -> List[Dict[str, Any]]:
    """Factors that scale the drift or flip its sign, from one-factor pairs in which both jobs
    differ beyond their rounding envelope (neither rounding only nor with losses within their
    envelope) and neither job's copies are unequal (:func:`sweep.analysis.grid.copies_unequal`):
    ``{factor, level, other, ratio, pairs, sign_flips, scales, flips}``. ``ratio``:
    the geometric mean of ``max_abs_diff`` at ``level`` over ``other`` (``scales`` when >= 2);
    ``sign_flips``: pairs whose signs (``sweep.analysis.rounding.drift_sign``: from the steps
    beyond the envelope, where one holds on most) are opposite (``flips`` when most are)."""
    pairs = [(f, a, b) for f, a, b in one_factor_pairs(rows)
             if (a.get("max_abs_diff") or 0) > 0 and (b.get("max_abs_diff") or 0) > 0
             and not (rounding_only(a) or rounding_only(b)) and not (losses_within(a) or losses_within(b))
             and not (copies_unequal(a) or copies_unequal(b))]  # copies that are not one experiment: no fault's size
    out = []
    for factor in factors(rows):
        for value in levels(rows, factor):
            for other in levels(rows, factor):
                both = [(x, y) for f, a, b in pairs if f == factor for x, y in ((a, b), (b, a))
                        if level(x, factor) == value and level(y, factor) == other] if other != value else []
                if not both:
                    continue
                ratio = float(np.exp(np.mean([np.log(x["max_abs_diff"] / y["max_abs_diff"]) for x, y in both])))
                flips = sum({drift_sign(x), drift_sign(y)} == {"low", "high"} for x, y in both)
                scales, flipping = ratio >= 2.0, flips * 2 > len(both) and label(value) < label(other)
                if scales or flipping:
                    out.append({"factor": factor, "level": value, "other": other, "ratio": ratio,
                                "pairs": len(both), "sign_flips": flips, "scales": scales, "flips": flipping})
    return out


def confounded(rows: Sequence[Row]) -> Optional[Dict[str, Any]]:
    """When no single factor separates a failing job from a passing one: the failing job and its
    nearest passing job (fewest differing factors), the factors they differ in together, and for
    each the job that would test it alone. ``None`` when some pair differs in one factor only,
    or nothing both fails and passes."""
    done = judged(rows)
    keys, best = factors(rows), None
    for f in (r for r in done if failed(r)):
        for p in (r for r in done if passed(r)):
            differ = [k for k in keys if level(f, k) != level(p, k)]
            if best is None or len(differ) < len(best[2]):
                best = (f, p, differ)
    if best is None or len(best[2]) < 2:
        return None
    f, p, differ = best
    separate = {k: sorted(f"{key}={value}" for key, value in dict(f["overrides"], **{k: level(p, k)}).items()
                          if value is not None) for k in differ}
    return {"failing": f["job"], "passing": p["job"],
            "factors": [{"factor": k, "failing_level": level(f, k), "passing_level": level(p, k)} for k in differ],
            "separate_with": separate}
