"""V107 precision: every failing job parts at step 0 by a lower precision than its standalone copy's."""

from __future__ import annotations

from typing import List

from sweep.analysis.evidence import drift_class
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import candidates, faults, lower_precision


def check(ctx: Context) -> List[Finding]:
    failing = faults(ctx)
    if not failing or candidates(ctx) or ctx.decided():
        return []
    if any(drift_class(r) != "step0" or not lower_precision(r) for r in failing):
        return []
    return [KIND.make(jobs=[r["job"] for r in failing], evidence=("first_real_step", "config.mp_policy"),
                      dtypes=sorted({lower_precision(r) for r in failing}))]


KIND = Kind(
    code="V107", name="precision", tier="decides",
    template="Each failing job parts at step 0 by its {dtypes|/} parameters against a float32 standalone copy: the "
             "precision alone does that; baseline.precision=policy runs the standalone copy under the same policy, "
             "which leaves what the engine does.",
    headline="Each parts at step 0 by its {dtypes|/} parameters against a float32 standalone copy: compare with "
             "baseline.precision=policy.",
    rests_on="every failing job is class step0 with a mp_policy.param_dtype other than its standalone copy's "
             "precision, beyond its rounding envelope",
    not_claimed="an engine fault: the precision alone parts them",
    check=check, example={"dtypes": ["bfloat16"]},
)
