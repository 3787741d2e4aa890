"""V122 only with: a level turns a pass into a fail only under some levels of another factor."""

from __future__ import annotations

from typing import List

from sweep.analysis import culprits as grid_evidence
from sweep.analysis.grid import label
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import candidates


def check(ctx: Context) -> List[Finding]:
    found = grid_evidence.interactions(ctx.rows, candidates(ctx))
    return [KIND.make(levels=[f"{i['factor']}={label(i['level'])}"], evidence=("status", "overrides"),
                      strength=i["flips"], name=f"{i['factor']}={label(i['level'])}", with_factor=i["with_factor"],
                      with_levels=[label(w) for w in i["with_levels"]], flips=i["flips"], pairs=i["pairs"],
                      without_levels=[label(w) for w in i["without_levels"]], without_pairs=i["without_pairs"],
                      already=i.get("without_failing") or None)
            for i in found]


KIND = Kind(
    code="V122", name="only with", tier="proof",
    template="{name} turns a pass into a fail only when {with_factor}={with_levels|/} ({flips} of {pairs} pairs), "
             "never when {with_factor}={without_levels|/} (0 of {without_pairs} pairs[; in {already} of them the job "
             "without it fails already]).",
    rests_on="the level's one-factor pairs, split by the level of another factor they share",
    not_claimed="that the other factor causes it: it decides whether the level shows",
    check=check,
    example={"name": "mesh=dp4", "with_factor": "mp_policy", "with_levels": ["bf16"], "flips": 2, "pairs": 2,
             "without_levels": ["fp32"], "without_pairs": 2, "already": None},
)
