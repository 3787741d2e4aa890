"""Hydra callback: the sweep report at the end of a multirun.

Hydra turns callback exceptions into warnings, so this never decides the exit
status; it only renders what the jobs wrote (``sweep.summary.write_report``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SummaryCallback(Callback):
    """Print the verdict and the tables (each cut after ``max_rows`` rows, ``None``: all)
    and write ``summary.{md,csv,json}`` and ``plots/`` into ``hydra.sweep.dir``."""

    def __init__(self, tablefmt: str = "simple", max_rows: Optional[int] = 40) -> None:
        self.tablefmt = tablefmt
        self.max_rows = max_rows

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from sweep.summary import write_report

        sweep_dir = Path(config.hydra.sweep.dir)
        print("\n" + write_report(sweep_dir, self.tablefmt, self.max_rows), flush=True)
        print(f"\nsummary: {sweep_dir / 'summary.md'} (re-render: python -m sweep.summary {sweep_dir})", flush=True)
