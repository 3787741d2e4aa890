"""V001 isolation, V002 against, V003 bisection: another tool's answer, which leads the verdict
where it exists. Their rules read that tool's state (``isolate.json``, the matched sweeps,
``bisect.json``); the full reports stay theirs (``sweep.report.isolate_report``,
``sweep.report.against``, ``sweep.report.bisect_report``)."""

from __future__ import annotations

from typing import Any, Dict, List

from sweep.findings.base import Context, Finding, Kind

CHANGES = ("fixed", "broke", "still failing", "still passing", "other")


def _none(ctx: Context) -> List[Finding]:  # produced from a tool's state, never from rows
    return []


def isolation(state: Dict[str, Any]) -> List[Finding]:
    """The isolation's answer (``isolate.json``'s state), or ``[]`` where it has none yet."""
    minimal = state.get("minimal") or []
    if not minimal or state.get("status") in ("running", "endpoints"):
        return []
    proof = state.get("proof") or {}
    passing, failing = (proof.get("passing") or [None])[0], (proof.get("failing") or [None])[0]
    return [ISOLATION.make(jobs=[j for j in (passing, failing) if j is not None], levels=list(minimal),
                           evidence=("isolate.json",), answer=state.get("answer"), n=len(minimal),
                           together=len(minimal) >= 2, passing=passing, failing=failing,
                           jobs_run=state.get("n_jobs"), grid=state.get("grid_jobs"))]


def against(found: Dict[str, Any], old_name: str) -> List[Finding]:
    """What changed between two sweeps (``sweep.report.against.match``'s counts)."""
    counts = found.get("counts") or {}
    changes = [f"{k}: {counts.get(k, 0)}" for k in CHANGES if counts.get(k) or k in ("fixed", "broke",
                                                                                       "still failing")]
    return [AGAINST.make(evidence=("status",), old=old_name, changes=changes, fixed=counts.get("fixed", 0),
                         broke=counts.get("broke", 0), only_new=len(found.get("only_new") or []) or None,
                         only_old=len(found.get("only_old") or []) or None)]


def bisection(state: Dict[str, Any]) -> List[Finding]:
    """The bisection's answer (``bisect.json``'s state), or ``[]`` where it decided nothing."""
    first = state.get("first_bad")
    if not first or state.get("status") in ("error", "bad_passes"):
        return []
    parent = state.get("parent") or {}
    return [BISECTION.make(evidence=("bisect.json",), commit=f"{first['sha'][:10]} {first['subject']!r}",
                           parent=f"{parent['sha'][:10]} {parent['subject']!r}" if parent.get("sha") else None,
                           probes=state.get("n_probes"), commits=state.get("n_commits"))]


ISOLATION = Kind(
    code="V001", name="isolation", tier="answer",
    template="Isolation: the minimal failure-inducing change is {answer}[{together|if}: these {n} changes fail only "
             "together][; proof: job {passing} passes and job {failing} fails, differing in exactly that][ ({jobs_run} "
             "jobs of the {grid} a full grid would run)].",
    rests_on="delta debugging between a failing and a passing config: the smallest set of changes whose jobs fail, "
             "proven by two jobs that differ in exactly that set",
    not_claimed="that it is the only cause: isolate.md says whether the rest fails without it",
    check=_none,
    example={"answer": "weights.transfer=shared + order=standalone_first", "together": True, "n": 2, "passing": 0,
             "failing": 4, "jobs_run": 9, "grid": 32},
)
AGAINST = Kind(
    code="V002", name="against", tier="answer",
    template="Against {old}: {changes|; }[; only in the new sweep: {only_new}][; only in the old: {only_old}].",
    rests_on="the jobs of two sweeps matched by config; each pair's statuses",
    not_claimed="why a job changed: each sweep's own verdict says",
    check=_none, example={"old": "outputs/multirun/old", "changes": ["fixed: 2", "broke: 0", "still failing: 0"],
                          "fixed": 2, "broke": 0, "only_new": None, "only_old": None},
)
BISECTION = Kind(
    code="V003", name="bisection", tier="answer",
    template="First failing commit: {commit}[; its parent {parent} passes][ ({probes} probes over {commits} commits)].",
    rests_on="git bisect over a library's commits: each probe's jobs fail or pass (bisect.json)",
    not_claimed="the fault's place in that commit: the sweep's verdict at it says",
    check=_none, example={"commit": "a1b2c3d4e5 'reduce in bf16'", "parent": "0f9e8d7c6b 'tests'", "probes": 3,
                          "commits": 8},
)

from sweep.findings import EXTRA  # noqa: E402  (the registry's table of answer kinds)

EXTRA.update({k.code: k for k in (ISOLATION, AGAINST, BISECTION)})
