"""What several rules of the verdict read, computed once per sweep (``Context.shared``).

The culprit candidates, their ties and interactions, the proven fixes, the contrasts of
scale and sign (``sweep.analysis.culprits``); the jobs that fail for a cause, fail their
tolerance only, differ, differ by rounding only; and two descriptions as data: where the
earliest of some jobs parts from standalone (:func:`place`) and which way a set of jobs
drifts (:func:`signature`).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence

from sweep.analysis import culprits as grid_evidence
from sweep.analysis.evidence import (class_gloss, drift_class, parting_step, rounding_only, tolerance_only,
                                     unseen_failure)
from sweep.analysis.grid import failed, judged, largest, mean
from sweep.analysis.rounding import drift_sign, dtype_name, envelope
from sweep.findings.base import Context, Row

NONFINITE = re.compile(r"non-finite loss from step (\d+) in both copies")  # sweep.analysis.judging's reason
SIGNED_SHARE = 0.75  # failing jobs run one way where this share of them has that sign (and none the other)
ONSET_WORDS = {"abrupt": "an abrupt onset", "growth": "a steady growth", "noise": "random-sign noise"}


def candidates(ctx: Context) -> List[Dict[str, Any]]:
    """The ranked culprit candidates (``sweep.analysis.culprits.candidates``)."""
    return ctx.shared("candidates", lambda: grid_evidence.candidates(ctx.rows))


def ties(ctx: Context) -> List[Dict[str, Any]]:
    """The candidates tied with the top one (``sweep.analysis.culprits.ties``)."""
    return ctx.shared("ties", lambda: grid_evidence.ties(candidates(ctx), ctx.rows))


def faults(ctx: Context) -> List[Row]:
    """The jobs that fail for a cause (``sweep.analysis.grid.failed``)."""
    return ctx.shared("faults", lambda: [r for r in ctx.rows if failed(r)])


def tolerance_jobs(ctx: Context) -> List[Row]:
    """The jobs that fail their tolerance only, within their rounding envelope."""
    return ctx.shared("tolerance", lambda: [r for r in ctx.rows if tolerance_only(r)])


def differ(ctx: Context) -> List[Row]:
    """The judged jobs whose copies differ at all."""
    return ctx.shared("differ", lambda: [r for r in judged(ctx.rows) if r.get("first_diff_step") is not None])


def rounding(ctx: Context) -> List[Row]:
    """The differing jobs whose every difference stays within its envelope."""
    return ctx.shared("rounding", lambda: [r for r in differ(ctx) if rounding_only(r)])


def real(ctx: Context) -> List[Row]:
    """The differing jobs with a difference beyond its envelope (or none measured)."""
    return ctx.shared("real", lambda: [r for r in differ(ctx) if not rounding_only(r)])


def dtypes(jobs: Sequence[Row]) -> List[str]:
    """The dtypes the jobs' envelopes were measured in (``JobRecord.envelope["dtype"]``)."""
    return sorted({str(envelope(r).get("dtype")) for r in jobs if envelope(r).get("dtype")})


def lower_precision(row: Row) -> Optional[str]:
    """The job's ``mp_policy.param_dtype`` where its standalone copy computes in another dtype
    (the default ``baseline.precision=float32``): the precision alone parts the copies at step 0.
    ``None`` otherwise."""
    config = getattr(row.get("result"), "config", None) or {}
    param = (config.get("mp_policy") or {}).get("param_dtype")
    precision = str((config.get("baseline") or {}).get("precision") or "float32")
    if not param or precision == "policy" or dtype_name(param) == dtype_name(precision):
        return None
    return dtype_name(param)


def signature(failing: Sequence[Row]) -> Dict[str, Any]:
    """Which way ``failing`` jobs drift, as data: ``direction`` (``runs low``, ``runs high``,
    ``runs low in a and high in b of n jobs`` where each holds a sign, ``differs``), ``mean``
    (their mean signed difference, loss units), ``low_pct`` (their mean share of steps below
    standalone, %), ``nonfinite`` (the first step both copies' losses turn non-finite, where
    every job's did), ``nonfinite_in`` and ``nonfinite_from`` (the copy whose loss alone turns
    non-finite in every job, and the first step; ``sweep.analysis.compare.nonfinite_in_one``).
    A job's sign comes from its steps beyond its envelope
    (``sweep.analysis.rounding.drift_sign``)."""
    failing = list({r["job"]: r for r in failing}.values())
    diverged = [int(m.group(1)) for m in (NONFINITE.match(r.get("reason") or "") for r in failing) if m]
    alone = [r.get("nonfinite_in") for r in failing]  # one copy's loss non-finite, the other's finite
    copies = {a["copy"] for a in alone if a}
    out: Dict[str, Any] = {"jobs": len(failing), "mean": mean(r["mean_signed_diff"] for r in failing),
                           "low_pct": mean(r.get("runs_low_pct") for r in failing),
                           "nonfinite": min(diverged) if diverged and len(diverged) == len(failing) else None,
                           "nonfinite_in": copies.pop() if all(alone) and len(copies) == 1 else None,
                           "nonfinite_from": min(a["step"] for a in alone) if alone and all(alone) else None}
    signs = [drift_sign(r) for r in failing]
    low, high = signs.count("low"), signs.count("high")
    if low and high:
        out["direction"] = f"runs low in {low} and high in {high} of {len(failing)} jobs"
    elif (low or high) and low + high >= SIGNED_SHARE * len(failing):
        out["direction"] = "runs low" if low else "runs high"
    else:
        out["direction"] = "differs"
    return out


def onset_words(row: Row, cls: Optional[str]) -> Optional[str]:
    """The job's onset in words (``None`` where it has none): noise is called noise only where
    its repeats disagree; with repeats that agree it is deterministic."""
    if row.get("onset") not in ONSET_WORDS:
        return None
    if row.get("onset") != "noise":
        return ONSET_WORDS[row["onset"]]
    if row.get("nondeterministic"):
        return "random-sign noise (its repeats disagree)"
    if row.get("nondeterministic") is False:
        return "update errors of both signs, deterministic (its repeats agree): not noise"
    if cls == "rounding":
        return "update errors of both signs"
    return ("update errors of both signs (noise only if repeats disagree: repeat=3 tells nondeterminism from a "
            "deterministic cause)")


def place(jobs: Sequence[Row]) -> Optional[Dict[str, Any]]:
    """Where the earliest of ``jobs`` parts from standalone, with that same job's class (so the
    step and the class never come from different jobs), as data: ``job``, ``step`` (its first
    differing step), ``beyond`` (its first step beyond its envelope where later), ``earlier``
    (an update whose weights left their envelope before the losses did), ``fail`` (its first
    failing step where another), ``cls``, ``gloss``, ``period``, ``precision`` (a lower
    precision against a float32 standalone copy, step 0 only), ``onset`` (words), ``until`` (the
    last update of a fault that stopped), ``fails_on`` (a job whose difference is rounding only
    yet fails: what it fails on, :func:`sweep.analysis.evidence.unseen_failure`), ``module``,
    ``tensor``, ``again`` (a nondeterministic
    job's tensor is another launch's), ``same`` and ``of`` (how many of the jobs share its
    class), ``classes`` (every class of the jobs, sorted). ``None`` where no job has a class."""
    classed = [r for r in jobs if drift_class(r)]
    if not classed:
        return None
    classed = [r for r in classed if drift_class(r) != "rounding"] or classed  # a real drift first
    first = min(classed, key=lambda r: (parting_step(r), r["job"]))
    cls = drift_class(first)
    step = first.get("first_diff_step", first.get("first_fail_step"))
    parting = parting_step(first)
    return {"job": first["job"], "step": step, "parting": parting, "beyond": parting if parting > step else None,
            "earlier": parting - 1 if parting < step else None,
            "fail": first["first_fail_step"] if first.get("first_fail_step") not in (None, step) else None,
            "cls": cls, "gloss": class_gloss(first, cls),
            "period": first.get("period") if cls == "periodic" else None,
            "precision": lower_precision(first) if cls == "step0" else None,
            "onset": onset_words(first, cls), "until": first.get("onset_until"),
            "module": first.get("first_module"), "tensor": first.get("first_tensor"),
            "fails_on": unseen_failure(first) if cls == "rounding" else None,
            "again": bool(first.get("nondeterministic")), "same": sum(drift_class(r) == cls for r in classed),
            "classes": sorted({drift_class(r) for r in classed}),
            "of": len(classed) if len(classed) > 1 else None}


def worst(rows: Sequence[Row], key: str) -> Optional[float]:
    """The largest finite ``key`` of ``rows``."""
    return largest(r.get(key) for r in rows)


def decision(ctx: Context) -> Optional[Dict[str, Any]]:
    """Which culprit-family kind leads, and whom it names, from the ranked candidates and their
    ties (one place, so the headline and the details never name different levels):
    ``{"kind": "random_draws" | "together" | "alike" | "exposed" | "culprit", "top", "named"
    (the top and the candidates weighed alike with it), "together", "exposers", "tied" (ties
    that need a job to separate them)}``; ``None`` without a fault or a candidate."""
    def compute() -> Optional[Dict[str, Any]]:
        ranked = candidates(ctx)
        if not ranked or not faults(ctx):
            return None
        top, found = ranked[0], ties(ctx)
        together = [t for t in found if t["together"]]
        exposers = [t for t in found if t["exposes"]]
        tied = [t for t in found if not t["together"] and not t["exposes"]]
        shown = {(t["factor"], t["level"]) for t in exposers}
        alike = [c for c in ranked[1:] if grid_evidence.alike(top, c) and not c.get("random_draws_only")
                 and (c["factor"], c["level"]) not in shown][:2]
        kind = ("random_draws" if top.get("random_draws_only") else "together" if together
                else "alike" if alike else "exposed" if top.get("exposes_only") else "culprit")
        return {"kind": kind, "top": top, "named": [top, *alike] if kind == "alike" else [top],
                "together": together, "exposers": exposers, "tied": tied}

    return ctx.shared("decision", compute)


def name(candidate: Dict[str, Any]) -> str:
    """``factor=level`` of a candidate or a tie (``(unset)`` for a missing key)."""
    from sweep.analysis.grid import label

    return f"{candidate['factor']}={label(candidate['level'])}"


def pairs_values(c: Dict[str, Any]) -> Dict[str, Any]:
    """The values every candidate sentence reads: its name, factor, flips and pairs, the
    levels that pass where it fails, and the jobs left out of its pairs (``masked``: they pass
    only within a rounding envelope too wide to show it; ``None`` for none)."""
    return {"name": name(c), "factor": c["factor"], "to_fail": c["to_fail"],
            "partners": c.get("passing_pairs", c["pairs"]), "others": c.get("other_levels") or [],
            "masked": (c.get("masked_jobs") or [])[:6] or None,
            "masked_more": len(c["masked_jobs"]) - 6 if len(c.get("masked_jobs") or []) > 6 else None}
