"""Per-rank training: what every rank of a job runs, started by torchrun or msrun.

``python -m sweep.train JOB_DIR`` (or the file ``sweep/train/__main__.py`` for msrun)
reads ``JOB_DIR/job.yaml`` (the resolved config the job wrote), trains the standalone
copy and the distributed copy on this rank, and writes
``JOB_DIR/ranks/rank_<rank>.json``::

    {"rank": int, "world_size": int, "framework": str, "versions": {name: version},
     "standalone": [loss per step], "distributed": [loss per step],
     "timings_s": {"setup": s, "standalone": s, "distributed": s}}

Losses are Python floats of the framework's scalar loss (float32 values, exact).
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sweep.io import write_json

JOB_CONFIG = "job.yaml"
RANKS_DIR = "ranks"


def load_job(job_dir: Path | str) -> DictConfig:
    """The job's resolved config (plain values: enums are strings)."""
    return OmegaConf.load(Path(job_dir) / JOB_CONFIG)


def rank_result_path(job_dir: Path | str, rank: int) -> Path:
    return Path(job_dir) / RANKS_DIR / f"rank_{rank}.json"


def write_rank_result(job_dir: Path | str, rank: int, result: dict[str, Any]) -> None:
    result = dict(result, python=platform.python_version())
    write_json(rank_result_path(job_dir, rank), result)
