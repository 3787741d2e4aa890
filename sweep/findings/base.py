"""What a finding is, what a kind of finding is, and what every rule reads.

A **finding** (:class:`Finding`) is data: its kind's stable ``code``, the jobs, levels and
steps it rests on, the ``values`` its sentence needs (numbers in their units, names), the
evidence fields its rule read, and its ``strength`` (its rank among the findings of one kind).
A **kind** (:class:`Kind`) is one rule of the verdict: its code, its tier, its sentence
template (``sweep.report.template``: data, filled by the report, never here), what it rests on,
what it does not claim, and its check (a :class:`Context` in, findings out). Each kind lives in
a module of its own (``sweep.findings.<name>``); the registry (``sweep.findings``) checks them in
one order and ranks what they find in one place; every output renders the same findings
(``sweep.report.findings``). The model is a linter's rule book (Ruff: one rule, one file, its
code, message, docs and tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

Row = Dict[str, Any]

# The tiers, in the order the verdict is read: what another tool answered (an isolation, a
# sweep against another, a bisection), what decides (one finding leads the headline), what it
# rests on or leaves open, the contrasts between levels, the context, the limits of the evidence.
TIERS = ("answer", "decides", "proof", "contrast", "context", "limits")


@dataclass(frozen=True)
class Finding:
    """One thing the verdict says, as data (module docstring).

    ``code``: its kind's code (``V101``); ``kind``: the kind's name; ``jobs``: the job
    numbers it rests on; ``levels``: the ``factor=level`` overrides it is about; ``steps``:
    named steps (``{"parts": 1}``); ``values``: what its sentence reads; ``evidence``: the
    fields its rule read (``status``, ``envelope.loss.within``, ``first_tensor``...);
    ``strength``: its rank among its kind's findings (larger first: a score, a share)."""

    code: str
    kind: str
    jobs: Tuple[int, ...] = ()
    levels: Tuple[str, ...] = ()
    steps: Dict[str, Optional[int]] = field(default_factory=dict)
    values: Dict[str, Any] = field(default_factory=dict)
    evidence: Tuple[str, ...] = ()
    strength: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready (``summary.json``'s ``findings``)."""
        return {"code": self.code, "kind": self.kind, "jobs": list(self.jobs), "levels": list(self.levels),
                "steps": dict(self.steps), "values": dict(self.values), "evidence": list(self.evidence),
                "strength": self.strength}


@dataclass(frozen=True)
class Kind:
    """One rule of the verdict (module docstring).

    ``code``: stable, never reused; ``name``: the kind in a few words; ``tier``: one of
    :data:`TIERS`; ``template``: its sentence (``sweep.report.template``); ``headline``: a
    shorter template where the kind leads the headline (``None``: it never does); ``rests_on``
    and ``not_claimed``: what its rule reads and what it does not claim, in words (the docs'
    page of the code); ``check``: the rule; ``example``: values its template renders for the
    docs (``python -m sweep explain CODE`` prints both)."""

    code: str
    name: str
    tier: str
    template: str
    rests_on: str
    not_claimed: str
    check: Callable[["Context"], List[Finding]]
    headline: Optional[str] = None
    example: Dict[str, Any] = field(default_factory=dict)

    def make(self, jobs: Sequence[int] = (), levels: Sequence[str] = (), steps: Optional[Dict[str, Any]] = None,
             evidence: Sequence[str] = (), strength: float = 0.0, **values: Any) -> Finding:
        """A finding of this kind."""
        return Finding(code=self.code, kind=self.name, jobs=tuple(int(j) for j in jobs), levels=tuple(levels),
                       steps=dict(steps or {}), values=values, evidence=tuple(evidence), strength=float(strength))


class Context:
    """What every rule reads: the sweep's rows (``sweep.report.summary.collect``) and what several
    rules share, computed once (:meth:`shared`): the culprit candidates, the ties, ... A rule may
    read the findings of kinds checked before it (``found``: code -> its findings)."""

    def __init__(self, rows: Sequence[Row]) -> None:
        self.rows = list(rows)
        self.cache: Dict[str, Any] = {}
        self.found: Dict[str, List[Finding]] = {}

    def shared(self, name: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per context under ``name``."""
        if name not in self.cache:
            self.cache[name] = compute()
        return self.cache[name]

    def decided(self) -> bool:
        """Whether a kind of the ``decides`` tier has found something already (one leads)."""
        from sweep.findings import KINDS

        return any(self.found.get(k.code) for k in KINDS if k.tier == "decides")
