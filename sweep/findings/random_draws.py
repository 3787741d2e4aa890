"""V105 random draws: the failing jobs draw random numbers on sharded data, so no culprit follows."""

from __future__ import annotations

from typing import List

from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import decision, name


def check(ctx: Context) -> List[Finding]:
    found = decision(ctx)
    if found is None or found["kind"] != "random_draws":
        return []
    top = found["top"]
    return [KIND.make(jobs=top["failing_jobs"], levels=[name(top)], evidence=("notes",), name=name(top))]


KIND = Kind(
    code="V105", name="random draws", tier="decides",
    template="No culprit from this alone: the failing {name} jobs draw random numbers on sharded data (dropout?), so "
             "the copies' masks differ and their losses cannot match.",
    headline="No culprit: the failing {name} jobs draw random numbers on sharded data.",
    rests_on="every failing job of the top level notes random draws with data.split=sharded",
    not_claimed="a fault: masks cannot match when the rows differ",
    check=check, example={"name": "model=dropout"},
)
