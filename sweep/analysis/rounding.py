"""A job's rounding floor: how far its two copies' losses can part by float rounding alone.

Two copies that compute the same loss from the same weights and data in another order
(sharded data: a mean of the ranks' means against one mean; another kernel's blocking; a
reduction over the ranks) differ by rounding, never by more than about the dtype's unit
roundoff times the depth of the sums. Below that size a difference carries no cause; above
it, even a small one (a per-rank token mean, relative 1e-4) is a fault's. The floor of a job
is the larger of two figures, both relative to the standalone loss at step 0, where the
weights are still equal, so the loss difference there is the forward's and the loss's
rounding only:

- **analytic** (:func:`analytic_floor`): ``2 u ceil(log2(n w))``, ``u`` the unit roundoff
  of the dtype (``2^-24`` float32, ``2^-8`` bfloat16, ``2^-11`` float16), ``n`` the terms the
  loss sums (rows x output elements of the standalone copy's step), ``w`` the ranks whose
  losses the distributed copy averages; pairwise summation's bound (Higham, *Accuracy and
  Stability of Numerical Algorithms*, 2nd ed., 2002, section 4.2: ``|error| <= u ceil(log2
  n) sum |x_i|`` to first order, which for a loss of non-negative terms is the loss itself),
  once for each copy. torch's and MindSpore's CPU reductions sum pairwise (cascade) blocks.
- **measured** (:func:`measured_floor`): ``MEASURED_MARGIN`` x the smallest step-0 relative
  difference among the passing jobs of the same sweep that share the job's data split,
  world size, mesh, precision (``mp_policy`` dtypes, ``baseline.precision``), framework and
  model: the same reorderings on the same data, measured. The smallest, because a passing
  job may carry a fault below tolerance; the margin, because one step's rounding is one draw;
  never more than ``MEASURED_CAP`` x the analytic figure, because every peer may share the
  job's fault (a fault on every dp4 job of a sweep whose only dp4 peers are faulty too).

The dtype is the lowest precision either copy computes in (:func:`compute_dtypes`): a bf16
job's differences within bf16's rounding carry no sign or size worth a contrast, even
against a float32 standalone copy. Its step 0 is still judged against the float32 floor
(``step0_rel``): a lower precision than the standalone copy's parts the copies at step 0 by
itself, which is the precision's effect (``step0``), not rounding to be discounted.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from sweep.analysis.trace import ROUNDING_REL
from sweep.io import read_floats

Row = Dict[str, Any]

# unit roundoff u = 2^-p, p the significand's bits (IEEE 754 binary32: 24; bfloat16: 8; binary16: 11)
UNIT_ROUNDOFF = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
ALIASES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "half": "float16", "float": "float32",
           "double": "float64", "fp64": "float64"}
MEASURED_MARGIN = 4.0
# The measured floor is capped at this many times the analytic one. The analytic figure is a
# worst-case bound (Higham's), and the correct jobs measured here sit below it (fp32 sharded
# MLP jobs: step-0 gaps of about 5e-8 against a bound of about 1e-6), so a measured floor far
# above it comes from peers that share a fault, not from rounding.
MEASURED_CAP = 8.0
# the keys peers share: the same data split, world, mesh, precision, framework and model
PEER_KEYS = (("data", "split"), ("world_size",), ("mesh", "mesh_shape"), ("mp_policy", "param_dtype"),
             ("mp_policy", "reduce_dtype"), ("mp_policy", "output_dtype"), ("baseline", "precision"),
             ("framework", "name"), ("model", "name"), ("model", "init_dtype"), ("train", "batch_size"))

# update errors grow by rounding as the optimizer takes them: Adam normalises a rounding-size
# gradient error to a full-size step, SGD scales it by the lr (a bf16 MLP: 0.075 against 0.011)
UPDATE_PEER_KEYS = PEER_KEYS + (("optimizer", "name"),)


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


def compute_dtypes(config: Dict[str, Any]) -> Tuple[str, str]:
    """``(standalone, distributed)``: the dtype each copy's forward computes in, from a
    job's resolved config: the distributed copy's ``mp_policy.param_dtype`` (else
    ``model.init_dtype``); the standalone copy's ``model.init_dtype``, or the policy's too
    with ``baseline.precision=policy``."""
    init = dtype_name(_get(config, ("model", "init_dtype")))
    param = _get(config, ("mp_policy", "param_dtype"))
    distributed = dtype_name(param) if param is not None else init
    policy = str(_get(config, ("baseline", "precision")) or "float32") == "policy"
    return (distributed if policy else init), distributed


def loss_terms(config: Dict[str, Any], world: int) -> int:
    """How many terms the standalone copy's loss of one step sums: rows (``train.batch_size``,
    times ``world`` with ``data.split=sharded``) x output elements per row (``model.out_size``,
    or ``model.args.seq_len`` for a token model); at least 1."""
    rows = int(_get(config, ("train", "batch_size")) or 1)
    if _get(config, ("data", "split")) == "sharded":
        rows *= max(int(world or 1), 1)
    seq = _get(config, ("model", "args", "seq_len"))
    per_row = int(seq) if seq else int(_get(config, ("model", "out_size")) or 1)
    return max(rows * per_row, 1)


def analytic_floor(dtype: str, terms: int, world: int = 1) -> float:
    """``2 u ceil(log2(terms x world))`` (module docstring): the relative loss difference two
    pairwise sums of ``terms`` non-negative terms in ``dtype``, averaged over ``world`` ranks,
    can part by, each rounding to its bound; ``2 u`` for a single term."""
    depth = max(math.ceil(math.log2(max(terms, 1) * max(world, 1))), 1)
    return 2.0 * UNIT_ROUNDOFF[dtype_name(dtype)] * depth


def step0_rel(record: Any) -> Optional[float]:
    """``|distributed - standalone| / |standalone|`` of a job record's losses at step 0, or
    ``None`` without both (or with a zero or non-finite standalone loss)."""
    losses = getattr(record, "losses", None) or {}
    if not losses.get("standalone") or not losses.get("distributed"):
        return None
    ref, got = read_floats(losses["standalone"]), read_floats(losses["distributed"])
    if not len(ref) or not len(got) or not math.isfinite(ref[0]) or not math.isfinite(got[0]) or ref[0] == 0:
        return None
    return abs(got[0] - ref[0]) / abs(ref[0])


def peer_key(config: Dict[str, Any], keys: Sequence[Sequence[str]] = PEER_KEYS) -> Tuple[str, ...]:
    """What a job shares with the jobs whose rounding measures its own (:data:`PEER_KEYS`;
    :data:`UPDATE_PEER_KEYS` for its update errors)."""
    return tuple(str(_get(config, path)) for path in keys)


def _smallest_over_peers(row: Row, rows: Iterable[Row], keys: Sequence[Sequence[str]],
                         measure: Any) -> Tuple[Optional[float], List[int]]:
    """``(MEASURED_MARGIN x the smallest measure(peer row), [the peers' job numbers])`` over
    the passing peers of ``row`` (same :func:`peer_key` over ``keys``, another job, status
    ``ok``) whose measure is not ``None``; ``(None, [])`` without any."""
    key = peer_key(getattr(row.get("result"), "config", None) or {}, keys)
    found = []
    for other in rows:
        result = other.get("result")
        if other is row or other.get("status") != "ok" or result is None or \
                peer_key(result.config or {}, keys) != key:
            continue
        rel = measure(other)
        if rel is not None:
            found.append((rel, other["job"]))
    if not found:
        return None, []
    return MEASURED_MARGIN * min(rel for rel, _ in found), sorted(job for _, job in found)


def measured_floor(row: Row, rows: Iterable[Row]) -> Tuple[Optional[float], List[int]]:
    """``(MEASURED_MARGIN x the smallest step-0 relative difference, [the peers' job
    numbers])`` over the passing peers of ``row`` (same :func:`peer_key`, another job,
    status ``ok``); ``(None, [])`` without any."""
    return _smallest_over_peers(row, rows, PEER_KEYS, lambda other: step0_rel(other["result"]))


def update_rel(record: Any) -> Optional[float]:
    """The largest relative update error of a traced job (``max_t rel_t`` of
    ``JobRecord.first_tensor["updates"]``, ``sweep.analysis.trace.update_series``: the
    distributed copy's update minus the standalone one's, over ``|u_t|``), or ``None``
    where its updates were not traced."""
    updates = (getattr(record, "first_tensor", None) or {}).get("updates") or {}
    rel = [float(r) for r in updates.get("rel") or [] if r is not None and math.isfinite(float(r))]
    return max(rel) if rel else None


def measured_update_floor(row: Row, rows: Iterable[Row]) -> Tuple[Optional[float], List[int]]:
    """``(MEASURED_MARGIN x the smallest largest-update-error (:func:`update_rel`) of the
    passing traced peers of ``row`` (:data:`UPDATE_PEER_KEYS`: the optimizer too; a peer equal
    to standalone at every step counts 0: rounding grew nothing there), [their job numbers])``;
    ``(None, [])`` without any.
    How far the same reorderings grow an update error over the same steps: a passing job's
    update errors of random sign are rounding grown only within it (a correct bf16 job's
    reach about 0.06 on the default MLP; a warmup 1.3x too large in one copy, 0.3)."""
    def measure(other: Row) -> Optional[float]:
        rel = update_rel(other["result"])
        return 0.0 if rel is None and other.get("max_abs_diff") == 0.0 else rel  # equal: it grew nothing

    return _smallest_over_peers(row, rows, UPDATE_PEER_KEYS, measure)


def rounding_floor(row: Row, rows: Sequence[Row] = ()) -> Optional[Dict[str, Any]]:
    """The rounding floor of a report row (``sweep.report.summary.collect``) with a record:
    ``{"rel", "step0_rel", "dtype", "terms", "analytic", "measured", "peers", "from",
    "update_rel", "update_peers"}``.
    ``rel``: the larger of the analytic floor in the lowest dtype either copy computes in and
    the measured one (module docstring); ``step0_rel``: the same in the standalone copy's
    dtype (a precision below it is a step-0 cause, not rounding); ``from``: one phrase that
    says which figure set it and how; ``update_rel``: how large a passing job's update errors
    of random sign may grow and still be rounding (:func:`measured_update_floor`, never
    below :func:`tensor_floor`'s figure nor above ``MEASURED_CAP`` times it: the only peer
    may carry a fault of its own), ``None`` without passing peers traced or equal, and
    ``update_peers`` the jobs that measured it. ``None`` without a record or a config."""
    result = row.get("result")
    config = getattr(result, "config", None)
    if not config:
        return None
    world = int(getattr(result, "world_size", None) or 1)
    standalone, distributed = compute_dtypes(config)
    low = max((standalone, distributed), key=lambda d: UNIT_ROUNDOFF[d])
    terms = loss_terms(config, world)
    ranks = world if _get(config, ("data", "split")) == "sharded" else 1
    analytic = analytic_floor(low, terms, ranks)
    analytic_step0 = analytic_floor(standalone, terms, ranks)
    measured, peers = measured_floor(row, rows)
    # the measured figure raises the floor up to MEASURED_CAP x the analytic bound, no further:
    # passing peers that carry the job's own fault (a mesh every peer shares) would lift it
    # to the fault's size and call the fault rounding
    rel = max(analytic, min(measured or 0.0, MEASURED_CAP * analytic))
    step0 = max(analytic_step0, min(measured or 0.0, MEASURED_CAP * analytic_step0))
    how = (f"analytic: 2 x {low} unit roundoff {UNIT_ROUNDOFF[low]:.3g} x log2 of {terms * ranks} terms summed "
           "pairwise (Higham 2002, 4.2)")
    if measured is not None:
        text = (f"{MEASURED_MARGIN:g}x the smallest step-0 difference of the passing jobs {_jobs(peers)} (same split, "
                "mesh and precision)")
        how = f"measured: {text}" if measured >= analytic else f"{how}; measured {measured:.2g}: {text}"
    grown, grown_peers = measured_update_floor(row, rows)
    if grown is not None:  # capped as the loss floor is: peers may share a fault (or carry another)
        base = max(ROUNDING_REL, rel)
        grown = max(base, min(grown, MEASURED_CAP * base))
    return {"rel": rel, "step0_rel": step0, "dtype": low, "terms": terms * ranks, "analytic": analytic,
            "measured": measured, "peers": peers, "from": how, "update_rel": grown, "update_peers": grown_peers}


def _jobs(nums: Sequence[int]) -> str:
    return ", ".join(str(n) for n in nums[:5]) + (f" (+{len(nums) - 5})" if len(nums) > 5 else "")


def tensor_floor(row: Row) -> float:
    """The relative size below which a traced tensor's difference (gradient, weight, update:
    ``sweep.analysis.trace.first_difference``'s ``rel_diff``) is rounding for this row: the
    fixed ``ROUNDING_REL`` (1e-4, float32's), or the row's loss floor ``rel`` where that is
    larger (a lower precision's rounding: bf16's is about 0.1 on the default MLP)."""
    floor = row.get("rounding_floor")
    return max(ROUNDING_REL, float(floor["rel"])) if isinstance(floor, dict) else ROUNDING_REL


def losses_within_floor(row: Row) -> bool:
    """Whether ``row``'s losses differ from standalone by no more than its rounding floor at
    any step (``max_rel_diff <= rounding_floor.rel``), passing or not, whatever its traced
    tensors say: then the size and the sign of its loss difference are rounding's, and no
    contrast of sizes or signs may rest on them (issue 41), even where a tensor shows a real
    fault that the losses do not carry (a gradient scale that Adam normalises away).
    ``False`` without a floor or a comparison."""
    floor = row.get("rounding_floor")
    rel = row.get("max_rel_diff")
    return isinstance(floor, dict) and rel is not None and float(rel) <= float(floor["rel"])


POLICY_NOT_APPLIED = "was not applied"  # sweep.analysis.dtypes.override_notes' words


def policy_departed(row: Row) -> bool:
    """Whether the job ran another precision than its config asks (``policy_applied`` is
    ``False``, or a per-module policy ``was not applied``: ``sweep.analysis.dtypes``): then
    its difference, however small, has that cause and is never rounding (an RMSNorm left in
    bf16 under ``baseline.precision=policy`` parts within bf16's wide floor)."""
    notes = getattr(row.get("result"), "notes", None) or []
    return row.get("policy_applied") is False or any(POLICY_NOT_APPLIED in str(n) for n in notes)


def within_floor(row: Row) -> bool:
    """Whether a passing row differs by rounding only: its losses stay within its rounding
    floor at every step (``max_rel_diff <= rounding_floor.rel``) and its first traced tensor
    difference beyond rounding, if any (``first_tensor_rel``), within :func:`tensor_floor`.
    Then no contrast rests on it. A fault that leaves the losses within the floor but moves
    a tensor far beyond its dtype's rounding (a gradient scaled by 2 under Adam, which
    normalises the scale away) is not within it, nor is one whose update errors grow beyond
    its passing peers' (``rounding_floor["update_rel"]``: a warmup too large in one copy,
    under bf16's wide floor), nor one that ran another precision than configured
    (:func:`policy_departed`). ``False`` for a failing job, or one without a floor."""
    floor = row.get("rounding_floor")
    rel = row.get("max_rel_diff")
    if not (row.get("status") == "ok" and isinstance(floor, dict) and rel is not None
            and float(rel) <= float(floor["rel"])) or policy_departed(row):
        return False
    tensor = row.get("first_tensor_rel")
    if tensor is not None and float(tensor) > tensor_floor(row):
        return False
    # update errors beyond what the same reorderings grow them to in the passing peers: a fault's
    grown, largest = floor.get("update_rel"), update_rel(row.get("result"))
    return grown is None or largest is None or largest <= float(grown)
