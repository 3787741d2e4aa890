"""J103 first module and J104 first tensor: where one job's copies first differ inside the
model, from its tracing rerun (a drift beyond rounding only), and the first tensor of a job that
fails though its losses never part (a buffer that ended apart: the one line of why). Each
finding carries the place's sentence (``text``: ``sweep.findings.places``, as the report's
columns give it) and its data (``place``: the record's, without the per-step series), for tools
reading ``summary.json``."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from sweep.analysis.evidence import drift_class
from sweep.findings.base import Context, Finding, Kind


def _data(row: Dict[str, Any], name: str) -> Optional[Dict[str, Any]]:
    """The record's place ``name`` as data: without its sentence and the update series."""
    found = getattr(row.get("result"), name, None)
    return {k: v for k, v in found.items() if k not in ("description", "updates")} if found else None


def _module(ctx: Context) -> List[Finding]:
    row = ctx.rows[0]
    if not row.get("first_module") or drift_class(row) in (None, "rounding"):
        return []
    return [MODULE.make(jobs=[row["job"]], evidence=("first_module",), text=row["first_module"],
                        place=_data(row, "first_module"))]


def _tensor(ctx: Context) -> List[Finding]:
    row = ctx.rows[0]
    # a job whose losses never part fails on what its first tensor names (a buffer after the last
    # step, sweep.analysis.trace.final_buffers): the one line that says why
    place = _data(row, "first_tensor") or {}
    ended = drift_class(row) is None and row.get("status") == "fail" and bool(place) and "note" not in place
    if not row.get("first_tensor") or (drift_class(row) in (None, "rounding") and not ended):
        return []
    return [TENSOR.make(jobs=[row["job"]], evidence=("first_tensor",), text=row["first_tensor"],
                        place=_data(row, "first_tensor"))]


MODULE = Kind(
    code="J103", name="first module", tier="proof",
    template="first differing module: {text}",
    rests_on="the tracing rerun's module hooks: the first module whose inputs agree within their rounding envelope "
             "and whose output (or output gradient) leaves its own",
    not_claimed="that the module's own code is wrong: its weights as gathered, its casts or a hook may be",
    check=_module,
    example={"text": "layer0 forward output at step 0, inputs agree, rel 0.13 (7.27e+05x its rounding envelope) "
                     "(every rank)"},
)
TENSOR = Kind(
    code="J104", name="first tensor", tier="proof",
    template="first differing tensor: {text}",
    rests_on="the tracing rerun's gradients (as reduced), weights and buffers, step by step, against the standalone "
             "copy's and its twin's",
    not_claimed="the tensor's cause: the kind (initial weights, gradient, weight, buffer) points at where to look",
    check=_tensor,
    example={"text": "layer0.bias initial weights (before any step), abs 0.00159, rel inf (every rank)"},
)
