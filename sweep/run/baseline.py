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
"job_dir", "dtypes_observed"}``. The standalone copy's twin (``sweep.train.twin``: the
rounding envelope) is cached beside it under the same fields plus the dtype its weights were
nudged in (:func:`twin_fields`: a float32 baseline serves a bf16 job, whose twin is bf16's):
``{"key_fields", "twin", "job_dir"}``. A golden file (``baseline.file``, ``sweep.report.golden``) is a
baseline from outside the sweep: :func:`from_file` checks it against the job.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

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
          dtypes_observed: Optional[Dict[str, Any]] = None, lrs: Optional[List[float]] = None,
          buffers: Optional[Dict[str, Any]] = None, grad_norms: Optional[Dict[str, Any]] = None,
          decay: Optional[Dict[str, float]] = None) -> None:
    """Cache ``standalone`` (the loss list as in ``result.json``) for ``fields``, with the
    dtypes the standalone copy ran (``dtypes_observed``: ``RankResult.dtypes_observed_standalone``)
    and the lr of each of its steps (``lrs``: ``RankResult.features["lr"]["standalone"]``, with a
    scheduler), and its buffers after the last step (``buffers``: ``RankResult.final["standalone"]``),
    so a job that takes the cached sequence still compares its lrs and its buffers, its gradient norms
    per step (``grad_norms``: ``RankResult.reductions["standalone"]["norms"]``) and the weight decay
    each parameter is stepped with (``decay``: ``RankResult.optimizer["decay"]["standalone"]``)."""
    write_json(_path(sweep_dir, fields), {"key_fields": fields, "standalone": standalone, "job_dir": str(job_dir),
                                          "dtypes_observed": dict(dtypes_observed or {}), "lrs": lrs,
                                          "buffers": buffers, "grad_norms": grad_norms, "decay": decay})


def twin_fields(fields: Dict[str, Any], config: Dict[str, Any]) -> Dict[str, Any]:
    """The cache fields of the standalone copy's twin: the baseline's ``fields``
    (:func:`key_fields`) plus ``twin``, the dtype its weights are nudged in
    (``sweep.analysis.rounding.twin_dtype``), and, where the policy sets a dtype (the twin
    computes under it: ``sweep.analysis.rounding.policy_lowers``), the fields of role
    ``policy_baseline`` (the policy and the wrapping)."""
    from sweep.analysis.rounding import policy_lowers, twin_dtype
    from sweep.config.roles import POLICY_BASELINE
    from sweep.config.schema import fields_with

    out = dict(fields, twin=twin_dtype(config))
    if policy_lowers(config):
        out["twin_policy"] = select(config, [p for p in fields_with(POLICY_BASELINE)])
    return out


def store_twin(sweep_dir: Path, fields: Dict[str, Any], twin: Dict[str, Any], job_dir: Path) -> None:
    """Cache the twin's record (``RankResult.twin``) for ``fields`` (:func:`twin_fields`)."""
    write_json(_path(sweep_dir, fields), {"key_fields": fields, "twin": twin, "job_dir": str(job_dir)})


def golden_keys(config: Dict[str, Any]) -> List[str]:
    """The config keys a golden file's config must match (:func:`from_file`): those the
    standalone sequence depends on (built-in jobs: ``baseline_fields``; ``runner=command``:
    ``runner.baseline_keys``), ``steps`` always, less ``baseline.ignore_keys`` (each key or
    section given: the defaults are where and how it ran) and the ``baseline`` section."""
    runner = config.get("runner") or {}
    keys = (list(runner.get("baseline_keys") or []) if runner.get("name") == "command"
            else baseline_fields(config))
    keys = list(dict.fromkeys(keys + ["steps"]))
    ignored = list((config.get("baseline") or {}).get("ignore_keys") or []) + ["baseline"]
    return [k for k in keys if not any(k == i or k.startswith(i + ".") for i in ignored)]


def _lookup(config: Dict[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


_ABSENT = "(absent)"


def from_file(config: Dict[str, Any], path: str, commands: Optional[Dict[str, Optional[str]]] = None
              ) -> Dict[str, Any]:
    """The standalone sequence of the golden file ``path`` (``sweep.report.golden``) for the job
    of ``config`` (resolved, plain), as a baseline entry (``{"standalone", "job_dir",
    "dtypes_observed", "source": "file", "file", "versions"}``).

    Raises:
        ConfigError: the file is missing or not a golden file; its steps are not the job's
            ``steps``; its config differs in a key of :func:`golden_keys` (each named with
            both values); for a command job (``commands``: ``sweep.run.command.command_templates``),
            the file's command or baseline command as written differs from the job's, unless
            ``baseline.ignore_keys`` lists ``runner.command`` / ``runner.baseline_command``.
    """
    from sweep.errors import ConfigError, RecordError
    from sweep.report import golden

    file = Path(path).expanduser().resolve()
    try:
        data = golden.read(file)
        standalone = golden.sequence(data, "standalone")
    except FileNotFoundError:
        raise ConfigError(f"baseline.file={path}: no such file") from None
    except RecordError as exc:
        raise ConfigError(f"baseline.file={path}: {exc}") from None
    if len(standalone) != int(config["steps"]):
        raise ConfigError(f"baseline.file={path}: holds {len(standalone)} steps, the job trains steps="
                          f"{config['steps']}: a golden file is compared step for step")
    differ = []
    for key in golden_keys(config):
        mine, theirs = _lookup(config, key), _lookup(data["config"], key)
        if json.dumps(mine, sort_keys=True, default=str) != json.dumps(theirs, sort_keys=True, default=str):
            differ.append(f"{key} (golden {theirs!r}, job {mine!r})")
    ignored = list((config.get("baseline") or {}).get("ignore_keys") or [])
    theirs_commands = data.get("commands") or {}
    for key, mine in (commands or {}).items():
        theirs = theirs_commands.get(key)
        if key in theirs_commands and theirs != mine and f"runner.{key}" not in ignored and "runner" not in ignored:
            differ.append(f"runner.{key} as written (golden {theirs!r}, job {mine!r})")
    if differ:
        raise ConfigError(f"baseline.file={path}: made with another config: {'; '.join(differ[:6])}"
                          + (f"; and {len(differ) - 6} more" if len(differ) > 6 else "")
                          + "; baseline.ignore_keys lists keys it may differ in")
    return {"standalone": standalone, "job_dir": data.get("source"), "dtypes_observed": {}, "source": "file",
            "file": str(file), "versions": data.get("versions") or {}, "twin": golden.twin(data)}


def golden_twin(twin: Optional[Dict[str, Any]], config: Dict[str, Any]
                 ) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """``(twin, note)``: a golden file's twin (``sweep.report.golden.twin``) where it was nudged in
    the dtype the job of ``config`` rounds in (``sweep.analysis.rounding.twin_dtype``); else
    ``None``, so the ranks train a twin of their own (a float32 job's twin measures a float32
    envelope, far finer than a bfloat16 job's rounding: a bf16 job judged against it parted
    beyond rounding from step 1), and the note that says so."""
    from sweep.analysis.rounding import twin_dtype

    mine = twin_dtype(config)
    if not twin or twin.get("dtype") in (None, mine):
        return twin, None
    return None, (f"the golden file's twin was nudged in {twin['dtype']}, this job rounds in {mine}: its rounding "
                  "envelope comes from a twin trained here")
