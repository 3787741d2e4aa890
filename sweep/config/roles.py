"""Field roles: what each schema field affects, declared on the field itself
(:func:`affects`, stored in the dataclass field's metadata).

``baseline`` (the standalone loss sequence depends on it), ``distributed`` (the
distributed sequence does), ``verdict`` (the judgement of the two), ``launch`` (jobs
that differ in it cannot share one distributed launch), ``policy_baseline`` (the
standalone sequence depends on it when ``baseline.precision=policy``: the policy and
the wrapping the standalone copy then runs; ``sweep.config.schema.baseline_fields``),
``workload`` (what both copies train: the model, the data, the loss, the optimizer and its
schedule, the steps and the seed; another level of it is another experiment, which can hide
a fault but never fix it: ``sweep.analysis.culprits.fixes``). A
field with none of them changes no number (time limits, reuse switches). The field
lists derived from the roles are ``sweep.config.schema``'s (``fields_with``).
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, Dict, Optional

BASELINE, DISTRIBUTED, VERDICT, LAUNCH = "baseline", "distributed", "verdict", "launch"
POLICY_BASELINE = "policy_baseline"  # baseline too, when baseline.precision=policy
WORKLOAD = "workload"  # what both copies train: a level of it hides a fault, never fixes it
ROLES = (BASELINE, DISTRIBUTED, VERDICT, LAUNCH, POLICY_BASELINE, WORKLOAD)
NUMERIC = (BASELINE, DISTRIBUTED, VERDICT)  # what a result depends on: must match on resume
ALL_NUMERIC = (BASELINE, DISTRIBUTED)  # both loss sequences depend on it


def affects(*roles: str, doc: Optional[str] = None, **kwargs: Any) -> Any:
    """A dataclass ``field`` whose metadata declares the roles of the field (see the
    module docstring); ``affects()`` with no role: the field changes no number.

    ``doc`` is the field's help text (its docstring), kept in the metadata as ``"doc"``
    with its whitespace folded to single spaces; the config reference
    (``docs/config-reference.md``, rendered by ``sweep.config.reference``) shows it, and
    ``tests/unit/test_config_reference.py`` fails when a field has none."""
    unknown = set(roles) - set(ROLES)
    if unknown:
        raise ValueError(f"unknown roles {sorted(unknown)}; allowed: {', '.join(ROLES)}")
    metadata: Dict[str, Any] = {"affects": frozenset(roles)}
    if doc is not None:
        metadata["doc"] = " ".join(doc.split())
    return field(metadata=metadata, **kwargs)
