"""Baseline reuse: the standalone loss sequence of a sweep, computed once per distinct baseline.

The standalone copy's losses depend on fewer fields than the job: not on the mesh
(except through ``world_size`` when ``data.split=sharded``), the engine,
``reshard_after_forward``, ``mp_policy``, ``zero_grad`` or ``compare``. :func:`key`
hashes exactly the fields they do depend on. A job whose standalone copy shares
storage with the distributed one (``weights.copy=shared``) is not cached: there the
baseline is part of what is tested (training one copy moves the other).

Entries live in ``SWEEP_DIR/.baselines/<key>.json``: ``{"key_fields", "standalone",
"job_dir"}``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from sweep.io import read_json, write_json

CACHE_DIR = ".baselines"


def key_fields(config: Dict[str, Any], world: int) -> Optional[Dict[str, Any]]:
    """The fields the standalone sequence depends on, or ``None`` when it must not be
    reused (``weights.copy=shared``). ``config`` is the resolved job config (plain dict)."""
    if config["weights"]["copy"] == "shared":
        return None
    framework = config["framework"]
    return {
        "framework": {k: framework[k] for k in ("name", "grad_api", "env")},
        "device": config["device"],
        "deterministic": config["deterministic"],
        "seed": config["seed"],
        "steps": config["steps"],
        "model": config["model"],
        "data": config["data"],
        "optimizer": config["optimizer"],
        "weights": config["weights"],
        "world_size": world if config["data"]["split"] == "sharded" else None,
    }


def key(fields: Dict[str, Any]) -> str:
    """SHA-256 (hex, 16 chars) of the canonical JSON of ``fields``."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def lookup(sweep_dir: Path, fields: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The cached entry for ``fields``, or ``None``."""
    path = sweep_dir / CACHE_DIR / f"{key(fields)}.json"
    try:
        entry = read_json(path)
    except (OSError, ValueError):
        return None
    return entry if entry.get("key_fields") == json.loads(json.dumps(fields)) else None


def store(sweep_dir: Path, fields: Dict[str, Any], standalone: List[Any], job_dir: Path) -> None:
    """Cache ``standalone`` (the loss list as in ``result.json``) for ``fields``."""
    write_json(
        sweep_dir / CACHE_DIR / f"{key(fields)}.json",
        {"key_fields": fields, "standalone": standalone, "job_dir": str(job_dir)},
    )
