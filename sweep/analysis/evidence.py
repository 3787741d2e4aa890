"""What one job's evidence means: where its copies part, how, what differs first, and its class.

The one place that turns a job's evidence into a finding; pure rules, no I/O, over its
record (``sweep.records.JobRecord``) and its tracing rerun's ranks' findings
(``sweep.records.RankResult.first_tensor`` and ``modules``):

- *the first step*: the earliest step any rank's losses differ (:func:`first_diff_over_ranks`),
  and the *real* first step, the first loss step a difference beyond float rounding can reach,
  with the onset taken from the update differences when traced (:func:`real_onset`);
- *the place*: the first differing tensor over the rerun's ranks, a real difference before one
  that is rounding only (:func:`first_tensor_over_ranks`, :func:`first_tensor_order`), the first
  differing module over them (:func:`first_module_over_ranks`), and the two merged into one
  finding (:func:`place`: a module that computes on weights that already differ says so);
- *the class* of the drift by its first real difference (:func:`drift_class`, :data:`DRIFT_RULE`).

:func:`job_evidence` gives all of it for one record, as the report's columns
(``sweep.report.summary``); the job (``sweep.run.job``) records what the rerun's ranks give
through the place functions.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from sweep.analysis.compare import onset
from sweep.analysis.modules import first_over_ranks
from sweep.analysis.rounding import envelope, policy_departed, resolution
from sweep.analysis.trace import KINDS
from sweep.io import read_floats
from sweep.records import JUDGED, JobRecord

Row = Dict[str, Any]

# --- the first step -----------------------------------------------------------------------------

def first_diff_over_ranks(comparisons: Iterable[Optional[Dict[str, Any]]]) -> Optional[int]:
    """The earliest ``first_diff_step`` of ``comparisons`` (comparison dicts:
    ``JobRecord.comparison``, the entries of ``JobRecord.rank_comparisons``; ``None`` entries
    and ones without a difference are skipped): the step any rank's losses first differ at
    all; ``None`` where none differs."""
    return min((c["first_diff_step"] for c in comparisons if c and c.get("first_diff_step") is not None),
               default=None)


def real_onset(first_diff: Optional[int], tensor: Dict[str, Any], envelope: Optional[Dict[str, Any]],
               module: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``first_real_step`` (the first loss step a difference beyond float rounding reaches)
    and the onset from the update differences when traced (``onset_from``: ``"updates"`` or
    ``"losses"``; ``sweep.analysis.trace.UPDATE_ONSET_RULE``).

    Args:
        first_diff: the first step the job's losses differ at all (any rank:
            :func:`first_diff_over_ranks`), ``None`` if they never do.
        tensor: the job's first differing tensor (``JobRecord.first_tensor``; ``{}`` if
            none): its ``step``, ``kind``, ``beyond_rounding``, ``envelope`` and ``updates``
            (``sweep.analysis.trace.locate``) are read.
        envelope: the job's rounding envelope (``JobRecord.envelope``,
            ``sweep.analysis.envelope.measure``), ``None`` or ``{"measured": False}`` where
            not measured.
        module: the job's first differing module (``JobRecord.first_module``): one that
            differs beyond its own envelope (``sweep.analysis.modules``) at step ``s``, in a
            forward (output or input) as loss step ``s``, in a backward as ``s + 1``.

    Returns:
        ``{"first_real_step": step or None, "onset_from": "losses" | "updates" | None}``,
        with ``onset``, ``period`` and ``onset_until`` when the update differences give the
        onset.

    Every real difference counts as the loss step that first sees it: the losses' first step
    beyond their envelope (``envelope["loss"]["first_beyond_step"]``); a traced tensor beyond
    its own envelope (the first differing one, or its ``beyond_rounding``): initial weights or
    buffers that differ as step 0 (the copies must start equal), a gradient, weight or buffer
    of step ``s`` as step ``s + 1``; an update beyond its envelope (``updates["real_step"]``)
    as its step + 1. Where nothing was measured (no twin: no envelope for the losses, and
    tensors traced without one) every difference is real: the first differing step. ``None``
    when every measured difference stays within its envelope: float rounding.
    """
    out: Dict[str, Any] = {"first_real_step": first_diff, "onset_from": "losses" if first_diff is not None else None}
    if first_diff is None:
        return out
    measured = bool(envelope and envelope.get("measured"))
    reals: List[int] = []
    if measured:
        beyond = (envelope.get("loss") or {}).get("first_beyond_step")  # type: ignore[union-attr]
        if beyond is not None:
            reals.append(int(beyond))
    else:
        reals.append(first_diff)
    if "step" in tensor:
        real = tensor.get("beyond_rounding") if "beyond_rounding" in tensor else tensor
        if real:
            reals.append(0 if real.get("kind") in ("initial", "initial_buffer") else int(real["step"]) + 1)
    updates = tensor.get("updates")
    if updates and updates.get("real_step") is not None:
        reals.append(int(updates["real_step"]) + 1)
    if module and module.get("step") is not None:  # a forward beyond rounding moves that step's loss
        reals.append(int(module["step"]) + (1 if module.get("phase") == "backward" else 0))
    out["first_real_step"] = min(reals, default=None)
    if updates and updates.get("pattern") not in (None, "none") and out["first_real_step"] not in (0, None):
        out.update(onset=updates["pattern"], period=updates.get("period"), onset_from="updates",
                   onset_until=updates.get("until"))
    return out


# --- the place: the first differing tensor and module -------------------------------------------

def first_tensor_order(found: Dict[str, Any]) -> tuple:
    """The sort key of one rank's first differing tensor (``found``: ``RankResult.first_tensor``
    with ``step``, ``kind`` and its ``rank``) among the ranks': a real one (beyond its rounding
    envelope, or its ``beyond_rounding``) before one within it, so a fault on some
    ranks is not hidden behind another rank's summation-order rounding (sharded data on an
    HSDP mesh); then the earliest real step, kind (``sweep.analysis.trace.KINDS``' order) and
    rank, then the earliest step, kind, rank. Its first three entries (real or not, the
    real step, its kind) say which ranks name the same difference.

    Raises:
        KeyError: ``found`` has no ``step``, ``kind`` or ``rank``; ValueError: an unknown kind.
    """
    beyond = found.get("beyond_rounding")
    real = found if "beyond_rounding" not in found else beyond
    own = (found["step"], KINDS.index(found["kind"]), found["rank"])
    if real is None:
        return (1, 0, 0) + own
    return (0, real["step"], KINDS.index(real["kind"])) + own


def first_tensor_over_ranks(found: Sequence[Tuple[Dict[str, Any], int]],
                            first_diff: Optional[int]) -> Optional[Dict[str, Any]]:
    """The job's first differing tensor from its tracing rerun's ranks.

    Args:
        found: ``[(RankResult.first_tensor, rank)]`` of the ranks that gave one, in rank order.
        first_diff: the step the job's own losses first differ (:func:`first_diff_over_ranks`).

    Returns:
        Where some rank locates a difference (its finding has a ``step``): the first by
        :func:`first_tensor_order`, with its ``rank`` and ``ranks`` (every rank naming the
        same difference: real or not, step, kind). Where none does: the first rank's finding
        with its ``rank`` and ``not_repeated_from`` (``first_diff``: the rerun did not repeat
        the difference the job's losses show from there; not for a ``note``). ``None`` when
        ``found`` is empty.
    """
    hits = [dict(t, rank=rank) for t, rank in found if "step" in t]
    if hits:
        first = min(hits, key=first_tensor_order)
        where = first_tensor_order(first)[:3]  # (real or not, its step, its kind)
        first["ranks"] = [t["rank"] for t in hits if first_tensor_order(t)[:3] == where]
        return first
    if not found:
        return None
    first = dict(found[0][0], rank=found[0][1])
    if "note" not in first:  # the losses differed, the rerun's tensors do not
        first["not_repeated_from"] = first_diff
    return first


def reason_heads(reason: str) -> str:
    """A job's reason in short: each clause's head, before its first colon, once
    (``replicas disagree from step 0: rank 0 ... ; the copies end apart: rank 1 ...`` ->
    ``replicas disagree from step 0; the copies end apart``)."""
    return "; ".join(dict.fromkeys(part.split(":")[0].strip() for part in reason.split("; ") if part.strip()))


def unseen_failure(row: Row) -> Optional[str]:
    """What a failing job whose losses stay within tolerance fails on (its reason in short,
    :func:`reason_heads`: replicas that disagree, buffers that end apart), else ``None``."""
    if row.get("status") != "fail" or row.get("first_fail_step") is not None or not row.get("reason"):
        return None
    return reason_heads(row["reason"])


def first_module_over_ranks(modules: Sequence[Tuple[Dict[str, Any], int]]) -> Optional[Dict[str, Any]]:
    """The job's first differing module from its tracing rerun's ranks (``modules``:
    ``[(RankResult.modules, rank)]`` of the ranks that recorded a module trace, in rank
    order): :func:`sweep.analysis.modules.first_over_ranks` of their ``first``, or, where no
    rank names one, the first rank's ``traced_steps`` and ``envelope_measured`` (every module
    agrees in the traced steps; none traced: ``0``); ``None`` when no rank recorded a module
    trace. ``uncompared``: the ranks whose trace holds that module at that step in one copy only
    (a hook that did not run in the other), which neither name it nor clear it."""
    if not modules:
        return None
    none = modules[0][0]
    first = first_over_ranks([(m.get("first"), rank) for m, rank in modules])
    if first is None:
        return {"traced_steps": none.get("traced_steps") or 0, "envelope_measured": none.get("envelope_measured", True)}
    where = (first["step"], first["phase"], first["module"])
    blind = [rank for m, rank in modules if any((row.get("step"), row.get("phase"), row.get("module")) == where
                                                and row.get("abs") is None for row in m.get("rows") or [])]
    return dict(first, uncompared=blind) if blind else first


def place(module: Optional[Dict[str, Any]], tensor: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The first differing module merged with the first differing tensor: where the
    module's step comes after the tensor's (a gradient or weight that differs after step
    ``N``'s update, a module of a later step whose inputs agree computes on it), a copy of
    ``module`` with ``computes_on`` (the tensor's ``kind``, ``step`` and ``name``: weights
    after step ``N``'s update, a buffer after a forward, the initial weights): the tensor has
    the cause. Where every module agrees in the traced steps and a gradient or weight leaves
    its envelope there, ``after_backward``. A tensor within its rounding envelope is no cause: its
    ``beyond_rounding`` (the first real one) is held against the module instead, and none
    places nothing. Otherwise ``module`` as it is (also ``None``, a module without a step, or
    a tensor without one)."""
    if module and module.get("step") is None and module.get("traced_steps") and tensor:
        # every module agrees in the traced steps: a gradient or weight beyond rounding there parts the copies
        # after the backward; where every traced tensor stays within rounding, the window places nothing
        real = tensor.get("beyond_rounding") if "beyond_rounding" in tensor else tensor
        if real and "step" in real and int(real["step"]) < int(module["traced_steps"]) \
                and real.get("kind") in ("grad", "weight"):
            return dict(module, after_backward=True)
        return module
    if tensor and "beyond_rounding" in tensor:  # the first difference is rounding: the first real one decides
        tensor = tensor["beyond_rounding"]
    if not module or not tensor or module.get("step") is None or "step" not in tensor \
            or module["step"] <= tensor["step"]:
        return module
    return dict(module, computes_on={"kind": tensor.get("kind"), "step": tensor["step"], "name": tensor.get("name")})


def job_evidence(record: JobRecord) -> Dict[str, Any]:
    """Where and how a job's copies part and what differs first, from its record.

    Returns, for a record with a comparison and losses: ``first_diff_step`` (the
    earliest step any rank's losses differ, exact unless ``compare.noise_floor``),
    ``onset`` (``sweep.analysis.compare.ONSETS``) and ``period`` from the losses; for every
    record: ``first_tensor_kind`` and ``first_tensor_rel`` (the relative size of the first
    real difference: of its
    ``beyond_rounding`` where the first one is within its envelope); and with losses again
    :func:`real_onset`'s ``first_real_step`` and ``onset_from`` (with ``onset``, ``period``
    and ``onset_until`` from the update differences where they give it; ``onset="noise"``
    with ``onset_from="repeats"`` where the job's repeats disagree by as much as its copies:
    :func:`_repeats_explain`). Keys in that order. Every rounding decision reads the job's
    envelope (``JobRecord.envelope``) and the tensors' (``sweep.analysis.rounding``). The
    place in words (``first_module``, ``first_tensor``) is the report's
    (``sweep.findings.places``), from the record's data.
    """
    out: Dict[str, Any] = {}
    tensor = record.first_tensor or {}
    judged = bool(record.comparison and record.losses)
    real: Dict[str, Any] = {}
    if judged:
        ref, got = read_floats(record.losses["standalone"]), read_floats(record.losses["distributed"])
        shape = onset(ref, got, float(record.comparison.get("noise_floor") or 0.0))
        # every rank judged: the earliest divergence of any rank
        first = first_diff_over_ranks([{"first_diff_step": shape["first_diff_step"]}, *(record.rank_comparisons or [])])
        out.update(first_diff_step=first, onset=shape["pattern"], period=shape["period"])
        real = real_onset(first, tensor, record.envelope, record.first_module)
    out["first_tensor_kind"] = tensor.get("kind")
    beyond = tensor.get("beyond_rounding")  # the size of the first real difference
    out["first_tensor_rel"] = beyond["rel_diff"] if beyond else tensor.get("rel_diff")
    out.update(real)
    if out.get("onset_until") is not None:  # the lr's own span, where a note gives it, is the fault's extent
        out["onset_until"] = _lr_until(record, int(out["onset_until"]))
    if judged and out.get("onset") not in ("none", "noise") and _repeats_explain(record):
        out.update(onset="noise", period=None, onset_from="repeats", onset_until=None)
    return out


def _lr_until(record: JobRecord, until: int) -> int:
    """The last update of a fault that stopped (``until``, from the update differences: the last
    large one), or, where the job's lr note says the lr differed on consecutive steps that hold it
    (``N123``: ``first`` to ``last``, exact), ``last``: a small last difference (a warmup's lr,
    near the schedule's) is still the fault's."""
    for found in record.notes or []:
        values = getattr(found, "values", None) or {}
        if getattr(found, "code", None) == "N123" and values.get("last") is not None \
                and int(values.get("first", until)) <= until <= int(values["last"]):
            return int(values["last"])
    return until


REPEATS_EXPLAIN = 0.5  # noise from repeats: launches of one config differ by this share of the drift or more


def _repeats_explain(record: JobRecord) -> bool:
    """Whether the job's repeats disagree by as much as its copies do: launches of one
    config whose distributed losses differ by at least :data:`REPEATS_EXPLAIN` times the
    job's ``max|diff|`` against standalone. The drift is then the size of the
    nondeterminism itself, so its onset is noise (``onset_from="repeats"``), whatever
    pattern one launch's update errors happen to draw (a one-signed first step is as
    likely as any other)."""
    spread, c = record.repeat_spread or {}, record.comparison or {}
    drift, between = c.get("max_abs_diff"), spread.get("distributed_max_abs")
    return bool(record.nondeterministic and drift and between is not None
                and float(between) >= REPEATS_EXPLAIN * float(drift))


# --- the class ----------------------------------------------------------------------------------

DRIFT_CLASSES = {
    "step0": "the copies differ before any update: initial weights, initialisation, data, "
             "a forward that computes otherwise (a module, its inputs' handling), or the forward's precision "
             "(param_dtype)",
    "first_update": "the first update differs: gradient reduction, scaling, accumulation, the optimizer, "
                    "or their precision (reduce_dtype)",
    "periodic": "an event every n steps: accumulation boundaries, a schedule, a periodic sync",
    "from_step": "a change from a later step on: a schedule, optimizer state, a step counter",
    "rounding": "float rounding only: the losses stay within their rounding envelope at every step, and every "
                "traced tensor and update within theirs in the traced steps (the standalone copy's twin, nudged by "
                "one unit in the last place, measures it): summation order (e.g. of sharded data) or a lower "
                "precision's rounding; a fault smaller than that, or only in untraced steps, the losses cannot tell",
}
BUFFER_GLOSS = ("not the update: a buffer that the forward updates differs first, after the forward of step {step} "
                "(a running statistic, a step counter), and the next step's loss computes with it")


def class_gloss(row: Row, cls: str) -> str:
    """What the class ``cls`` says of ``row``'s cause: :data:`DRIFT_CLASSES`' gloss, except
    where the job's first differing tensor is a buffer the forward updated (kind ``buffer``)
    and the class is one of the update's: then the buffer, not 'the first update differs'
    (its step's update is equal)."""
    if cls in ("first_update", "periodic", "from_step") and row.get("first_tensor_kind") == "buffer":
        step = row.get("first_diff_step")
        return BUFFER_GLOSS.format(step=(step - 1) if isinstance(step, int) and step > 0 else step)
    return DRIFT_CLASSES[cls]


DRIFT_RULE = (
    "drift class of a job whose sequences differ, by the first step k where they differ beyond their rounding "
    "envelope (not the first failing step; the losses' first step beyond it, or the first step a traced tensor or "
    "update beyond its own envelope reaches) and the onset of the difference: rounding if the losses and every "
    "traced tensor and update stay within their envelope at every step; step0 if k = 0; periodic if the difference jumps at evenly "
    "spaced steps; first_update if k = 1; from_step if k >= 2 (" + "; ".join(
        f"{name}: {text}" for name, text in DRIFT_CLASSES.items()) + "). A random-sign onset (noise) is "
    "reported as such but is no class: it is nondeterminism only where repeats of one config disagree"
)


def tensor_text_in_class(row: Row) -> Optional[str]:
    """The row's ``first_tensor`` text as the class reads it (kept as one place for the
    report's columns)."""
    return row.get("first_tensor")


def parting_step(row: Row) -> Optional[int]:
    """The step a job's drift class and sentence take: ``first_real_step`` (the first
    difference beyond float rounding, from the traced tensors) where known, else
    ``first_diff_step``; rows without it (older records) fall back to the first failing
    step. ``row``: a report row (``sweep.report.summary.collect``: :func:`job_evidence`'s keys)."""
    if row.get("first_real_step") is not None:
        return row["first_real_step"]
    return row.get("first_diff_step", row.get("first_fail_step"))


def rounding_only(row: Row) -> bool:
    """Whether ``row``'s copies differ by float rounding only: they differ, their rounding
    envelope was measured (``sweep.analysis.rounding.measured``), and no difference leaves its
    envelope (no ``first_real_step``: the losses, the traced tensors and updates within
    theirs at every step), whether or not the job passes its tolerance; never a job that ran
    another precision than configured (``sweep.analysis.rounding.policy_departed``). Rows
    without ``first_real_step`` (older records) are not rounding."""
    from sweep.analysis.rounding import measured

    if row.get("first_diff_step") is None or not measured(row) or policy_departed(row):
        return False
    return "first_real_step" in row and row["first_real_step"] is None


def masks(row: Row, size: Optional[float]) -> bool:
    """Whether ``row`` passes only because its precision cannot show a loss difference of
    ``size`` (``sweep.analysis.rounding.departure`` of a failing job): it differs by float
    rounding only (:func:`rounding_only`: losses, traced tensors and updates within their
    envelopes), within an envelope whose ``resolution`` (its band) is at least ``size`` (a
    bfloat16 job's band of 5e-3 holds a fault that moves a float32 job by 2e-4). Such a pass
    is no evidence that the level fixes the fault: it hides it in its rounding. A row equal
    to standalone bit for bit, or beyond its envelope anywhere, masks nothing."""
    band = resolution(row)
    return size is not None and band is not None and rounding_only(row) and band >= size


def tolerance_only(row: Row) -> bool:
    """Whether a failing row fails the tolerance only where its difference is float rounding
    (:func:`rounding_only`: within its envelope at every step, losses and
    traced tensors) and nothing else fails (the record's ``envelope["other_failures"]`` is
    empty: no ranks that disagree, no copies that start or end apart, no replicas that
    disagree): then ``rtol``/``atol`` are finer than this precision holds, no fault."""
    if row.get("status") != "fail":
        return False
    return not envelope(row).get("other_failures") and rounding_only(row)


def drift_class(row: Row) -> Optional[str]:
    """The class of a judged job whose sequences differ at all (:data:`DRIFT_RULE`, one of
    :data:`DRIFT_CLASSES`), from its :func:`parting_step` and ``onset``; ``None`` for a job
    without a difference or without a verdict (``status`` not ``ok`` or ``fail``)."""
    if row["status"] not in JUDGED:
        return None
    step = parting_step(row)
    if step is None:
        return None
    if rounding_only(row):
        return "rounding"
    onset = row.get("onset")
    if step == 0:
        return "step0"
    if onset == "periodic":
        return onset
    return "first_update" if step == 1 else "from_step"



def record_row(record: JobRecord) -> Row:
    """A minimal report row of one job's record (``status``, ``result`` and
    :func:`job_evidence`'s keys), for the rules that read rows (:func:`rounding_only`,
    ``sweep.analysis.rounding.tolerance_only``) where no sweep's rows are at hand (a job's
    own line)."""
    row: Row = {"status": record.status, "result": record}
    if record.status in JUDGED:
        row.update(job_evidence(record))
    return row
