"""Baseline reuse: the standalone loss sequence of a sweep, computed once per distinct baseline.

The standalone copy's losses depend on the config fields with the ``baseline`` role
(``sweep.config.schema``): not on the mesh, the engine, ``zero_grad`` or ``compare``,
and, with the default ``baseline.precision=float32``, not on ``mp_policy``, ``wrap`` or
``reshard_after_forward`` either. With ``baseline.precision=policy`` the standalone copy
runs the policy and the wrapping (``fully_shard`` on one rank), so those fields (role
``policy_baseline``) join the key: a float32 baseline is never reused for a policy one,
nor one policy's for another's. :func:`key_fields` takes exactly
``sweep.config.schema.baseline_fields``, plus ``world_size`` when ``data.split=sharded``
(the global batch grows with it). A job
whose standalone copy shares storage with the distributed one
(``weights.transfer=shared``) is not cached: there the baseline is part of what is
tested (training one copy moves the other).

Entries live in ``SWEEP_DIR/.baselines/<key>.json``: ``{"key_fields", "standalone",
"job_dir", "dtypes_observed"}``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from sweep.config.schema import baseline_fields, select
from sweep.io import read_json, write_json
from sweep.layout import SweepDir


def key_fields(config: Dict[str, Any], world: int) -> Optional[Dict[str, Any]]:
    """The fields the standalone sequence depends on, or ``None`` when it must not be
    reused (``weights.transfer=shared``). ``config`` is the resolved job config (plain dict)."""
    if config["weights"]["transfer"] == "shared":
        return None
    fields = select(config, baseline_fields(config))
    fields["world_size"] = world if config["data"]["split"] == "sharded" else None
    return fields


def key(fields: Dict[str, Any]) -> str:
    """SHA-256 (hex, 16 chars) of the canonical JSON of ``fields``."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def _path(sweep_dir: Path, fields: Dict[str, Any]) -> Path:
    return SweepDir(sweep_dir).baselines / f"{key(fields)}.json"


def lookup(sweep_dir: Path, fields: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The cached entry for ``fields``, or ``None``."""
    try:
        entry = read_json(_path(sweep_dir, fields))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict):
        return None
    return entry if entry.get("key_fields") == json.loads(json.dumps(fields)) else None


def store(sweep_dir: Path, fields: Dict[str, Any], standalone: List[Any], job_dir: Path,
          dtypes_observed: Optional[Dict[str, Any]] = None) -> None:
    """Cache ``standalone`` (the loss list as in ``result.json``) for ``fields``, with the
    dtypes the standalone copy ran (``dtypes_observed``: ``RankResult.dtypes_observed_standalone``)."""
    write_json(_path(sweep_dir, fields), {"key_fields": fields, "standalone": standalone, "job_dir": str(job_dir),
                                          "dtypes_observed": dict(dtypes_observed or {})})
