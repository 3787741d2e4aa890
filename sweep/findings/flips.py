"""V142 flips its sign: a level drifts the other way than another, in pairs where both jobs differ
beyond their rounding envelope and each holds a sign."""

from __future__ import annotations

from typing import List

from sweep.analysis.grid import label
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.scales import scalers


def check(ctx: Context) -> List[Finding]:
    return [KIND.make(levels=[f"{s['factor']}={label(s['level'])}"], evidence=("envelope.loss.sign", "runs_low_pct"),
                       strength=s["sign_flips"], name=f"{s['factor']}={label(s['level'])}", factor=s["factor"],
                       other=label(s["other"]), flips=s["sign_flips"], pairs=s["pairs"])
            for s in scalers(ctx) if s["flips"]][:3]


KIND = Kind(
    code="V142", name="flips its sign", tier="contrast",
    template="{name} flips its sign against {factor}={other} ({flips} of {pairs} pairs).",
    rests_on="pairs in which both jobs differ beyond their rounding envelope and each holds a sign (75 % of its steps "
             "beyond the envelope one way), the signs opposite in most pairs",
    not_claimed="a sign for jobs within their envelope, or whose steps take both signs",
    check=check, example={"name": "order=a", "factor": "order", "other": "b", "flips": 2, "pairs": 2},
)
