"""A traced copy's trace in a file, for a comparison another process makes: with
``baseline.framework`` the two copies train in two processes of two frameworks, so neither
holds both traces. Each writes its own (``ranks/trace_<who>.pkl``: its tensor trace, the
steps traced, its module trace, its framework), and the job compares them under one name map
(``sweep.run.across``, which reads them: PyTorch's names, ``sweep.models.convert.canonical_name``). Only the
tracing rerun writes them (``compare.trace_until`` set), only where one copy traced here."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Dict, Optional

from sweep.layout import JobDir


def save(job_dir: Path | str, who: str, framework: str, seen: Dict[str, Dict[str, Any]]) -> Optional[Path]:
    """Write the trace of the one copy this process traced (``seen``: ``{copy: its
    observers}``, a ``trace`` and optionally ``modules`` observer each) to
    ``ranks/trace_<who>.pkl`` (``who``: ``rank_<r>`` or ``standalone``). Returns the path, or
    ``None`` where this process traced both copies or none (nothing to hand over)."""
    traced = {name: obs for name, obs in seen.items() if "trace" in obs}
    if len(traced) != 1:
        return None
    copy, obs = next(iter(traced.items()))
    path = JobDir(job_dir).trace_file(who)
    path.parent.mkdir(parents=True, exist_ok=True)
    modules = obs.get("modules")
    data = {"framework": framework, "copy": copy, "tensors": obs["trace"].entries, "last": obs["trace"].last,
            "modules": modules.steps if modules is not None else None}
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        pickle.dump(data, handle, protocol=pickle.HIGHEST_PROTOCOL)
    tmp.replace(path)
    return path


def save_twin(job_dir: Path | str, framework: str, twin_seen: Dict[str, Any]) -> Optional[Path]:
    """Write the standalone copy's twin's trace (``twin_seen``: its ``trace`` and optionally
    ``modules`` observer, ``sweep.train.twin``) to ``ranks/trace_twin.pkl``, so the comparison
    in the other process holds each tensor against the twin's envelope as a one-process job
    does. Returns the path, or ``None`` where the twin did not trace here."""
    if "trace" not in twin_seen:
        return None
    return save(job_dir, "twin", framework, {"twin": twin_seen})
