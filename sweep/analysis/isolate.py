"""Delta debugging: the smallest set of config changes that turns a pass into a fail.

Pure and framework-free (no Hydra, no I/O): the Hydra sweeper
``hydra_plugins.sweep_isolate`` wraps it, and unit tests drive it with constructed
oracles.

The algorithm is Zeller's *ddmin* (A. Zeller and R. Hildebrandt, "Simplifying and
Isolating Failure-Inducing Input", IEEE Transactions on Software Engineering 28(2),
2002), applied to configuration changes:

- a *change* is one override key going from its value in the passing config to its
  value in the failing config (:class:`Change`);
- a *probe* is the passing config with a subset of the changes applied (the empty
  subset is the passing config, the full set the failing one);
- the *oracle* judges a batch of probes: :data:`PASS`, :data:`FAIL`, or
  :data:`UNRESOLVED` / :data:`ERROR` (repeats disagree; the job crashed or timed out).
  Only :data:`FAIL` ever shrinks the failing set, so a probe without a verdict is
  never taken as a pass or a fail: ddmin routes around it (paper, section 5).

Starting from the full set ``c`` and granularity ``n = 2``, each round splits ``c``
into ``n`` contiguous parts of near-equal size and tests, as one batch, every part
(reduce to a failing part, ``n = 2``); if none fails, then every complement ``c - part``
as a second batch (reduce to a failing complement, ``n = max(n - 1, 2)``); if neither
fails, it doubles ``n`` until ``n = |c|``. The result is *1-minimal*: removing any one
of its changes gives a probe that does not fail. Finding ``k`` failure-inducing changes
out of ``N`` takes O(k log N) probes when the oracle is monotone, at most
``N^2 + 3N`` in the worst case. A result of two or more changes is an interaction: the
changes fail together, and (1-minimality) no set without one of them fails.

Probe order, and so the order of the oracle's batches, depends only on the changes'
order and the verdicts: a rerun that gets the same verdicts asks for the same probes
in the same order (which is what lets an interrupted isolation resume job by job).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

PASS = "pass"
FAIL = "fail"
UNRESOLVED = "unresolved"  # repeats of the probe disagree, or it passes within an envelope too wide to show the fault
ERROR = "error"  # the probe's job errored or timed out: no verdict
VERDICTS = (PASS, FAIL, UNRESOLVED, ERROR)

Subset = Tuple[int, ...]  # indices into the change list, ascending
Oracle = Callable[[List[Subset], str], List[str]]


@dataclass(frozen=True)
class Change:
    """One override key whose value differs between the two configs.

    ``passing`` / ``failing`` are the override values as strings; ``None`` means the
    key is not overridden there (the config's default applies)."""

    key: str
    passing: Optional[str]
    failing: Optional[str]

    def __str__(self) -> str:
        return f"{self.key}={'(default)' if self.failing is None else self.failing}"


@dataclass
class Probe:
    """One tested subset: ``changes`` (indices), ``verdict`` (one of :data:`VERDICTS`),
    ``phase`` (``"endpoints"``, ``"subsets"`` or ``"complements"``), ``granularity``
    (``n`` of that round; 0 for endpoints) and ``round`` (0-based batch number)."""

    changes: Subset
    verdict: str
    phase: str
    granularity: int
    round: int


@dataclass
class Isolation:
    """The outcome of :func:`ddmin`.

    - ``minimal``: indices of the smallest failing set found (the full set if nothing
      smaller failed; empty when the endpoints do not pass and fail);
    - ``one_minimal``: every ``minimal - {c}`` was tested and passed (proven 1-minimal);
    - ``unproven``: elements ``c`` of ``minimal`` whose removal was tested without a
      verdict (unresolved/error) or not at all (budget), so minimality is not proven for them;
    - ``status``: ``"isolated"``, ``"budget"`` (stopped by the budget: best answer so
      far), or ``"endpoints"`` (the passing config does not pass or the failing one does
      not fail: nothing to isolate);
    - ``why``: what the status rests on, as data (the report words it:
      ``sweep.report.isolate_report.reason_text``): ``{"passing": verdict, "failing": verdict}``
      for ``endpoints``, ``{"budget": probes, "endpoints_judged": bool}`` for ``budget``, ``{}``
      for ``isolated``;
    - ``probes``: every probe in the order tested; ``verdicts``: subset -> verdict.
    """

    minimal: Subset
    one_minimal: bool
    unproven: Subset
    status: str
    why: Dict[str, Any] = field(default_factory=dict)
    probes: List[Probe] = field(default_factory=list)
    verdicts: Dict[Subset, str] = field(default_factory=dict)

    @property
    def interaction(self) -> bool:
        """Two or more changes that fail only together (when :attr:`one_minimal`)."""
        return len(self.minimal) >= 2


def combine(verdicts: Sequence[str]) -> str:
    """One probe's verdict from its repeats: all :data:`PASS` -> PASS, all :data:`FAIL`
    -> FAIL, any :data:`ERROR` and no disagreement -> ERROR, PASS and FAIL mixed ->
    :data:`UNRESOLVED` (never a pass or a fail).

    Raises:
        ValueError: no verdicts, or one not in :data:`VERDICTS`.
    """
    if not verdicts:
        raise ValueError("combine() needs at least one verdict")
    unknown = [v for v in verdicts if v not in VERDICTS]
    if unknown:
        raise ValueError(f"unknown verdict(s) {unknown}; allowed: {', '.join(VERDICTS)}")
    seen = set(verdicts)
    if UNRESOLVED in seen or {PASS, FAIL} <= seen:
        return UNRESOLVED
    if ERROR in seen:
        return ERROR
    return seen.pop()


def split(c: Sequence[int], n: int) -> List[Subset]:
    """``c`` in ``n`` contiguous parts, the first ``len(c) % n`` one longer (Zeller's split).

    Raises:
        ValueError: ``n`` not in ``1..len(c)``.
    """
    if not 1 <= n <= len(c):
        raise ValueError(f"cannot split {len(c)} changes into n={n} parts")
    size, extra = divmod(len(c), n)
    parts, start = [], 0
    for i in range(n):
        end = start + size + (i < extra)
        parts.append(tuple(c[start:end]))
        start = end
    return parts


class _Tester:
    """Runs batches through the oracle with a cache (a subset is never probed twice)
    and a budget in probes."""

    def __init__(self, oracle: Oracle, budget: Optional[int], known: Dict[Subset, str]) -> None:
        self.oracle = oracle
        self.budget = budget
        self.verdicts: Dict[Subset, str] = dict(known)
        self.probes: List[Probe] = []
        self.rounds = 0
        self.exhausted = False

    def test(self, subsets: Sequence[Subset], phase: str, n: int) -> List[Optional[str]]:
        """Verdicts of ``subsets`` in order; ``None`` for one the budget left untested."""
        new = list(dict.fromkeys(s for s in subsets if s not in self.verdicts))
        if self.budget is not None:
            room = max(self.budget - len(self.probes), 0)
            if len(new) > room:
                new, self.exhausted = new[:room], True
        if new:
            got = self.oracle(new, phase)
            if len(got) != len(new):
                raise ValueError(f"the oracle returned {len(got)} verdicts for {len(new)} probes")
            for subset, verdict in zip(new, got):
                if verdict not in VERDICTS:
                    raise ValueError(f"the oracle returned {verdict!r}; allowed: {', '.join(VERDICTS)}")
                self.verdicts[subset] = verdict
                self.probes.append(Probe(subset, verdict, phase, n, self.rounds))
            self.rounds += 1
        return [self.verdicts.get(s) for s in subsets]


def ddmin(
    n_changes: int, oracle: Oracle, budget: Optional[int] = None, known: Optional[Dict[Subset, str]] = None
) -> Isolation:
    """A 1-minimal failure-inducing subset of ``range(n_changes)`` by ddmin.

    Args:
        n_changes: number of changes between the passing and the failing config (>= 1).
        oracle: ``oracle(subsets, phase) -> verdicts``: judges a batch of subsets (tuples
            of change indices, ascending), one verdict of :data:`VERDICTS` per subset, in
            order. The probes of one batch are independent (they may run in parallel).
        budget: most probes to run (``None``: no limit); when the next batch does not
            fit, as many of its probes as fit run (in order), then it stops with the
            smallest failing set found so far (``status="budget"``).
        known: verdicts already measured (e.g. the endpoints from a finished sweep), by
            subset; they are not probed again and do not count against the budget.

    The endpoints (the empty set: the passing config; the full set: the failing one)
    are probed first unless ``known``; isolation needs the first to pass and the
    second to fail (else ``status="endpoints"``).

    Raises:
        ValueError: ``n_changes < 1``, a negative budget, or an oracle returning the wrong
            number of verdicts or an unknown one.
    """
    if n_changes < 1:
        raise ValueError(f"nothing to isolate: the two configs differ in {n_changes} changes")
    if budget is not None and budget < 0:
        raise ValueError(f"budget={budget} must be >= 0 probes")
    tester = _Tester(oracle, budget, dict(known or {}))
    everything = tuple(range(n_changes))
    base, full = tester.test([(), everything], "endpoints", 0)
    if base is None or full is None:
        return _outcome(tester, everything if full == FAIL else (), "budget",
                        {"budget": budget, "endpoints_judged": False})
    if base != PASS or full != FAIL:
        return _outcome(tester, (), "endpoints", {"passing": base, "failing": full})
    return _narrow(tester, everything, budget)


def _outcome(tester: "_Tester", minimal: Subset, status: str, why: Dict[str, Any]) -> Isolation:
    """The isolation's result: ``minimal`` proven 1-minimal where removing any one change
    passed (``unproven``: the changes whose removal was not judged to pass)."""
    removals = [tuple(x for x in minimal if x != c) for c in minimal]
    unproven = tuple(c for c, r in zip(minimal, removals) if tester.verdicts.get(r) != PASS)
    return Isolation(minimal, bool(minimal) and not unproven, unproven, status, why, tester.probes,
                     tester.verdicts)


def _narrow(tester: "_Tester", c: Subset, budget: Optional[int]) -> Isolation:
    """ddmin's loop from the failing set ``c`` (Zeller and Hildebrandt, *Simplifying and
    Isolating Failure-Inducing Input*, 2002): test ``n`` parts, then their complements; keep
    a failing one and restart at 2 (or ``n - 1`` for a complement); else double ``n`` up to
    ``len(c)``."""
    n = 2
    while len(c) >= 2:
        parts = split(c, n)
        verdicts = tester.test(parts, "subsets", n)
        failing = [p for p, v in zip(parts, verdicts) if v == FAIL]
        if failing:
            c, n = failing[0], 2
            continue
        complements = [tuple(x for x in c if x not in p) for p in parts] if n > 2 else []
        cverdicts = tester.test(complements, "complements", n)
        failing = [p for p, v in zip(complements, cverdicts) if v == FAIL]
        if failing:
            c, n = failing[0], max(n - 1, 2)
            continue
        if None in verdicts or None in cverdicts:
            return _outcome(tester, c, "budget", {"budget": budget, "endpoints_judged": True})
        if n >= len(c):
            break
        n = min(len(c), 2 * n)
    return _outcome(tester, c, "isolated", {})


def hamming(a: Dict[str, Optional[str]], b: Dict[str, Optional[str]]) -> int:
    """Keys whose values differ between two override maps (a missing key counts as a value)."""
    return sum(a.get(k) != b.get(k) for k in dict.fromkeys([*a, *b]))


def spread_order(points: Sequence[Dict[str, Optional[str]]]) -> Iterator[int]:
    """Indices of ``points`` (override maps, e.g. a grid's jobs) in farthest-point order:
    the first point, then each time the one farthest (:func:`hamming`) from all those
    already given, ties to the lowest index. Lazy: each next index costs O(len(points))."""
    if not points:
        return
    dist = [hamming(points[0], p) for p in points]
    taken = {0}
    yield 0
    while len(taken) < len(points):
        best = max((i for i in range(len(points)) if i not in taken), key=lambda i: (dist[i], -i))
        taken.add(best)
        yield best
        dist = [min(d, hamming(points[best], p)) for d, p in zip(dist, points)]


def changes_between(passing: Dict[str, Optional[str]], failing: Dict[str, Optional[str]]) -> List[Change]:
    """The :class:`Change` of every key whose value differs, in the failing map's key
    order, then keys only the passing map has."""
    keys = dict.fromkeys([*failing, *passing])
    return [Change(k, passing.get(k), failing.get(k)) for k in keys if passing.get(k) != failing.get(k)]


def apply(passing: Dict[str, Optional[str]], changes: Sequence[Change], subset: Subset) -> List[str]:
    """The override list of the probe ``subset``: the passing map with those changes
    applied (a change to ``None`` drops the key), ``key=value`` strings in the passing
    map's key order, then keys only the changes add."""
    values = dict(passing)
    for i in subset:
        values[changes[i].key] = changes[i].failing
    return [f"{k}={v}" for k, v in values.items() if v is not None]


def context_probes(
    base: Dict[str, Optional[str]], levels: Dict[str, Sequence[str]], skip: Sequence[str]
) -> List[Tuple[str, str]]:
    """The one-factor neighbours of a failing config ``base`` in a grid: ``(key, level)``
    for every factor of ``levels`` (key -> the grid's values, in grid order) not in
    ``skip`` (the minimal set's keys) and each of its levels other than ``base``'s.

    ddmin's answer holds for the context of the passing endpoint; these probes tell
    whether the failure also needs some factor outside the minimal set at its level
    there (an interaction that the two endpoints could not show because both had a
    level under which the set fails)."""
    return [(k, v) for k, values in levels.items() if k not in skip for v in values if v != base.get(k)]


def conditions(
    base: Dict[str, Optional[str]], verdicts: Dict[Tuple[str, str], str]
) -> Dict[str, Dict[str, List[Optional[str]]]]:
    """The factors the failure of ``base`` depends on, from the verdicts of its
    :func:`context_probes`: key -> ``{"fails": levels, "passes": levels, "unknown":
    levels}`` (``base``'s own level is among ``fails``) for each key where some level
    passes. A level without a verdict (unresolved, error) is never a pass."""
    found: Dict[str, Dict[str, List[Optional[str]]]] = {}
    for key in dict.fromkeys(k for k, _ in verdicts):
        mine = [(v, verdicts[(k, v)]) for k, v in verdicts if k == key]
        if any(verdict == PASS for _, verdict in mine):
            found[key] = {
                "fails": [base.get(key)] + [v for v, verdict in mine if verdict == FAIL],
                "passes": [v for v, verdict in mine if verdict == PASS],
                "unknown": [v for v, verdict in mine if verdict in (UNRESOLVED, ERROR)],
            }
    return found
