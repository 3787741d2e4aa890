"""The ``compare`` section: the tolerance of the per-step comparison, and the tracing
rerun of a job whose copies differ."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from sweep.config.roles import VERDICT, affects
from sweep.errors import ConfigError


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
    trace_after: int = affects(
        default=3,
        doc="A job whose copies differ is rerun up to this many steps past its first differing step with "
            "every gradient and weight recorded, to name the first tensor that differs "
            "(``sweep.analysis.trace``); 0: no tracing rerun.")
    onset_steps: int = affects(
        default=24,
        doc="The tracing rerun also records the weights this many steps past the first differing step, to "
            "classify the onset from the update differences (``sweep.analysis.trace.update_onset``: a period "
            "up to a third of it shows); 0: the onset from the losses only. Memory: two copies' weights per "
            "step, in the rank's host memory.")
    module_trace: bool = affects(
        default=True,
        doc="The tracing rerun also records every module's forward input and output and each output's "
            "gradient (summaries, ``sweep.train.torch_observe``) to name the first module that differs "
            "(``sweep.analysis.modules``); false: tensors only.")
    trace_until: Optional[int] = affects(
        default=None,
        doc="Set by the job in its tracing rerun only: record gradients and weights up to this step.")
    onset_until: Optional[int] = affects(
        default=None, doc="Set by the job in its tracing rerun only: record weights up to this step.")

    @staticmethod
    def check(compare: Any) -> None:
        """Raises: ConfigError: a tolerance that is negative or not finite (NaN would fail every step)."""
        for key in ("trace_after", "onset_steps"):
            if compare[key] < 0:
                raise ConfigError(f"compare.{key}={compare[key]}: must be >= 0 steps")
        for key in ("rtol", "atol", "noise_floor"):
            if not math.isfinite(compare[key]) or compare[key] < 0:
                raise ConfigError(f"compare.{key}={compare[key]}: must be a finite number >= 0")
