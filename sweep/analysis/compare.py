"""Per-step comparison of two loss sequences: the verdict and the numbers behind it.

Pure numpy, no framework. The tolerance rule is ``numpy.isclose`` with the standalone
sequence as the reference ``b``: step ``i`` passes iff
``|distributed[i] - standalone[i]| <= atol + rtol * |standalone[i]|``
(numpy docs, ``numpy.isclose``). NaN at the same step in both sequences counts as
equal (``equal_nan=True``), as do infinities of the same sign; a non-finite value in
one sequence only fails that step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional, Sequence

import numpy as np

from sweep.analysis.pairs import nonfinite_apart
from sweep.records import Note, note

# Notes on copies that are not equal in what they draw or hold (``JobRecord.notes``): one
# note each (no "; " inside: the report splits a job's notes on it). The text before the
# first ":" is the note's kind (``sweep.findings.context``, kind V154), the whole
# note reaches the verdict (``sweep.findings.context``, kind V153).
RANDOM_DRAWS_NOTE = (
    "the forward draws random numbers (dropout?): with data.split=sharded the copies' masks differ, so their "
    "losses cannot match, and no culprit follows from this alone"
)
MISSING_PREFIX = "the copies hold different tensors: "
COPY_NOTE_KINDS = (RANDOM_DRAWS_NOTE.split(":")[0], MISSING_PREFIX.split(":")[0])


def _as_pair(standalone: Sequence[float], distributed: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Both sequences as float64 arrays of one 1-D shape.

    Raises:
        ValueError: if the shapes differ or the sequences are empty.
    """
    ref = np.asarray(standalone, dtype=np.float64)
    got = np.asarray(distributed, dtype=np.float64)
    if ref.ndim != 1 or ref.shape != got.shape:
        raise ValueError(f"loss sequences must have the same 1-D shape, got {ref.shape} and {got.shape}")
    if ref.size == 0:
        raise ValueError("loss sequences are empty")
    return ref, got


@dataclass(frozen=True)
class Comparison:
    """Outcome of comparing ``distributed`` against ``standalone``, step by step.

    Differences are ``distributed - standalone`` in loss units, over the steps where
    both are finite. ``max_rel_diff`` divides by ``|standalone|`` (steps with a zero
    reference are left out of it). ``first_fail_step`` is 0-based, ``None`` if all pass.
    ``first_diff_step``: the first step where the two differ at all (by more than
    ``noise_floor``, loss units; 0.0 by default: exact, as deterministic CPU runs of a
    correct engine are bit-identical), ``None`` if they never do.
    """

    passed: bool
    rtol: float
    atol: float
    n_steps: int
    n_fail: int
    first_fail_step: Optional[int]
    max_abs_diff: float
    max_rel_diff: float
    mean_signed_diff: float
    first_nonfinite_step: Optional[int]
    first_diff_step: Optional[int] = None
    noise_floor: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def differing_steps(ref: np.ndarray, got: np.ndarray, noise_floor: float = 0.0) -> np.ndarray:
    """Steps where ``got`` and ``ref`` differ by more than ``noise_floor``, or where one is
    finite and the other is not, or both are non-finite but not equal (int array)."""
    bad, nonfinite = nonfinite_apart(ref, got)
    with np.errstate(invalid="ignore"):
        apart = ~bad & (np.abs(got - ref) > noise_floor)
    return np.flatnonzero(apart | nonfinite)


def compare_losses(
    standalone: Sequence[float], distributed: Sequence[float], *, rtol: float, atol: float,
    noise_floor: float = 0.0,
) -> Comparison:
    """Compare two per-step loss sequences under ``numpy.isclose(distributed, standalone)``.

    Args:
        standalone: reference losses, shape ``(steps,)``, any float dtype (compared in float64).
        distributed: losses of the distributed copy, same shape.
        rtol, atol: tolerances, both >= 0 (the project default is 1e-4 each).
        noise_floor: differences up to this size (loss units) do not count for
            ``first_diff_step``; 0.0 counts any difference.

    Raises:
        ValueError: if the shapes differ, a sequence is empty or a tolerance is negative.
    """
    ref, got = _as_pair(standalone, distributed)
    if rtol < 0 or atol < 0:
        raise ValueError(f"rtol={rtol} and atol={atol} must be >= 0")

    close = np.isclose(got, ref, rtol=rtol, atol=atol, equal_nan=True)
    failing = np.flatnonzero(~close)
    finite = np.isfinite(ref) & np.isfinite(got)
    diff = got[finite] - ref[finite]
    nonzero = finite & (ref != 0)
    rel = np.abs(got[nonzero] - ref[nonzero]) / np.abs(ref[nonzero])
    nonfinite = np.flatnonzero(~finite)
    differ = differing_steps(ref, got, noise_floor)
    return Comparison(
        passed=failing.size == 0,
        rtol=float(rtol),
        atol=float(atol),
        n_steps=int(ref.size),
        n_fail=int(failing.size),
        first_fail_step=int(failing[0]) if failing.size else None,
        max_abs_diff=float(np.max(np.abs(diff))) if diff.size else float("nan"),
        max_rel_diff=float(np.max(rel)) if rel.size else float("nan"),
        mean_signed_diff=float(np.mean(diff)) if diff.size else float("nan"),
        first_nonfinite_step=int(nonfinite[0]) if nonfinite.size else None,
        first_diff_step=int(differ[0]) if differ.size else None,
        noise_floor=float(noise_floor),
    )


def printed_quantum(text: str) -> Optional[float]:
    """The unit in the last place of a number as written (``"0.9773"`` -> 1e-4,
    ``"9.773e-01"`` -> 1e-4, ``"12"`` -> 1.0); ``None`` for ``nan``/``inf``. A value written
    so stands for any number within half of it."""
    mantissa, _, exponent = text.strip().lower().partition("e")
    if not any(c.isdigit() for c in mantissa):
        return None
    decimals = len(mantissa.partition(".")[2]) if "." in mantissa else 0
    return float(10.0 ** (int(exponent or 0) - decimals))


PRINTED_SHARE = 0.9  # the share of a sequence's values that must be short for it to count as printed


def printed_resolution(values: Sequence[Any]) -> Optional[float]:
    """The resolution of a loss sequence read from rounded text (``{loss:.4f}``: 1e-4), or
    ``None`` when its values are exact floats.

    A float parsed from ``"0.9773"`` is written back by ``repr`` as ``"0.9773"``, while a
    float32 loss written by ``repr`` needs about 8 significant digits. So a value is short
    where the unit in its last place (:func:`printed_quantum` of its ``repr``) is coarser
    than float32's spacing at the sequence's largest value (``numpy.spacing``); the sequence
    is printed when at least :data:`PRINTED_SHARE` of its finite values are short (an exact
    0.5 now and then is no rounding), and its resolution is the finest such unit (a value
    printed ``0.9770`` reads back as ``0.977``: trailing zeros hide digits that were printed)."""
    finite = [float(v) for v in values if isinstance(v, (int, float)) and np.isfinite(v)]
    spacing = float(np.spacing(np.float32(max((abs(v) for v in finite), default=1.0) or 1.0)))
    # a bfloat16 or float16 loss (4.15625) has a short repr too, yet is exact: not printed text
    short = [q for v in finite if not _half_exact(v)
             for q in [printed_quantum(repr(v))] if q is not None and q > spacing]
    return min(short) if finite and len(short) >= PRINTED_SHARE * len(finite) else None


def _half_exact(value: float) -> bool:
    """Whether ``value`` is exactly a bfloat16 (a float32 whose low 16 bits are zero) or a
    float16 number with 5 or more significant digits (4.15625): a loss computed in half
    precision, whose short ``repr`` is no sign of rounded text. Shorter ones (0.5, 4.125)
    are as often printed as computed, and still count."""
    f32 = np.float32(value)
    if float(f32) != value or value == 0:
        return False
    bf16 = (int(f32.view(np.uint32)) & 0xFFFF) == 0
    f16 = bool(np.isfinite(np.float16(value))) and float(np.float16(value)) == value
    digits = repr(abs(value)).split("e")[0].replace(".", "").strip("0")
    return (bf16 or f16) and len(digits) >= 5


PRINTED_PREFIX = "printed precision"  # the kind of the note (the text before its first ":")


def printed_note(resolution: Dict[str, float], rtol: float, atol: float, scale: float) -> Note:
    """The note (``N190``) of a job whose losses were read from rounded text (``resolution``: copy
    -> :func:`printed_resolution`): what "equal" means then, what cannot be seen, and whether
    the tolerance (``atol + rtol * scale``, ``scale`` the largest standalone loss) is finer
    than the text can show (``coarse``)."""
    q = max(resolution.values())
    return note("N190", resolution={k: float(v) for k, v in resolution.items()}, quantum=float(q), half=float(q / 2),
                coarse=bool(q / 2 > atol + rtol * scale), atol=float(atol), rtol=float(rtol))


def summed_loss_note(standalone: Sequence[float], distributed: Sequence[float], shards: int,
                     loss: str) -> Optional[Note]:
    """The note (``N191``) of a loss that sums over the batch on sharded data: at step 0 (equal
    weights) the distributed loss is ``1/shards`` the standalone one, within
    ``sweep.analysis.collectives.SCALE_TOL`` (each rank's loss is over its ``1/shards`` of the
    rows; the mean over the ranks is the whole's ``1/shards``). ``None`` where it does not hold
    (or ``shards`` < 2, or no finite, non-zero step-0 loss)."""
    from sweep.analysis.collectives import SCALE_TOL

    if shards < 2 or not len(standalone) or not len(distributed):
        return None
    a, b = float(standalone[0]), float(distributed[0])
    if not (np.isfinite(a) and np.isfinite(b)) or a == 0.0 or abs(b / a - 1 / shards) > SCALE_TOL / shards:
        return None
    return note("N191", ratio=b / a, shards=int(shards), loss=str(loss))


def nonfinite_in_one(standalone: Sequence[float], distributed: Sequence[float]) -> Optional[Dict[str, Any]]:
    """Where one copy's loss turns non-finite (NaN or infinite) while the other's is still finite
    at that step: ``{"copy": "distributed" | "standalone", "step": the first such step}``, the
    earlier of the two copies' where both do at different steps; ``None`` where neither does, or
    both from the same step. Such a job's ``max_abs_diff`` covers its finite steps only."""
    a, b = np.asarray(standalone, np.float64), np.asarray(distributed, np.float64)
    n = min(a.size, b.size)
    alone = np.flatnonzero(~np.isfinite(a[:n]) ^ ~np.isfinite(b[:n]))
    if not alone.size:
        return None
    step = int(alone[0])
    return {"copy": "distributed" if not np.isfinite(b[step]) else "standalone", "step": step}


def drift_metrics(standalone: Sequence[float], distributed: Sequence[float]) -> dict:
    """Shape of the drift ``distributed - standalone``, from the two loss sequences alone.

    Args:
        standalone: reference losses, shape ``(steps,)``.
        distributed: losses of the distributed copy, same shape.

    Returns:
        ``step0_diff``: the difference at step 0, before any update (loss units);
        ``runs_low_pct``: share of the finite steps where ``distributed < standalone``, in %;
        ``trend``: least-squares slope of the difference over the finite steps
        (``numpy.polyfit``, loss units per step; NaN with fewer than 2 finite steps);
        ``final_ratio``: ``distributed[-1] / standalone[-1]`` (NaN or inf when the last
        reference is 0 or a loss is not finite). All values are floats.

    Raises:
        ValueError: if the shapes differ or the sequences are empty.
    """
    ref, got = _as_pair(standalone, distributed)
    steps = np.flatnonzero(np.isfinite(ref) & np.isfinite(got))
    diff = got[steps] - ref[steps]
    with np.errstate(divide="ignore", invalid="ignore"):
        final_ratio = got[-1] / ref[-1]
    return {
        "step0_diff": float(got[0] - ref[0]),
        "runs_low_pct": float(100.0 * np.mean(diff < 0)) if diff.size else float("nan"),
        "trend": float(np.polyfit(steps, diff, 1)[0]) if diff.size >= 2 else float("nan"),
        "final_ratio": float(final_ratio),
    }



def tolerance_ratio(ref: Sequence[float], got: Sequence[float], rtol: Optional[float],
                    atol: Optional[float]) -> Optional[float]:
    """The largest ``|got - ref| / (atol + rtol |ref|)`` over the finite steps: how far the
    worst step is from failing (``numpy.isclose``'s bound; 1.0 is the tolerance), ``None``
    without a tolerance or a finite step. ``ref``, ``got``: the standalone and the
    distributed losses, compared over their common length."""
    if rtol is None or atol is None:
        return None
    a, b = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    n = min(a.size, b.size)
    a, b = a[:n], b[:n]
    finite = np.isfinite(a) & np.isfinite(b)
    if not finite.any():
        return None
    bound = float(atol) + float(rtol) * np.abs(a[finite])
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.max(np.abs(b[finite] - a[finite]) / bound))

ONSETS = ("none", "step0", "periodic", "noise", "abrupt", "growth")
SPIKE_FACTOR = 10.0  # a jump of the difference this many times its median jump is an event
ONSET_RULE = (
    "onset of distributed - standalone from its first differing step k: step0 if k = 0; periodic if, from k, "
    f"the difference jumps (a step-to-step change > {SPIKE_FACTOR:g}x the median change, or > 5% of the largest "
    "when most steps do not change it) at 3 or more steps "
    "spaced evenly (period n); noise if its sign flips between at least 40% of consecutive differing steps "
    "without growing; abrupt if at k it is already >= 10% of its largest size; growth otherwise"
)


def onset(standalone: Sequence[float], distributed: Sequence[float], noise_floor: float = 0.0) -> dict:
    """How the difference ``distributed - standalone`` starts and evolves (:data:`ONSET_RULE`).

    Returns ``{"pattern": one of ONSETS, "first_diff_step": k or None, "period": n or
    None, "spikes": [steps of jumps]}``. Steps with a non-finite value are left out of
    the shape (they still count as differing).

    Raises:
        ValueError: if the shapes differ or the sequences are empty.
    """
    ref, got = _as_pair(standalone, distributed)
    differ = differing_steps(ref, got, noise_floor)
    if not differ.size:
        return {"pattern": "none", "first_diff_step": None, "period": None, "spikes": []}
    k = int(differ[0])
    if k == 0:
        return {"pattern": "step0", "first_diff_step": 0, "period": None, "spikes": []}
    finite = np.isfinite(ref) & np.isfinite(got)
    d = np.where(finite, got - ref, 0.0)[k:]
    jumps = np.abs(np.diff(np.concatenate([[0.0], d])))
    median = float(np.median(jumps))  # zeros count: a difference that only moves at events has median 0
    # with a zero median, rounding (ulp-sized jumps) is no event: 5% of the largest jump is
    threshold = SPIKE_FACTOR * median if median > 0 else 0.05 * float(np.max(jumps))
    spikes = [k + int(i) for i in np.flatnonzero(jumps > max(threshold, noise_floor))]
    gaps = np.diff(spikes)
    if len(spikes) >= 3 and gaps.size and np.all(gaps == gaps[0]) and gaps[0] >= 2:
        return {"pattern": "periodic", "first_diff_step": k, "period": int(gaps[0]), "spikes": spikes}
    a = np.abs(d)
    nonzero = d[a > noise_floor]
    flips = float(np.mean(np.sign(nonzero[1:]) != np.sign(nonzero[:-1]))) if nonzero.size > 2 else 0.0
    half = a.size // 2
    growing = half >= 1 and float(np.mean(a[half:])) > 2.0 * float(np.mean(a[:half]))
    if flips >= 0.4 and not growing:
        return {"pattern": "noise", "first_diff_step": k, "period": None, "spikes": spikes}
    pattern = "abrupt" if a[0] >= 0.1 * float(np.max(a)) else "growth"
    return {"pattern": pattern, "first_diff_step": k, "period": None, "spikes": spikes}
