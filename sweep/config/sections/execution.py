"""The ``execution`` section: how a job's ranks are run and supervised (time limits,
threads, the fast path's switches)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from sweep.config.roles import LAUNCH, affects
from sweep.config.sections._checks import _positive
from sweep.errors import ConfigError


@dataclass
class ExecutionConfig:
    """How a job's ranks are run and supervised (not how they compute).

    ``timeout_s``: wall-clock limit of the whole launch in seconds; ``None`` means
    ``base_timeout_s + per_step_s * steps * world_size``. ``reuse_processes`` and
    ``reuse_baselines`` switch the fast path (``sweep.run.pool``,
    ``sweep.run.baseline``; the same losses, bit for bit on CPU).
    """

    timeout_s: Optional[float] = affects(
        default=None,
        doc="Wall-clock limit of the job's launch in seconds; ``null``: "
            "``base_timeout_s + per_step_s * steps * world_size``.")
    base_timeout_s: float = affects(default=180.0, doc="The fixed part of the default time limit (s, > 0).")
    per_step_s: float = affects(default=0.1,
                                doc="The default time limit's seconds per step and rank (> 0).")
    omp_num_threads: int = affects(
        LAUNCH, default=1,
        doc="``OMP_NUM_THREADS`` of every rank (>= 1); MindSpore on CPU: its kernels' thread count too "
            "(its own pool does not read ``OMP_NUM_THREADS``).")
    reuse_processes: bool = affects(
        default=True,
        doc="Jobs of one framework, world size and device share one distributed launch (``sweep.run.pool``): "
            "a multirun's jobs; a single run's job and its tracing rerun (under its dir's ``.pools/``). "
            "``false``: every launch is its own (``framework.launcher``).")
    reuse_baselines: bool = affects(
        default=True,
        doc="Multirun: each distinct standalone sequence is computed once and reused (``sweep.run.baseline``; "
            "never with ``weights.transfer=shared``).")

    @staticmethod
    def check(execution: Any) -> None:
        """Raises: ConfigError: a time that is not > 0, or fewer than 1 thread."""
        _positive("execution", execution, "timeout_s", allow_none=True)
        _positive("execution", execution, "base_timeout_s", "per_step_s")
        if execution.omp_num_threads < 1:
            raise ConfigError(f"execution.omp_num_threads={execution.omp_num_threads}: must be >= 1")
