"""The ``compare`` section: the tolerance of the per-step comparison, and the tracing
rerun of a job whose copies differ."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from sweep.config.roles import VERDICT, affects
from sweep.errors import ConfigError

TWIN_ROWS_FROM = 1 << 20  # compare.twin_rows_from's default (elements)


@dataclass
class CompareConfig:
    """Tolerance of the per-step comparison, ``numpy.isclose`` semantics:
    ``|distributed - standalone| <= atol + rtol * |standalone|``."""

    rtol: float = affects(VERDICT, default=1e-4, doc="Relative tolerance (finite, >= 0).")
    atol: float = affects(VERDICT, default=1e-4, doc="Absolute tolerance (finite, >= 0).")
    noise_floor: float = affects(
        VERDICT, default=0.0,
        doc="Differences up to this size (loss units) do not count as the two runs parting "
            "(``first_diff_step``); 0.0: any difference counts (deterministic CPU runs are exact).")
    envelope: bool = affects(
        VERDICT, default=True,
        doc="Measure each configuration's rounding envelope: a twin of the standalone copy trains from initial "
            "weights nudged by one unit in the last place of the lowest precision either copy computes in "
            "(``sweep.train.twin``), once per distinct baseline (cached with it); the gap between the two, step by "
            "step, is what float rounding alone does (``sweep.analysis.envelope``). Every sentence that calls a "
            "difference rounding rests on it; false: none does.")
    envelope_margin: float = affects(
        VERDICT, default=4.0,
        doc="A difference is float rounding where it stays within this many times its envelope at every step, "
            "a cause from the first step it leaves it (>= 1; the twin is one draw of rounding).")
    trace_after: int = affects(
        default=3,
        doc="A job whose copies differ is rerun up to this many steps past its first differing step (past "
            "the losses' first step beyond their rounding envelope, where that comes later) with every "
            "gradient and weight recorded, to name the first tensor that differs "
            "(``sweep.analysis.trace``); 0: no tracing rerun.")
    onset_steps: int = affects(
        default=24,
        doc="The tracing rerun also records the weights this many steps past the first differing step, to "
            "classify the onset from the update differences (``sweep.analysis.trace.update_onset``: a period "
            "up to a third of it shows); 0: the onset from the losses only. Cost: one more traced step "
            "each (``compare.trace_capture``: a spooled step on disk, staged; two copies' weights in memory, full).")
    module_trace: bool = affects(
        default=True,
        doc="The tracing rerun also records every module's forward input and output and each output's "
            "gradient (summaries, ``sweep.train.torch_observe``) to name the first module that differs "
            "(``sweep.analysis.modules``); false: tensors only.")
    trace_capture: str = affects(
        default="staged",
        doc="How the tracing rerun holds its evidence (``sweep.train.trace_book``). ``staged``: each traced "
            "tensor's digest and small statistics are streamed to ``trace/ranks/``, the copy that trains first "
            "streams its tensors to a scratch spool that the other reads back step by step, only the pair "
            "statistics the rules read are kept (the standalone copy's twin's too: its rounding envelope), and the "
            "decisive tensors (the first that differs, the first beyond its rounding envelope) are captured whole: "
            "memory and trace files grow with tensors and steps, not with the parameters. ``full``: every traced "
            "tensor of every copy held in memory to the end (the same findings; memory: the copies' weights per "
            "traced step). A job whose standalone copy trains in another framework (``baseline.framework``) hands "
            "each copy's trace over in a file, held whole (``sweep.train.trace_files``).")
    twin_rows_from: int = affects(
        default=TWIN_ROWS_FROM,
        doc="In the tracing rerun of an FSDP2 job (``trace_capture=staged``) the twin trains whole on every rank, "
            "and each rank compares only the rows its distributed shard holds with the standalone copy's, merged "
            "over the shard group (the whole tensors' figures, bit for bit), where the parameters FSDP2 shards on "
            "dim 0 hold at least this many elements; fewer: every rank compares the whole twin (a merge costs a "
            "small all-gather per kind and traced step, more than comparing a small model whole). Sets cost only.")
    trace_until: Optional[int] = affects(
        default=None,
        doc="Set by the job in its tracing rerun only: record gradients and weights up to this step.")
    onset_until: Optional[int] = affects(
        default=None, doc="Set by the job in its tracing rerun only: record weights up to this step.")
    grads_read: bool = affects(
        default=False,
        doc="Set by the job in its tracing rerun only (torch): trace the gradients as the optimizer read them, "
            "after the engine's ``optimizer_step``, where its run saw the engine reduce gradients by hand in its "
            "clipping or optimizer step; else as the backward's reduction and the clipping left them.")

    @staticmethod
    def check(compare: Any) -> None:
        """Raises: ConfigError: a tolerance that is negative or not finite (NaN would fail every step)."""
        if compare.get("trace_capture", "staged") not in ("staged", "full"):
            raise ConfigError(f"compare.trace_capture={compare['trace_capture']!r}: allowed: staged, full")
        for key in ("trace_after", "onset_steps"):
            if compare[key] < 0:
                raise ConfigError(f"compare.{key}={compare[key]}: must be >= 0 steps")
        if compare.get("twin_rows_from", 0) < 0:
            raise ConfigError(f"compare.twin_rows_from={compare.twin_rows_from}: must be >= 0 elements")
        if not math.isfinite(compare.get("envelope_margin", 4.0)) or compare.get("envelope_margin", 4.0) < 1:
            raise ConfigError(f"compare.envelope_margin={compare.envelope_margin}: must be a finite multiple >= 1 "
                              "of the envelope")
        for key in ("rtol", "atol", "noise_floor"):
            if not math.isfinite(compare[key]) or compare[key] < 0:
                raise ConfigError(f"compare.{key}={compare[key]}: must be a finite number >= 0")
