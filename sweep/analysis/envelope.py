"""A configuration's rounding envelope: what float rounding alone does to its numbers, measured.

Two copies that compute the same training in another order (a mean of the ranks' means
against one mean, another kernel's blocking, a lower precision's casts) part by rounding.
How far rounding alone takes *this* model, data, optimizer and precision over *these* steps
is not a constant: Adam turns a rounding-size gradient error into a full-size step, a bf16
loss moves in steps of 1/32 near 4.2, and a long run grows what a short one keeps small. So
it is measured, with an A/A test of the numerics (the idea of Monte Carlo arithmetic:
Parker, *Monte Carlo Arithmetic: exploiting randomness in floating-point arithmetic*, 1997;
Frechtling and Leong, *MCALIB*, 2015): a **twin** of the standalone copy trains from the
same initial weights, each nudged by one unit in the last place of the lowest precision
either copy computes in (random signs, a fixed seed: :func:`perturb`), on the same data,
in the same random stream, with the same engine. The gap between the standalone copy and
its twin, step by step, is what a difference of one rounding does, grown by the steps.

The **envelope** of a step (:func:`loss_envelope`, loss units) is the largest gap the twin
has shown up to that step (a difference that rounding reached once it can reach again), and
never less than the resolution of the compared values themselves (:func:`resolution`: the
spacing of the coarsest floating format that holds every value of a sequence exactly; a
bf16 loss near 4.2 moves in steps of 1/32). A difference between the copies is float
rounding where it stays within ``margin`` times the envelope at every step
(:func:`judge_losses`; ``compare.envelope_margin``, default :data:`MARGIN`: the twin is one
draw of rounding, and two draws of one random walk differ by a few times; measured on the
correct configurations of ``tests/``), and a cause from the first step it leaves it.

The same rule holds for a traced tensor (``sweep.analysis.trace``) and a module's output
(``sweep.analysis.modules``): their envelope is the twin's difference from the standalone
copy on the same elements at the same step. Pure numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

import numpy as np

# significand bits p of each floating format, implicit bit included (IEEE 754 binary64,
# binary32, binary16; bfloat16: 8): one unit in the last place of x is 2^(floor(log2|x|) - p + 1)
SIGNIFICAND_BITS = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}
# the coarsest first: a sequence's resolution is that of the coarsest format holding it exactly
FORMATS_COARSE_FIRST = ("bfloat16", "float16", "float32", "float64")
MIN_EXPONENT = {"float64": -1022, "float32": -126, "float16": -14, "bfloat16": -126}
MARGIN = 4.0  # the default of compare.envelope_margin (module docstring)
SIGN_SHARE = 0.75  # a sign is said only where it holds on this share of the steps beyond the envelope


@dataclass(frozen=True)
class EnvelopeSetting:
    """How a traced tensor's or a module's rounding envelope is set from the twin
    (``sweep.analysis.trace``, ``sweep.analysis.modules``).

    Attributes:
        margin: how many times the twin's difference from the standalone copy a difference
            may reach and still be rounding (``compare.envelope_margin``, default
            :data:`MARGIN`); a multiple, no unit.
        dtype: the format whose unit in the last place nudged the twin's weights
            (``sweep.train.twin.perturbation_dtype``), a key of :data:`SIGNIFICAND_BITS`
            (``"float32"``, ``"bfloat16"``...): one unit of it, relative (``2^(1 - p)``), is
            the smallest envelope.
    """

    margin: float = MARGIN
    dtype: str = "float32"


def ulp(values: Any, dtype: str) -> np.ndarray:
    """One unit in the last place of each of ``values`` in ``dtype`` (a key of
    :data:`SIGNIFICAND_BITS`): ``2^(floor(log2|x|) - p + 1)``, the smallest normal's for 0
    and subnormal values, ``nan`` for non-finite ones. float64 array of the input's shape.

    Raises:
        KeyError: an unknown dtype."""
    x = np.abs(np.asarray(values, np.float64))
    p, emin = SIGNIFICAND_BITS[dtype], MIN_EXPONENT[dtype]
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log2(np.where(x > 0, x, 1.0)))
    exponent = np.maximum(np.where(x > 0, exponent, emin), emin)
    out = np.ldexp(1.0, (exponent - p + 1).astype(np.int64))
    return np.where(np.isfinite(x), out, np.nan)


def exactly_in(values: Any, dtype: str) -> bool:
    """Whether every finite value of ``values`` is exactly a number of ``dtype``
    (bfloat16: a float32 whose low 16 bits are zero)."""
    x = np.asarray(values, np.float64)
    x = x[np.isfinite(x)]
    if dtype == "float64" or not x.size:
        return True
    as32 = x.astype(np.float32)
    if dtype == "float32":
        return bool(np.all(as32.astype(np.float64) == x))
    if not np.all(as32.astype(np.float64) == x):
        return False
    if dtype == "bfloat16":
        return bool(np.all((as32.view(np.uint32) & 0xFFFF) == 0))
    with np.errstate(over="ignore"):
        return bool(np.all(x.astype(np.float16).astype(np.float64) == x))


def value_dtype(values: Sequence[Any]) -> str:
    """The coarsest format of :data:`FORMATS_COARSE_FIRST` that holds every finite value of
    ``values`` exactly and in which some value needs more than 4 significant bits (so a
    sequence of round numbers, 0.5 or 4.0, is no evidence of a low precision); ``float64``
    for an empty one. A loss computed in bfloat16 reads ``bfloat16``, one in float32
    ``float32``."""
    x = np.asarray([float(v) for v in values], np.float64)
    x = x[np.isfinite(x)]
    if not x.size:
        return "float64"
    mantissa, _ = np.frexp(np.abs(x))
    detailed = bool(np.any((mantissa * 16) % 1 != 0))  # a value with more than 4 significant bits
    for dtype in FORMATS_COARSE_FIRST:
        if dtype in ("bfloat16", "float16") and not detailed:
            continue
        if exactly_in(x, dtype):
            return dtype
    return "float64"


def resolution(sequences: Sequence[Sequence[Any]]) -> np.ndarray:
    """Per step, the spacing of the compared values themselves: the largest, over
    ``sequences`` (the standalone losses and each rank's distributed ones, one length), of
    one unit in the last place of the value in its sequence's :func:`value_dtype`. A
    difference smaller than that cannot be told from rounding by any measurement (a bf16
    loss near 4.2: 1/32). ``nan`` steps (a non-finite value) count 0. float64 ``(steps,)``.

    Raises:
        ValueError: no sequence, or sequences of different lengths."""
    arrays = [np.asarray([float(v) for v in s], np.float64) for s in sequences]
    if not arrays or len({a.size for a in arrays}) != 1:
        raise ValueError("resolution needs one or more sequences of one length")
    spacing = [np.nan_to_num(ulp(a, value_dtype(a)), nan=0.0) for a in arrays]
    return np.max(np.stack(spacing), axis=0)


def loss_envelope(standalone: Sequence[Any], twin: Sequence[Any], floor: Optional[Sequence[float]] = None
                  ) -> np.ndarray:
    """The envelope of each step, loss units: the largest ``|twin - standalone|`` up to that
    step (running maximum), at least ``floor`` (:func:`resolution`; 0 without it). A step
    where the twin is not finite and the standalone copy is (or the reverse) gives ``inf``
    from there on: rounding alone diverged. float64 ``(steps,)``.

    Raises:
        ValueError: sequences of different lengths."""
    s = np.asarray([float(v) for v in standalone], np.float64)
    t = np.asarray([float(v) for v in twin], np.float64)
    if s.shape != t.shape:
        raise ValueError(f"standalone ({s.size} steps) and twin ({t.size} steps) must be of one length")
    both = np.isfinite(s) & np.isfinite(t)
    same = (s == t) | (np.isnan(s) & np.isnan(t))
    gap = np.where(both, np.abs(t - s), np.where(same, 0.0, np.inf))
    out = np.maximum.accumulate(gap) if gap.size else gap
    if floor is not None:
        out = np.maximum(out, np.asarray(floor, np.float64))
    return out


def judge_losses(standalone: Sequence[Any], distributed: Sequence[Any], envelope: Sequence[float],
                 margin: float = MARGIN) -> Dict[str, Any]:
    """The copies' loss difference ``d = distributed - standalone`` against ``margin`` x the
    envelope, step by step (module docstring).

    Returns ``{"within": bool, "first_beyond_step": first step with |d| > margin x E, or
    None, "beyond_steps": how many, "ratio": max |d| / E over the steps (0 where both are 0,
    inf where E is 0 and d is not), "band": max over the steps of margin x E / (1 + |standalone|)
    (the tolerance this precision holds: ``rtol = atol`` of that size passes every step whose
    difference stays within the envelope, ``numpy.isclose``'s bound), "sign": "low" | "high" | None, "sign_share": the share of the
    beyond steps with that sign}``. A step where one copy is finite and the other is not is
    beyond; equal non-finite values are within. ``sign`` is said only from steps beyond the
    envelope and only where one sign holds on :data:`SIGN_SHARE` of them (rounding has a sign
    at every step, but no cause for it).

    Raises:
        ValueError: sequences of different lengths, or a margin below 1."""
    s = np.asarray([float(v) for v in standalone], np.float64)
    d_seq = np.asarray([float(v) for v in distributed], np.float64)
    e = np.asarray(envelope, np.float64)
    if not (s.shape == d_seq.shape == e.shape):
        raise ValueError("standalone, distributed and envelope must be of one length")
    if not margin >= 1.0:
        raise ValueError(f"margin={margin}: must be >= 1 (a multiple of the envelope)")
    finite = np.isfinite(s) & np.isfinite(d_seq)
    same = (s == d_seq) | (np.isnan(s) & np.isnan(d_seq))
    with np.errstate(invalid="ignore"):
        d = np.where(finite, d_seq - s, 0.0)
        beyond = np.where(finite, np.abs(d) > margin * e, ~same)
    steps = np.flatnonzero(beyond)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(np.abs(d) > 0, np.abs(d) / e, 0.0)
    ratios = np.where(finite, ratios, np.where(same, 0.0, np.inf))
    band = np.where(finite & np.isfinite(e), margin * e / (1.0 + np.abs(s)), np.nan)
    sign, share = direction(d[beyond & finite])
    return {"within": not steps.size, "first_beyond_step": int(steps[0]) if steps.size else None,
            "beyond_steps": int(steps.size), "ratio": float(np.max(ratios)) if ratios.size else 0.0,
            "band": float(np.nanmax(band)) if np.any(np.isfinite(band)) else None,
            "sign": sign, "sign_share": share}


def direction(diffs: Sequence[float]) -> tuple:
    """``(sign, share)`` of signed differences: ``"low"`` (negative) or ``"high"`` where that
    sign holds on at least :data:`SIGN_SHARE` of the non-zero ones, else ``None``; ``share``
    the larger sign's share (``None`` without a non-zero difference)."""
    x = np.asarray(diffs, np.float64)
    x = x[np.isfinite(x) & (x != 0)]
    if not x.size:
        return None, None
    low = float(np.mean(x < 0))
    share = max(low, 1.0 - low)
    if share < SIGN_SHARE:
        return None, share
    return ("low" if low > 0.5 else "high"), share


def perturb(values: Any, dtype: str, signs: Any) -> np.ndarray:
    """``values + signs * ulp(values, dtype)``: each value moved by one unit in the last
    place of ``dtype`` (:func:`ulp`) in the direction of its sign (``+1`` or ``-1``, an array
    of the same shape), computed in float64 (float32 values for a ``dtype`` in :data:`NARROW`:
    in float32, the same numbers, :func:`_perturb_float32`); zeros stay zero (their unit is the smallest
    normal's, below any rounding a computation makes). The twin's initial weights: cast the
    result back to the parameter's dtype (a float32 master weight moves to its neighbour
    for ``dtype=float32``, by a bf16 unit for ``bfloat16``)."""
    x = np.asarray(values)
    if x.dtype == np.float32 and dtype in NARROW:
        return _perturb_float32(x, dtype, np.asarray(signs))
    x = x.astype(np.float64, copy=False)
    step = np.where(x != 0, ulp(x, dtype), 0.0)
    return x + np.asarray(signs, np.float64) * step


NARROW = ("float32", "bfloat16", "float16")  # dtypes whose unit is a float32's multiple: :func:`_perturb_float32`


def _perturb_float32(x: np.ndarray, dtype: str, signs: np.ndarray) -> np.ndarray:
    """:func:`perturb` of float32 ``values`` for ``dtype`` in :data:`NARROW`, computed in
    float32 and returned as float32: the same numbers as the float64 computation cast to
    float32, about 3.7x faster (0.09 s against 0.33 s per 4.7M values on one core; a twin of a
    42.6M-parameter model is nudged in about 1 s instead of 3.7 s). Exact: the unit is a power of
    two at least a float32's unit (at most 24 significand bits), so ``x ± unit`` is a float32 (or
    overflows to infinity, as the float64 result's cast does); the exponent is ``frexp``'s,
    exact where ``floor(log2(x))`` is too (every float32). Non-finite values give NaN, as
    :func:`ulp` makes them; zeros stay zero."""
    step = _steps_float32(x, dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        out = x + signs.astype(np.float32) * step
    out[~np.isfinite(x)] = np.nan
    return out


def _steps_float32(x: np.ndarray, dtype: str) -> np.ndarray:
    """Each float32 value's unit in the last place of ``dtype`` (in :data:`NARROW`), float32,
    zero at zeros (:func:`_perturb_float32`)."""
    p, emin = SIGNIFICAND_BITS[dtype], MIN_EXPONENT[dtype]
    _, exponent = np.frexp(x)
    exponent -= 1
    np.maximum(exponent, emin, out=exponent)
    step = np.ldexp(np.float32(1.0), exponent - (p - 1)).astype(np.float32, copy=False)
    step[x == 0] = 0.0
    return step


def nudged(values: Any, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """``perturb(values, dtype, twin_signs(values.shape, rng))``: the same numbers, from the same
    draws of ``rng``. For float32 values and ``dtype`` in :data:`NARROW` no array of signs is
    made: each value's step is negated where its draw is below one half (``-1 x step`` is
    ``-step`` exactly), two passes fewer over the values (0.6 s of the 1.7 s a rank spent nudging
    a 100.9M-parameter twin here, on the path to its first collective)."""
    x = np.asarray(values)
    if not (x.dtype == np.float32 and dtype in NARROW):
        return perturb(x, dtype, twin_signs(x.shape, rng))
    draws = rng.random(x.shape)
    step = _steps_float32(x, dtype)
    np.negative(step, out=step, where=draws < 0.5)
    with np.errstate(invalid="ignore", over="ignore"):
        out = x + step
    out[~np.isfinite(x)] = np.nan
    return out


def twin_signs(shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """Random signs (+1 or -1, float64, ``shape``) from ``rng`` (``numpy.random.default_rng``
    of the twin's seed, drawn parameter by parameter in name order)."""
    return np.where(rng.random(tuple(shape)) < 0.5, -1.0, 1.0)


def twin_unlike(probes: Dict[int, Optional[str]], twin_rank: Optional[int]) -> Optional[str]:
    """Why a twin trained on another rank than the standalone copy does not measure the standalone
    copy's rounding, or ``None``: ``probes`` holds, by rank, the standalone model's loss on the
    first step's rows from its initial weights (``float.hex``, forward only: the same code, weights
    and data on every rank, so bit for bit the same number, ``sweep.train.torch_rank.probe_loss``);
    where rank 0's (the standalone copy's) and the twin's rank's differ, that rank computes the model
    otherwise (a forward that reads its rank), and the twin's losses would measure that, not rounding.
    ``None`` where either probe is missing or the twin trained on rank 0."""
    if twin_rank is None or twin_rank == 0 or probes.get(0) is None or probes.get(twin_rank) is None:
        return None
    if probes[0] == probes[twin_rank]:
        return None
    ours, theirs = float.fromhex(probes[0]), float.fromhex(probes[twin_rank])
    return (f"the twin trained on rank {twin_rank}, where the standalone model's first loss is {theirs:.9g} against "
            f"rank 0's {ours:.9g} (its initial weights, forward only): the model computes otherwise on that rank "
            "(a forward that reads its rank?), so its twin would not measure rounding; order=separate trains both "
            "in one process of their own")


def within(found: Optional[Dict[str, Any]]) -> bool:
    """Whether an envelope record (``JobRecord.envelope``) was measured and the losses stay
    within it at every step (``loss.within``); ``False`` without a measured envelope."""
    return bool(found and found.get("measured") and (found.get("loss") or {}).get("within"))


def hold_text(band: Optional[float]) -> str:
    """``rtol = atol = 3e-04`` rounded up to one significant digit, the tolerance that
    holds this precision (:func:`judge_losses`'s ``band``); empty without one."""
    if band is None or not math.isfinite(band) or band <= 0:
        return ""
    exponent = math.floor(math.log10(band))
    lead = math.ceil(band / 10 ** exponent)
    if lead == 10:
        lead, exponent = 1, exponent + 1
    return f"rtol = atol = {lead}e{exponent:+03d}"


def measure(standalone: Sequence[Any], distributed: Sequence[Any], compared: Sequence[Sequence[Any]],
            twin: Optional[Dict[str, Any]], margin: float = MARGIN, source: str = "twin") -> Dict[str, Any]:
    """A job's envelope record (``JobRecord.envelope``), from its losses and its twin's.

    Args:
        standalone, distributed: the standalone losses and the judged distributed ones (the
            mean over the ranks on sharded data), one length.
        compared: every sequence whose values are compared (the standalone one and each
            rank's distributed one): their :func:`resolution` is the envelope's floor.
        twin: the twin's record (``sweep.train.twin.record``: ``losses``, ``dtype``, ``seed``,
            ``perturbation``...), or ``None`` where none was trained (then not measured).
        margin: ``compare.envelope_margin``.
        source: where the twin's losses came from (``twin``: this job trained it; ``cache``;
            ``file``: a golden file).

    Returns:
        ``{"measured": True, "source", "dtype", "margin", "twin": the record, "envelope":
        [E_t per step, loss units], "resolution": the largest floor, "loss":
        :func:`judge_losses`}``, or ``{"measured": False, "why"}`` (no twin: the caller says
        why; or the twin's steps are not the job's)."""
    losses = list((twin or {}).get("losses") or [])
    if not twin or len(losses) != len(standalone):
        why = "no twin of the standalone copy trained" if not twin else \
            f"the twin trained {len(losses)} steps, the job {len(standalone)}"
        return {"measured": False, "why": why}
    floor = resolution(list(compared))
    envelope = loss_envelope(standalone, losses, floor)
    return {"measured": True, "source": source, "dtype": twin.get("dtype"), "margin": float(margin),
            "twin": twin, "envelope": [float(v) for v in envelope], "resolution": float(np.max(floor)),
            "loss": judge_losses(standalone, distributed, envelope, margin)}


def measure_repeats(standalone: Sequence[Any], distributed: Sequence[Any], compared: Sequence[Sequence[Any]],
                    runs: Sequence[Dict[str, Any]], margin: float = MARGIN,
                    printed: Optional[float] = None) -> Dict[str, Any]:
    """An envelope from ``repeat=N`` where no twin can run (``runner=command``): per step, the
    largest difference between the first run and any repeat of any sequence they share
    (``runs``: ``sweep.run.repeats.run_sequences`` of each run, the first first), its running
    maximum, at least :func:`resolution` (and ``printed``, the resolution of losses read from
    rounded text). It measures how far launches of one config part (nondeterministic kernels,
    a rank's order of arrival), not what a unit of rounding does: a deterministic command's
    repeats agree, and its envelope is the values' resolution alone. Returns
    :func:`measure`'s record with ``"source": "repeats"``, ``"repeats": n``, or
    ``{"measured": False, "why"}`` with fewer than two runs."""
    if len(runs) < 2:
        return {"measured": False, "why": "fewer than two runs to compare (repeat=N, N >= 2)"}
    steps = len(standalone)
    spread = np.zeros(steps)
    first = runs[0]
    for run in runs[1:]:
        for key, seq in run.items():
            a, b = np.asarray(first.get(key, []), np.float64), np.asarray(seq, np.float64)
            if a.shape != (steps,) or b.shape != (steps,):
                continue
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            spread = np.maximum(spread, np.where(same, 0.0, np.nan_to_num(np.abs(a - b), nan=np.inf)))
    floor = resolution(list(compared))
    if printed:
        floor = np.maximum(floor, float(printed))
    env = np.maximum(np.maximum.accumulate(spread), floor)
    return {"measured": True, "source": "repeats", "repeats": len(runs), "dtype": None, "margin": float(margin),
            "twin": None, "envelope": [float(v) for v in env], "resolution": float(np.max(floor)),
            "loss": judge_losses(standalone, distributed, env, margin)}
