"""V141 scales the drift: a level makes the drift larger against another, in pairs where both jobs
differ beyond their rounding envelope."""

from __future__ import annotations

from typing import List

from sweep.analysis import culprits as grid_evidence
from sweep.analysis.grid import label
from sweep.findings.base import Context, Finding, Kind

def scalers(ctx: Context) -> list:
    """The scale and sign contrasts (``sweep.analysis.culprits.scalers``), computed once."""
    return ctx.shared("scalers", lambda: grid_evidence.scalers(ctx.rows))



def check(ctx: Context) -> List[Finding]:
    return [KIND.make(levels=[f"{s['factor']}={label(s['level'])}"], evidence=("max_abs_diff", "envelope"),
                        strength=s["ratio"], name=f"{s['factor']}={label(s['level'])}", factor=s["factor"],
                        other=label(s["other"]), ratio=s["ratio"], pairs=s["pairs"])
            for s in scalers(ctx) if s["scales"]][:3]


KIND = Kind(
    code="V141", name="scales the drift", tier="contrast",
    template="{name} scales the drift {ratio:.1f}x against {factor}={other} ({pairs} one-factor pair{pairs|s} where "
             "both differ).",
    rests_on="the geometric mean of max |diff| at the level over the other level's, in one-factor pairs where both "
             "jobs differ beyond their rounding envelope (losses too) and neither job's copies differ in what they "
             "draw or hold (V153); reported from 2x",
    not_claimed="a cause: a factor can change a drift's size without causing it",
    check=check, example={"name": "mesh=dp4", "ratio": 2.8, "factor": "mesh", "other": "dp2", "pairs": 2},
)
