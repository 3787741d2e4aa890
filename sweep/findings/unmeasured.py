"""V160 envelope not measured: differing jobs whose rounding envelope was not measured; nothing there
is called rounding."""

from __future__ import annotations

from collections import defaultdict
from typing import Dict, List

from sweep.analysis.grid import JUDGED
from sweep.analysis.rounding import envelope
from sweep.findings.base import Context, Finding, Kind


def check(ctx: Context) -> List[Finding]:
    why: Dict[str, List[int]] = defaultdict(list)
    for r in ctx.rows:
        found = envelope(r)
        if r["status"] in JUDGED and r.get("first_diff_step") is not None and r.get("result") is not None \
                and not found.get("measured"):
            why[str(found.get("why") or "no envelope in the record")].append(r["job"])
    return [KIND.make(jobs=jobs, evidence=("envelope",), n=len(jobs), listed=jobs[:6], why=reason)
            for reason, jobs in why.items()]


KIND = Kind(
    code="V160", name="envelope not measured", tier="limits",
    template="The rounding envelope of {n} differing job{n|s} was not measured (job{n|s} {listed}: {why}): nothing "
             "there is called rounding.",
    rests_on="the job records' envelope: no twin trained (runner=command without repeats, compare.envelope=false)",
    not_claimed="that those differences are causes: only that they were not measured against rounding",
    check=check, example={"n": 2, "listed": [0, 1], "why": "runner=command: no twin of the standalone copy can "
                                                                "train inside your command"},
)
