"""The findings wing: the verdict of a sweep as typed findings, one kind of finding a module.

Each module but ``base``, ``shared`` and ``quiet`` (what several rules read) holds one kind's rule (rows in, :class:`~sweep.findings.base.Finding` out), its code, its sentence
template, what it rests on and what it does not claim (``sweep.findings.base.Kind``). This
registry checks them in one order (:data:`KINDS`: where a kind reads what another found, the
other comes first) and ranks their findings in one place (:func:`rank`): by tier (what another
tool answered, what decides, its proof, the contrasts, the context, the limits), then by this
order, then by strength. The report renders the same findings in every output
(``sweep.report.findings``): terminal, ``summary.md``, the page, ``summary.json`` and JUnit.

A job's notes have kinds too (``sweep.findings.notes_catalog``: code, template, what a note rests
on and does not claim, an example; the notes themselves are ``sweep.records.Note``, made in
``sweep.analysis``, rendered by ``sweep.report.notes``).

May import: ``sweep.config`` and ``sweep.analysis`` (the numerics and per-job evidence these
rules read), the contracts; never the report (which renders these), runs or launches.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from sweep.findings import (also, alike, below, beyond, confounded, copies, counts, culprit, departed, equal,
                            evidence, exposed, exposer, fix, flips, hides, indistinguishable, lower_precision,
                            no_effect, no_pairs, no_single, nondeterministic, not_judged, notes, nothing_judged,
                            one_level, only_with, passing_beyond, precision, printed, random_draws, repeats_agree,
                            replicas, replicas_decide, rounding_only, scales, together, tolerance, unmeasured, where)
from sweep.findings import job_envelope, job_notes, job_parts, job_place
from sweep.findings.base import TIERS, Context, Finding, Kind, Row

KINDS: List[Kind] = [
    counts.KIND,
    nothing_judged.KIND,
    # decides: exactly one of the culprit family, or what decides without a culprit, or the quiet cases
    culprit.KIND, exposed.KIND, together.KIND, alike.KIND, random_draws.KIND,
    replicas_decide.KIND, precision.KIND, confounded.KIND, no_pairs.KIND, no_single.KIND,
    beyond.KIND, tolerance.KIND, one_level.KIND, rounding_only.KIND, below.KIND, equal.KIND, printed.KIND,
    # proof
    evidence.KIND, where.KIND, only_with.KIND, exposer.KIND, indistinguishable.KIND, fix.KIND, hides.KIND,
    # contrasts
    also.KIND, passing_beyond.KIND, scales.KIND, flips.KIND, no_effect.KIND,
    # context and limits
    replicas.KIND, lower_precision.KIND, nondeterministic.KIND, repeats_agree.KIND, copies.KIND, departed.KIND,
    notes.KIND, unmeasured.KIND, not_judged.KIND,
]
# one job's findings (a single run's lines and page): checked over a one-row context
JOB_KINDS: List[Kind] = [job_parts.KIND, job_envelope.KIND, job_place.MODULE, job_place.TENSOR, job_notes.REPLICAS,
                         job_notes.NOTE]
BY_CODE: Dict[str, Kind] = {k.code: k for k in [*KINDS, *JOB_KINDS]}
EXTRA: Dict[str, Kind] = {}  # kinds another tool's answers use (isolation, against, bisect): sweep.findings.answers


def kind(code: str) -> Kind:
    """The kind of ``code`` (also another tool's answer kinds).

    Raises:
        KeyError: no kind has that code (the message lists them)."""
    from sweep.findings import answers  # noqa: F401  (registers the answer kinds)

    found = BY_CODE.get(code) or EXTRA.get(code)
    if found is None:
        raise KeyError(f"no finding has code {code!r}; the codes: {', '.join(sorted({**BY_CODE, **EXTRA}))}")
    return found


def all_kinds() -> List[Kind]:
    """Every kind: the answers' (``sweep.findings.answers``), the sweep's rules (:data:`KINDS`) and
    one job's (:data:`JOB_KINDS`)."""
    from sweep.findings import answers  # noqa: F401

    return [*EXTRA.values(), *KINDS, *JOB_KINDS]


def rank(found: Sequence[Finding]) -> List[Finding]:
    """``found`` in the verdict's order: tier, then the registry's order, then strength."""
    order = {k.code: i for i, k in enumerate(all_kinds())}

    def key(f: Finding) -> tuple:
        k = kind(f.code)
        return TIERS.index(k.tier), order[f.code], -f.strength

    return sorted(found, key=key)


def find(rows: Sequence[Row], answers: Sequence[Finding] = ()) -> List[Finding]:
    """Every finding of the sweep whose report ``rows`` are given (``sweep.report.summary.collect``),
    with ``answers`` (another tool's: an isolation, a sweep against another) first, ranked
    (:func:`rank`)."""
    ctx = Context(rows)
    for k in KINDS:
        ctx.found[k.code] = k.check(ctx)
    return rank([*answers, *(f for k in KINDS for f in ctx.found[k.code])])


def find_job(row: Row) -> List[Finding]:
    """One job's findings (:data:`JOB_KINDS`, in that order) from its report row
    (``sweep.report.summary.collect_job``)."""
    ctx = Context([row])
    return [f for k in JOB_KINDS for f in k.check(ctx)]


def lead(found: Sequence[Finding]) -> Optional[Finding]:
    """The finding that leads the headline: the first of tier ``answer`` other than the counts,
    else the first of tier ``decides``; ``None`` without either."""
    for tier in ("answer", "decides"):
        for f in found:
            if f.code != counts.KIND.code and kind(f.code).tier == tier:
                return f
    return None


def tables(rows: Sequence[Row]) -> Dict[str, Any]:
    """The numbers the report's tables show beside the findings (``summary.json``): ``factors``,
    ``levels``, ``contrasts``, ``culprits`` (the ranked candidates), ``interactions``, ``ties``,
    ``fixes``, ``scalers``, ``confounded``, ``nondeterministic``, ``drift`` (class -> job numbers)."""
    from sweep.analysis import culprits as grid_evidence
    from sweep.analysis import grid
    from sweep.analysis.evidence import DRIFT_CLASSES, drift_class

    ranked = grid_evidence.candidates(rows)
    drift: Dict[str, List[int]] = {cls: [] for cls in DRIFT_CLASSES}
    for row in rows:
        cls = drift_class(row)
        if cls:
            drift[cls].append(row["job"])
    return {"factors": grid.factors(rows), "levels": grid.level_stats(rows), "contrasts": grid.contrasts(rows),
            "culprits": ranked, "interactions": grid_evidence.interactions(rows, ranked),
            "ties": grid_evidence.ties(ranked, rows), "fixes": grid_evidence.fixes(rows),
            "scalers": grid_evidence.scalers(rows),
            "confounded": grid_evidence.confounded(rows) if not ranked else None,
            "nondeterministic": [{"job": r["job"], "status": r["status"], "overrides": r["overrides"],
                                  "spread": r.get("repeat_spread")} for r in rows if r.get("nondeterministic")],
            "drift": drift}
