"""V109 tolerance finer than the precision: failing jobs stay within their rounding envelope."""

from __future__ import annotations

from typing import List, Optional

from sweep.analysis.envelope import hold_text
from sweep.analysis.rounding import hold
from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import dtypes, faults, lower_precision, real, tolerance_jobs


def check(ctx: Context) -> List[Finding]:
    only = tolerance_jobs(ctx)
    if not only:
        return []
    comparison = getattr(only[0].get("result"), "comparison", None) or {}
    fails = sum(r["status"] == "fail" for r in ctx.rows)
    # "No fault" only where no job leaves its envelope: a passing job beyond it is a cause below tolerance (V112)
    beside = len(only) == fails and bool(real(ctx))
    return [KIND.make(jobs=[r["job"] for r in only], evidence=("status", "envelope.loss", "first_real_step"),
                      strength=len(only), n=len(only), fails=fails, every=len(only) == fails and not beside,
                      beside=beside,
                      dtypes=dtypes(only), rtol=comparison.get("rtol"), atol=comparison.get("atol"),
                      hold=hold_text(hold(only)) or None, others=bool(faults(ctx)),
                      policy=sorted({p for p in (lower_precision(r) for r in only) if p}),
                      lowered=_some(only))]


def _some(only: List) -> Optional[List[int]]:
    """The jobs among ``only`` whose standalone copy computes in float32 against a lower policy,
    where not all of them are (the advice is theirs alone); ``None`` where all or none."""
    lowered = [r["job"] for r in only if lower_precision(r)]
    return lowered if 0 < len(lowered) < len(only) else None


KIND = Kind(
    code="V109", name="tolerance finer than the precision", tier="decides",
    template="[{every|if}No fault: the {n} failing job{n|s} stay{n|?s:}][{beside|if}The {n} failing job{n|s} "
             "stay{n|?s:}][{others|if}{n} of the {fails} failing jobs "
             "stay{n|?s:}] within {n|?its:their} rounding envelope ({dtypes|or}) at every step: rtol={rtol}, "
             "atol={atol} is finer than this precision holds[, {hold} would hold][; mp_policy.param_dtype={policy|/} "
             "against a float32 standalone copy[ (job{lowered|s} {lowered})]: baseline.precision=policy runs the "
             "standalone copy under the same policy]; no culprit is named from them.",
    rests_on="every failing job counted fails its tolerance only where its losses, traced tensors and updates stay "
             "within their rounding envelope, and nothing else fails (ranks, replicas, copies that start or end "
             "apart); \"No fault\" only where no job, passing or failing, leaves its envelope (else V112 leads)",
    not_claimed="that the tolerance is wrong for other precisions; the tolerance that would hold is the envelope's "
                "size (compare.envelope_margin x the envelope over 1 + |standalone|), rounded up",
    check=check,
    example={"n": 2, "fails": 2, "every": True, "beside": False, "others": False, "dtypes": ["bfloat16"],
             "rtol": 0.0001, "atol": 0.0001, "lowered": None, "hold": "rtol = atol = 7e-02", "policy": ["bfloat16"]},
)
