"""Whether a job's difference is float rounding: read from its measured rounding envelope only.

Every rounding decision of the verdict reads the job's envelope (``JobRecord.envelope``,
``sweep.analysis.envelope``: the gap between the standalone copy and its twin, nudged by one
unit in the last place, step by step), the traced tensors' and modules' envelopes (the same
twin, traced: ``sweep.analysis.trace.envelope_bounds``, ``sweep.analysis.modules``) and
nothing else: no constant decides what rounding is. A job whose envelope was not measured
(``compare.envelope=false``, a ``runner=command`` job) is never called rounding.

This module holds the config-level facts the twin needs (:func:`twin_dtype`: the lowest
precision either copy computes in) and the row-level predicates the report and the verdict's rules
share (:func:`measured`, :func:`losses_within`, :func:`policy_departed`, :func:`drift_sign`); whether a
failing job fails its tolerance only is ``sweep.analysis.evidence.tolerance_only``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from sweep.records import code_of

Row = Dict[str, Any]

# unit roundoff u = 2^-p, p the significand's bits (IEEE 754 binary32: 24; bfloat16: 8; binary16: 11)
UNIT_ROUNDOFF = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
ALIASES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "half": "float16", "float": "float32",
           "double": "float64", "fp64": "float64"}


def dtype_name(value: Any) -> str:
    """A dtype as config or a framework spells it (``bf16``, ``torch.bfloat16``,
    ``mindspore.float16``, ``None``) -> a key of :data:`UNIT_ROUNDOFF`; ``None`` and unknown
    names are ``float32`` (the default compute dtype)."""
    name = str(value).split(".")[-1].lower() if value is not None else "float32"
    name = ALIASES.get(name, name)
    return name if name in UNIT_ROUNDOFF else "float32"


def _get(config: Dict[str, Any], path: Sequence[str]) -> Any:
    node: Any = config
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def twin_dtype(config: Dict[str, Any]) -> str:
    """The lowest precision in which the two copies compute otherwise, from a job's resolved
    config (the widest unit roundoff of :data:`UNIT_ROUNDOFF`). The standalone copy's twin is
    nudged by one unit in its last place (``sweep.train.twin``).

    Against a float32 standalone copy (``baseline.precision=float32``, the default): of
    ``model.init_dtype`` and the policy's ``param_dtype``, ``reduce_dtype`` and
    ``output_dtype``, its per-module overrides' too: a bf16 job's rounding is bf16's.

    Against a standalone copy under the same policy (``baseline.precision=policy``) on
    replicated data (``data.split=replicated``): both copies cast, compute and store alike, on
    the same rows, so they part only where the distributed copy reduces its gradients across
    ranks: in each section's reduce dtype (``reduce_dtype``, else ``param_dtype`` as
    ``fully_shard`` does, else ``model.init_dtype``). A bf16 policy that reduces in float32
    gives a float32 nudge there: the step-0 forward, which a correct job computes bit for bit
    alike, is not given a bf16 unit of room. On sharded data each rank computes its rows'
    gradients (and a BatchNorm its statistics) in ``param_dtype``, the standalone copy all
    rows': they part in ``param_dtype`` too, and the first rule holds."""
    policy = config.get("mp_policy") or {}
    init = dtype_name(_get(config, ("model", "init_dtype")))
    sections = [sec for sec in [policy, *((policy.get("overrides") or {}).values())] if isinstance(sec, dict)]
    if str(_get(config, ("baseline", "precision"))) == "policy" and \
            str(_get(config, ("data", "split")) or "replicated") == "replicated":
        found = [dtype_name(sec.get("reduce_dtype") or sec.get("param_dtype") or init) for sec in sections] or [init]
        return max(found, key=lambda d: UNIT_ROUNDOFF[d])
    found = [init]
    for section in sections:
        for key in ("param_dtype", "reduce_dtype", "output_dtype"):
            if section.get(key) is not None:
                found.append(dtype_name(section[key]))
    return max(found, key=lambda d: UNIT_ROUNDOFF[d])


def policy_lowers(config: Dict[str, Any]) -> bool:
    """Whether the job's ``mp_policy`` sets a dtype (``param_dtype``, ``reduce_dtype``,
    ``output_dtype``, or one of a per-module override): then the standalone copy's twin
    computes under that policy on one rank where the framework has a reference for it
    (torch: FSDP2's own mixed precision on a one-rank mesh, ``sweep.train.torch_rank.build_twin``),
    so the envelope holds the lower precision's rounding of every operation, not only of the
    weights; and the twin's cache key holds the policy (``sweep.run.baseline.twin_fields``)."""
    policy = config.get("mp_policy") or {}
    sections = [policy, *((policy.get("overrides") or {}).values())]
    return any(isinstance(sec, dict) and sec.get(key) is not None
               for sec in sections for key in ("param_dtype", "reduce_dtype", "output_dtype"))


def envelope(row: Row) -> Dict[str, Any]:
    """The job's envelope record (``JobRecord.envelope``) of a report row
    (``sweep.report.summary.collect``), ``{}`` without one."""
    return getattr(row.get("result"), "envelope", None) or {}


def measured(row: Row) -> bool:
    """Whether the row's rounding envelope was measured (a twin trained, or taken from the
    cache or a golden file): only then may any sentence call its difference rounding."""
    return bool(envelope(row).get("measured"))


def losses_within(row: Row) -> bool:
    """Whether the row's losses stay within ``margin`` x their envelope at every step
    (``JobRecord.envelope["loss"]["within"]``), passing or not; ``False`` where not measured.
    Then their size and sign are rounding's: no contrast of sizes or signs rests on them."""
    found = envelope(row)
    return bool(found.get("measured") and (found.get("loss") or {}).get("within"))


def resolution(row: Row) -> Optional[float]:
    """The smallest loss difference the row's precision can show: its envelope's ``band``
    (``sweep.analysis.envelope.judge_losses``: ``margin`` x the envelope over ``1 + |standalone|``,
    the ``rtol = atol`` that this precision holds); ``None`` where not measured."""
    found = envelope(row)
    band = (found.get("loss") or {}).get("band") if found.get("measured") else None
    return float(band) if band is not None else None


def departure(row: Row) -> Optional[float]:
    """At most how far the row's losses part from standalone beyond their rounding, in
    :func:`resolution`'s units (``|d| / (1 + |standalone|)`` at the worst step): its
    ``tolerance_ratio`` (``|d| / (atol + rtol |standalone|)``) times the larger of ``rtol`` and
    ``atol``, else its ``max_abs_diff`` (an upper bound either way); ``None`` without either, or
    where the losses stay within their envelope (a job that fails on something else, replicas
    that disagree: its loss difference is no measure of its fault)."""
    found = envelope(row)
    if not found.get("measured") or (found.get("loss") or {}).get("within", True):
        return None
    ratio = row.get("tolerance_ratio")
    tol = getattr(row.get("result"), "comparison", None) or {}
    if ratio is not None and tol.get("rtol") is not None and tol.get("atol") is not None:
        return float(ratio) * max(float(tol["rtol"]), float(tol["atol"]))
    size = row.get("max_abs_diff")
    return float(size) if size is not None else None


POLICY_NOT_APPLIED = "was not applied"  # an older record's words for sweep.analysis.dtypes.override_notes' note
OVERRIDE_NOT_APPLIED = "N161"  # that note's code (sweep.findings.notes_catalog.dtypes)
# the notes that say a precision ran otherwise than the config asks (sweep.findings.notes_catalog): a collective in
# another dtype (N101), a dtype the policy does not give (N160), an override not applied (N161), a module computing in
# a dtype no policy field gives (N162), gradients read in another dtype than the master weights (N163)
DEPARTED = frozenset({"N101", "N160", OVERRIDE_NOT_APPLIED, "N162", "N163"})


def policy_departed(row: Row) -> bool:
    """Whether the job ran another precision than its config asks (``policy_applied`` is
    ``False``, or a note of :data:`DEPARTED`: a collective, a module, a per-module policy or
    the optimizer's gradients in another dtype, ``sweep.analysis.dtypes`` and
    ``sweep.analysis.collectives``): then its difference, however small, has that cause and is
    never rounding (its twin measured the rounding of what ran, not of what was asked)."""
    notes = getattr(row.get("result"), "notes", None) or []
    return row.get("policy_applied") is False or any(code_of(n) in DEPARTED or POLICY_NOT_APPLIED in str(n)
                                                     for n in notes)


def hold(rows: Sequence[Row]) -> Optional[float]:
    """The tolerance this precision holds over ``rows`` (``rtol = atol``: the largest
    ``envelope["loss"]["band"]``, ``sweep.analysis.envelope.judge_losses``), ``None`` without
    a measured envelope."""
    bands = [float((envelope(r).get("loss") or {}).get("band") or 0.0) for r in rows if measured(r)]
    bands = [b for b in bands if b > 0]
    return max(bands) if bands else None


def drift_sign(row: Row) -> Optional[str]:
    """Which way a row's distributed copy drifts: ``"low"``, ``"high"`` or ``None`` (no sign).
    Where its envelope was measured, only from the steps beyond it, and only where one sign
    holds on most of them (``envelope["loss"]["sign"]``, ``sweep.analysis.envelope.judge_losses``:
    a job within its envelope has no sign worth saying); where not measured, from every
    differing step alike (``runs_low_pct`` at least ``SIGN_SHARE`` or at most its complement)."""
    from sweep.analysis.envelope import SIGN_SHARE

    if measured(row):
        return (envelope(row).get("loss") or {}).get("sign")
    low = row.get("runs_low_pct")
    if low is None or low != low:
        return None
    return "low" if low >= 100 * SIGN_SHARE else "high" if low <= 100 * (1 - SIGN_SHARE) else None
