"""Job dirs for report tests, written through the same record type and layout as a real
job (``sweep.records.JobRecord``, ``sweep.layout``), so writer and reader cannot drift apart."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import yaml

from sweep.layout import JobDir
from sweep.records import JobRecord


def make_record(
    status: str, overrides: List[str], comparison: Optional[Dict[str, Any]] = None, reason: Optional[str] = None,
    losses: Optional[Dict[str, list]] = None, **extra: Any,
) -> JobRecord:
    """A job record; a judged one without ``losses`` gets flat sequences of the
    comparison's ``n_steps`` whose difference is its ``mean_signed_diff``."""
    if status in ("ok", "fail") and losses is None:
        n = comparison.get("n_steps", 10)
        diff = comparison.get("mean_signed_diff") or 0.0
        losses = {"standalone": [1.0] * n, "distributed": [1.0 + diff] * n}
    if comparison is not None:
        comparison = {"passed": status == "ok", "rtol": 1e-4, "atol": 1e-4, **comparison}
    return JobRecord(status=status, reason=reason, overrides=list(overrides), comparison=comparison,
                     losses=losses, timings_s={"wall": 1.5}, **extra)


def write_job(sweep_dir, num: int, overrides: List[str], record: Optional[JobRecord] = None) -> JobDir:
    """A job dir as Hydra and ``sweep.run.job`` write it: ``.hydra/overrides.yaml`` and, when
    ``record`` is given, ``result.json``."""
    job = JobDir(sweep_dir / str(num))
    job.overrides.parent.mkdir(parents=True)
    job.overrides.write_text(yaml.safe_dump(overrides))
    if record is not None:
        record.write(job.result)
    return job
