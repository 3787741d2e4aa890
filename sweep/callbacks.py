"""Hydra callback: the summary table at the end of a multirun.

Hydra turns callback exceptions into warnings, so this never decides the exit
status; it only renders what the jobs wrote (``sweep.summary.write_report``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SummaryCallback(Callback):
    """Print the table and write ``summary.{md,csv,json}`` into ``hydra.sweep.dir``."""

    def __init__(self, tablefmt: str = "simple") -> None:
        self.tablefmt = tablefmt

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from sweep.summary import write_report

        sweep_dir = Path(config.hydra.sweep.dir)
        print("\n" + write_report(sweep_dir, self.tablefmt), flush=True)
        print(f"\nsummary: {sweep_dir / 'summary.md'} (re-render: python -m sweep.summary {sweep_dir})", flush=True)
