"""V121 where: where the earliest of the deciding jobs parts from standalone, its class, onset,
first module and first tensor."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from sweep.findings.base import Context, Finding, Kind
from sweep.findings.shared import decision, name, place, real


def _each(ctx: Context, named: List[dict], first: int) -> List[Dict[str, Any]]:
    """Where each of several culprits weighed alike parts (:func:`place` over its own failing
    jobs): ``{"name", "parting", "cls", "job", "until", "first"}`` in the order named; a
    culprit whose jobs have no class is left out. ``first``: the job the finding leads with."""
    out = []
    for culprit in named:
        ids = set(culprit["failing_jobs"])
        at = place([r for r in ctx.rows if r["job"] in ids])
        if at is not None:
            out.append({"name": name(culprit), "parting": at["parting"], "cls": at["cls"], "job": at["job"],
                        "until": at["until"], "first": first in ids})
    return out


def _others(each: List[Dict[str, Any]]) -> Optional[str]:
    """The clause for the culprits the finding does not lead with: each one's earliest job, its
    step, class and end."""
    parts = [f"{e['name']} parts at step {e['parting']} in job {e['job']} ({e['cls']}"
             + (f", over after update {e['until']}" if e["until"] is not None else "") + ")"
             for e in each if not e["first"]]
    return "; ".join(parts) or None


def check(ctx: Context) -> List[Finding]:
    found = decision(ctx)
    if found is not None:
        ids = {j for c in found["named"] for j in c["failing_jobs"]}
        jobs = [r for r in ctx.rows if r["job"] in ids]
    else:
        jobs = real(ctx)
    at = place(jobs)
    if at is None:
        return []
    each = _each(ctx, found["named"], at["job"]) if found is not None and len(found["named"]) > 1 else []
    if len(each) > 1:  # culprits weighed alike: where each parts, not one step merged over them
        at = dict(at, one=False, others=_others(each),
                  each=[f"{e['name']} from step {e['parting']} ({e['cls']})" for e in each])
    else:
        at = dict(at, one=True, others=None, each=None)
    return [KIND.make(jobs=[at["job"]], steps={"parts": at["step"], "beyond": at["beyond"], "fail": at["fail"]},
                      evidence=("first_diff_step", "first_real_step", "onset", "first_module", "first_tensor"),
                      # one step for the headline, this sentence and V112: where a traced tensor left its envelope
                      # before the losses did, the step its weights feed (the table's first step is the losses')
                      lead=at["parting"] if at["earlier"] is not None else at["step"],
                      losses=at["step"] if at["earlier"] is not None else None, **at)]


KIND = Kind(
    code="V121", name="where", tier="proof",
    headline="They part from standalone[{one|if} from step {parting}; drift class{classes|?:es} {classes}]"
             "[: {each|and}].",
    template="The earliest parts from standalone at step {lead} (job {job}[; by float rounding, beyond it from step "
             "{beyond}][; beyond float rounding after update {earlier}, its losses differing from step {losses}]"
             "[; first outside "
             "tolerance at step {fail}]), {cls}[, every {period} steps] ({gloss})[; the job fails on what its losses "
             "do not show: {fails_on}][; mp_policy.param_dtype={precision} "
             "against a float32 standalone copy: the precision alone parts the copies at step 0, so this compares "
             "dtypes, not engines; baseline.precision=policy runs the standalone copy under the same policy]"
             "[, {onset}][, over after update {until} (a fault on a few steps only: what differs later is its "
             "aftermath)][; first differing module: {module}][; first differing tensor[{again|if} (from another "
             "launch of this nondeterministic job)]: {tensor}][; {same} of {of} such jobs are {cls}]"
             "[; of the other culprits weighed alike, {others}].",
    rests_on="the earliest of the deciding jobs by its first step beyond its rounding envelope; its class, onset, "
             "first module and first tensor are that same job's",
    not_claimed="that every deciding job parts there: the share says how many share its class",
    check=check,
    example={"step": 0, "lead": 0, "losses": None, "job": 13, "beyond": 1, "earlier": None, "fail": 33,
             "cls": "first_update",
             "period": None, "gloss": "the first update differs: gradient reduction, scaling, accumulation, the "
             "optimizer, or their precision (reduce_dtype)", "precision": None, "onset": "an abrupt onset",
             "until": 1, "module": None, "again": False,
             "tensor": "layer0.bias weight at step 0, abs 2.23e-05, rel 0.3 (every rank)", "same": 2, "of": 2,
             "parting": 1, "classes": ["first_update"], "one": True, "each": None, "others": None,
             "fails_on": None},
)
