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

from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

from sweep.analysis.compare import onset
from sweep.analysis.modules import first_over_ranks
from sweep.analysis.rounding import policy_departed, within_floor
from sweep.analysis.trace import KINDS, ROUNDING_REL, one_sign_along
from sweep.io import read_floats
from sweep.records import JUDGED, JobRecord

Row = Dict[str, Any]

# --- the first step -----------------------------------------------------------------------------

# A failing runner=command job's losses part beyond float rounding where they differ by more
# than this, relative (a few float32 ulps: fp32's epsilon is 1.2e-7): a bf16 forward's step-0
# difference counts, a loss averaged over the ranks does not. (Passing jobs: ROUNDING_REL.)
LOSS_ROUNDING_REL = 1e-6


def first_diff_over_ranks(comparisons: Iterable[Optional[Dict[str, Any]]]) -> Optional[int]:
    """The earliest ``first_diff_step`` of ``comparisons`` (comparison dicts:
    ``JobRecord.comparison``, the entries of ``JobRecord.rank_comparisons``; ``None`` entries
    and ones without a difference are skipped): the step any rank's losses first differ at
    all; ``None`` where none differs."""
    return min((c["first_diff_step"] for c in comparisons if c and c.get("first_diff_step") is not None),
               default=None)


def real_onset(first_diff: Optional[int], tensor: Dict[str, Any], ref: Sequence[float], got: Sequence[float],
               within_tolerance: bool = False, sharded: bool = False,
               failing_rel: float = ROUNDING_REL, step0_floor: Optional[float] = None,
               update_floor: Optional[float] = None) -> Dict[str, Any]:
    """``first_real_step`` (the first loss step a difference beyond float rounding can
    reach) and the onset from the update differences when traced (``onset_from``:
    ``"updates"`` or ``"losses"``; ``sweep.analysis.trace.UPDATE_ONSET_RULE``).

    Args:
        first_diff: the first step the job's losses differ at all (any rank:
            :func:`first_diff_over_ranks`), ``None`` if they never do.
        tensor: the job's first differing tensor (``JobRecord.first_tensor``; ``{}`` if
            none): its ``step``, ``kind``, ``beyond_rounding`` and ``updates``
            (``sweep.analysis.trace.update_onset``) are read.
        ref, got: the standalone and the distributed losses, shape ``(steps,)``.
        within_tolerance: the job passed.
        sharded: the copies' losses may round apart (``data.split=sharded``, or a
            ``runner=command`` job, whose copies the tool does not see).
        failing_rel: the relative loss difference beyond which a failing job's losses
            part on sharded data (:data:`LOSS_ROUNDING_REL` for a command job).
        step0_floor: the job's rounding floor at step 0 (``sweep.analysis.rounding``:
            ``rounding_floor(...)["step0_rel"]``, relative): on sharded data a step-0 loss
            difference beyond it is real (the weights are equal there: the forward's or the
            loss's own reduction differs), however small against the fixed rules; ``None``:
            the fixed rules only.
        update_floor: how large a passing job's update errors may grow by rounding
            (``rounding_floor(...)["update_rel"]``, measured on the passing peers): update
            errors of random sign beyond it are a fault's, not rounding grown (a warmup
            1.3x too large in one copy for two steps, below tolerance: 0.3 against the
            correct peers' 2e-6); ``None`` (no traced peer): random sign alone reads as
            rounding grown.

    Returns:
        ``{"first_real_step": step or None, "onset_from": "losses" | "updates" | None}``,
        with ``onset``, ``period`` and ``onset_until`` when the update differences give the
        onset, and ``rounding_grown: True`` when a passing job's rounding grew past
        rounding's size (no cause).

    The step follows the first *real* difference, whatever the data split: a traced
    gradient or weight of step ``s`` beyond rounding counts as loss step ``s + 1`` (a
    reduced gradient or an update that differs: ``first_update`` for ``s = 0``), initial
    weights that differ as step 0, and so does a differing loss: with replicated data
    (``sharded=False``) any differing loss step (the copies compute the same rows from
    the same weights: a differing forward), with ``sharded=True`` only one that differs
    beyond rounding (``sweep.analysis.trace.ROUNDING_REL`` relative to the standalone
    loss: the copies' losses differ by summation order from step 0; a failing command
    job's losses part beyond rounding past ``failing_rel``). Untraced, the first differing
    loss step counts. ``None`` when every traced sign stays within rounding.

    ``within_tolerance`` (the job passed): unless the difference is systematic (one sign
    along every differing update, :func:`sweep.analysis.trace.one_sign_along`), the update
    differences make no real difference and their onset is noise, and a tensor beyond
    rounding that follows a first difference within it is rounding grown by the steps,
    not a cause (``rounding_grown``: True); untraced, only a loss step beyond rounding is
    real (on replicated data a step-0 difference too: the forward's). A rounding-size error
    that Adam normalises to full-size steps (a gradient that is zero up to rounding) errs
    with random signs and draws a pattern of the step count. A passing job whose first
    difference is already beyond rounding (a precision: bf16 against a float32 baseline)
    keeps it.
    """
    first = first_diff
    out: Dict[str, Any] = {"first_real_step": first, "onset_from": "losses" if first is not None else None}
    if first is None:
        return out
    updates = tensor.get("updates")
    grown = False  # a passing job's rounding, grown past rounding's size by the steps: no cause
    largest = max((float(r) for r in (updates or {}).get("rel") or [] if r is not None), default=None)
    beyond_peers = update_floor is not None and largest is not None and largest > update_floor
    if within_tolerance and not beyond_peers and not (
            updates and (updates.get("systematic") or one_sign_along(updates))):
        grown = "beyond_rounding" in tensor
        if updates:  # random-sign update differences: noise, whatever pattern their sizes draw
            updates = dict(updates, real_step=None, pattern="noise" if updates["pattern"] != "none" else "none",
                           period=None)
    traced = "step" in tensor

    def loss_real(step: int) -> bool:
        rel = ROUNDING_REL if within_tolerance else failing_rel
        if step == 0 and step0_floor is not None:  # equal weights: rounding is measured, not assumed
            rel = step0_floor
        return abs(got[step] - ref[step]) > rel * abs(ref[step])

    # each traced sign of a real difference, as the loss step that can first see it; they may
    # precede ``first``: the losses can round a small weight difference away for a few steps
    if "beyond_rounding" in tensor:  # the first traced difference is float rounding
        beyond = tensor["beyond_rounding"]
        reals = [beyond["step"] + 1] if beyond and not grown else []
        # the losses of step 0 still say what the tensors cannot: the weights are equal there, so
        # a step-0 loss that differs on replicated data, or beyond the step-0 floor on sharded
        # data, is the forward's or the loss's own (a loss scaled by 1 + 2e-5: every gradient
        # within 1e-4, the loss 24x its floor)
        if first == 0 and (loss_real(0) if sharded else True):
            reals.append(0)
    elif traced:
        # initial weights or buffers that differ: the copies do not start equal; a buffer after a
        # step's forward, a gradient or a weight after an update: the loss of the next step
        reals = [0] if tensor.get("kind") in ("initial", "initial_buffer") else [tensor["step"] + 1]
        # replicated data: the copies compute the same rows from the same weights, so a
        # differing loss is a differing forward; sharded: a loss differs by summation order
        reals += [s for s in range(first, min(len(ref), len(got))) if loss_real(s)][:1] if sharded else [first]
    elif sharded or (within_tolerance and first > 0):
        # untraced: no tensor says more than the losses, so where they may round apart (sharded
        # data, a command's copies) and in a passing job, only a loss step that differs beyond
        # rounding is real (a step-0 difference on replicated data is the forward's)
        reals = [s for s in range(first, min(len(ref), len(got))) if loss_real(s)][:1]
    else:
        reals = [first]
    if updates and updates["real_step"] is not None:
        reals.append(updates["real_step"] + 1)
    out["first_real_step"] = min(reals, default=None)
    if grown and out["first_real_step"] is None:
        out["rounding_grown"] = True
    if updates and updates["pattern"] != "none" and out["first_real_step"] != 0:
        out.update(onset=updates["pattern"], period=updates.get("period"), onset_from="updates",
                   onset_until=updates.get("until"))
    return out


# --- the place: the first differing tensor and module -------------------------------------------

ROUNDING_GROWN = ("; the job passes and its update errors take both signs: float rounding grown by the steps, "
                  "no cause")


def first_tensor_order(found: Dict[str, Any]) -> tuple:
    """The sort key of one rank's first differing tensor (``found``: ``RankResult.first_tensor``
    with ``step``, ``kind`` and its ``rank``) among the ranks': a real one (beyond float
    rounding, or its ``beyond_rounding``) before one that is rounding only, so a fault on some
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
        with its ``rank``, its description saying that the rerun did not repeat the
        difference the job's losses show from ``first_diff``. ``None`` when ``found`` is empty.
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
    if "description" in first:  # the losses differed, the rerun's tensors do not
        first["description"] += (
            f" in the tracing rerun, though this run's losses differ from step {first_diff}: that launch did "
            "not repeat the difference (nondeterministic? repeat=3 tells)")
    return first


def first_module_over_ranks(modules: Sequence[Tuple[Dict[str, Any], int]]) -> Optional[Dict[str, Any]]:
    """The job's first differing module from its tracing rerun's ranks (``modules``:
    ``[(RankResult.modules, rank)]`` of the ranks that recorded a module trace, in rank
    order): :func:`sweep.analysis.modules.first_over_ranks` of their ``first``, or, where no
    rank names one, ``{"description"}`` of the first rank's (why none: every module agrees,
    or no module trace); ``None`` when no rank recorded a module trace."""
    if not modules:
        return None
    return first_over_ranks([(m.get("first"), rank) for m, rank in modules]) or {
        "description": modules[0][0]["description"]}


def place(module: Optional[Dict[str, Any]], tensor: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The first differing module merged with the first differing tensor: where the
    module's step comes after the tensor's (a gradient or weight that differs after step
    ``N``'s update, a module of a later step whose inputs agree computes on it), the
    module's description (a copy of ``module``) adds that the weights already differ after
    step ``N``'s update: the tensor has the cause. A buffer (updated by a forward, not by
    the optimizer) says so by its name and the forward after which it differs, and initial
    weights that differ say that. Otherwise ``module`` as it is (also ``None``, a module
    without a step, or a tensor without one)."""
    if not module or not tensor or module.get("step") is None or "step" not in tensor \
            or module["step"] <= tensor["step"]:
        return module
    if tensor.get("kind") in ("buffer", "initial_buffer"):  # a buffer the forward updates, not the weights
        when = "before any step" if tensor["kind"] == "initial_buffer" else f"after the forward of step {tensor['step']}"
        return dict(module, description=module["description"] + (
            f"; buffer {tensor.get('name')} already differs {when} (first differing tensor): the module computes "
            "with it"))
    if tensor.get("kind") == "initial":
        return dict(module, description=module["description"] + (
            "; the initial weights already differ (first differing tensor): the module computes on them"))
    return dict(module, description=module["description"] + (
        f"; the weights already differ after step {tensor['step']}'s update (first differing tensor): the "
        "module computes on them"))


def first_tensor_text(tensor: Dict[str, Any], world_size: Optional[int], rounding_grown: bool = False) -> Optional[str]:
    """The first differing tensor as one sentence: its ``description`` (or the ``note``
    saying why nothing was traced), with :data:`ROUNDING_GROWN` where a passing job's
    rounding grew past rounding's size (:func:`real_onset`), and, on several ranks, which
    rank found it (``(rank r)``, or ``(every rank)``; not where the description names the
    shards and their ranks). ``None`` for no finding."""
    text = tensor.get("description") or tensor.get("note")
    if rounding_grown and text:
        text += ROUNDING_GROWN
    located = tensor.get("description") and "step" in tensor and tensor.get("rank") is not None
    if located and (world_size or 1) > 1 and not tensor.get("shards"):  # (else the description names them)
        every = len(tensor.get("ranks") or []) == world_size
        text += " (every rank)" if every else f" (rank {tensor['rank']})"
    return text


def job_evidence(record: JobRecord, floor: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Where and how a job's copies part and what differs first, from its record.

    Returns, for a record with a comparison and losses: ``first_diff_step`` (the
    earliest step any rank's losses differ, exact unless ``compare.noise_floor``),
    ``onset`` (``sweep.analysis.compare.ONSETS``) and ``period`` from the losses; for every
    record: ``first_module`` (its description), ``first_tensor`` (:func:`first_tensor_text`)
    and ``first_tensor_rel`` (the relative size of the first real difference: of its
    ``beyond_rounding`` where the first one is rounding); and with losses again
    :func:`real_onset`'s ``first_real_step`` and ``onset_from`` (with ``onset``, ``period``
    and ``onset_until`` from the update differences where they give it; ``onset="noise"``
    with ``onset_from="repeats"`` where the job's repeats disagree by as much as its copies:
    :func:`_repeats_explain`). Keys in that order.
    A ``runner=command`` job counts as sharded (its copies are not seen: its losses may round
    apart from step 0, a loss averaged over the ranks), with :data:`LOSS_ROUNDING_REL`; so
    does a job whose standalone copy trains in another framework (``baseline.framework``:
    other kernels round the same rows otherwise).
    ``floor``: the job's rounding floor (``sweep.analysis.rounding.rounding_floor``), whose
    ``step0_rel`` judges a sharded job's step 0 (:func:`real_onset`); ``None``: the fixed rules.
    """
    out: Dict[str, Any] = {}
    tensor = record.first_tensor or {}
    config = record.config or {}
    judged = bool(record.comparison and record.losses)
    real: Dict[str, Any] = {}
    if judged:
        ref, got = read_floats(record.losses["standalone"]), read_floats(record.losses["distributed"])
        shape = onset(ref, got, float(record.comparison.get("noise_floor") or 0.0))
        # every rank judged: the earliest divergence of any rank
        first = first_diff_over_ranks([{"first_diff_step": shape["first_diff_step"]}, *(record.rank_comparisons or [])])
        out.update(first_diff_step=first, onset=shape["pattern"], period=shape["period"])
        command = (config.get("runner") or {}).get("name") == "command"
        # a standalone copy in another framework computes the same rows with other kernels: its
        # losses round apart from step 0, as a sharded job's do (baseline.framework)
        other = (config.get("baseline") or {}).get("framework")
        across = bool(other) and other != (config.get("framework") or {}).get("name")
        real = real_onset(first, tensor, ref, got, within_tolerance=record.status == "ok",
                          sharded=(config.get("data") or {}).get("split") == "sharded" or command or across,
                          failing_rel=LOSS_ROUNDING_REL if command else ROUNDING_REL,
                          step0_floor=None if command or not floor else floor["step0_rel"],
                          update_floor=(floor or {}).get("update_rel"))
    grown = bool(real.pop("rounding_grown", False))
    out["first_module"] = (record.first_module or {}).get("description")
    out["first_tensor"] = first_tensor_text(tensor, record.world_size, grown)
    out["first_tensor_kind"] = tensor.get("kind")
    beyond = tensor.get("beyond_rounding")  # the size of the first real difference
    out["first_tensor_rel"] = beyond["rel_diff"] if beyond else tensor.get("rel_diff")
    out.update(real)
    if judged and out.get("onset") not in ("none", "noise") and _repeats_explain(record):
        out.update(onset="noise", period=None, onset_from="repeats", onset_until=None)
    return out


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
             "or the forward's precision (param_dtype)",
    "first_update": "the first update differs: gradient reduction, scaling, accumulation, the optimizer, "
                    "or their precision (reduce_dtype)",
    "periodic": "an event every n steps: accumulation boundaries, a schedule, a periodic sync",
    "from_step": "a change from a later step on: a schedule, optimizer state, a step counter",
    "rounding": "float rounding only, every traced tensor and update, or losses within the job's rounding floor: "
                "summation order (e.g. of sharded data) or a lower precision's rounding, no fault",
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
    "drift class of a job whose sequences differ, by the first step k where they differ at all (not the first "
    "failing step; when the traced tensors differ by float rounding first, the first step the difference beyond "
    "rounding reaches) and the onset of the difference: rounding if every traced tensor and update stays within "
    "float rounding; step0 if k = 0; periodic if the difference jumps at evenly "
    "spaced steps; first_update if k = 1; from_step if k >= 2 (" + "; ".join(
        f"{name}: {text}" for name, text in DRIFT_CLASSES.items()) + "). A random-sign onset (noise) is "
    "reported as such but is no class: it is nondeterminism only where repeats of one config disagree"
)


# where a job's tensors keep one sign below rounding's size but its losses stay within their floor
WITHIN_FLOOR_TEXT = "; but the losses stay within their rounding floor, so no cause is taken from the tensors alone"


def tensor_text_in_class(row: Row) -> Optional[str]:
    """The row's ``first_tensor`` text, with :data:`WITHIN_FLOOR_TEXT` where its class is
    ``rounding`` although the text calls the update errors systematic (one sign below
    rounding's size): the losses decide (issue 41: no cause from the tensors alone)."""
    text = row.get("first_tensor")
    if row.get("drift") == "rounding" and text and "systematic, not rounding" in text and \
            WITHIN_FLOOR_TEXT not in text:
        return text + WITHIN_FLOOR_TEXT
    return text


def parting_step(row: Row) -> Optional[int]:
    """The step a job's drift class and sentence take: ``first_real_step`` (the first
    difference beyond float rounding, from the traced tensors) where known, else
    ``first_diff_step``; rows without it (older records) fall back to the first failing
    step. ``row``: a report row (``sweep.report.summary.collect``: :func:`job_evidence`'s keys)."""
    if row.get("first_real_step") is not None:
        return row["first_real_step"]
    return row.get("first_diff_step", row.get("first_fail_step"))


def rounding_only(row: Row) -> bool:
    """Whether ``row``'s copies differ by float rounding only (``sweep.analysis.trace.ROUNDING_REL``),
    judged by its traced tensors and updates (no ``first_real_step``; rows without that
    key: ``first_tensor_rel``, the first difference beyond rounding if any); unknown (not
    traced) counts as a real drift. A passing job whose losses stay within its rounding floor
    (``sweep.analysis.rounding.within_floor``) differs by rounding only, unless a traced
    tensor differs beyond its dtype's rounding (``sweep.analysis.rounding.tensor_floor``);
    a job that ran another precision than configured never does
    (``sweep.analysis.rounding.policy_departed``)."""
    if row.get("first_diff_step") is not None and within_floor(row):
        return True
    if policy_departed(row):  # another precision than configured ran: the difference has that cause
        return False
    if "first_real_step" in row:
        return row.get("first_diff_step") is not None and row["first_real_step"] is None
    rel = row.get("first_tensor_rel")
    return rel is not None and float(rel) < ROUNDING_REL


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

