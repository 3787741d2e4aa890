"""The ``baseline`` section: what the distributed copy is compared with (the standalone
copy's precision, :class:`BaselinePrecision`, its framework, or a golden file)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, List, Optional

from sweep.config.roles import BASELINE, affects


class BaselinePrecision(str, enum.Enum):
    """The precision the standalone copy computes in (:class:`BaselineConfig`)."""

    float32 = "float32"
    policy = "policy"


@dataclass
class BaselineConfig:
    """What the distributed copy is compared with: the standalone copy's precision.

    ``precision=float32`` (the default, the report's setup): the standalone copy is a
    plain module, no mixed precision: it computes in the dtype its parameters were created
    in (``model.init_dtype``, float32 unless set), so a job whose ``mp_policy`` sets
    ``param_dtype`` differs from it by the precision itself.

    ``precision=policy``: the standalone copy computes forward and backward in the
    policy's ``param_dtype``, keeps ``model.init_dtype`` master weights and optimizer
    state, and applies ``output_dtype``, ``cast_forward_inputs``, ``reduce_dtype`` and
    the ``mp_policy.overrides`` as ``fully_shard`` does: it is itself ``fully_shard``-ed,
    with the same policy, wrapping (``wrap``) and ``reshard_after_forward``, on a mesh of
    one rank (``sweep.engines.torch_fsdp2.StandaloneFSDP2``, where the docstring says why
    that is "the policy on one device" and how ``reduce_dtype`` applies on one rank).
    Then the fields of role ``policy_baseline`` (the policy, ``wrap``,
    ``reshard_after_forward``) affect the baseline too (:func:`baseline_fields`). torch
    only; engines that declare it (``Engine.policy_baseline``: ``torch_fsdp2``); refused
    before launch elsewhere, one line naming why.

    ``framework`` (framework against framework): ``null`` or the job's own framework (the
    same: :func:`sweep.config.schema.normalize` writes ``null``) trains the standalone copy
    in the job's framework; the other framework's name trains it there instead, in a
    process of its own after the ranks (``python -m sweep.train JOB_DIR --phase
    standalone`` under that framework's preset, :func:`sweep.config.presets.with_framework`),
    from the distributed copy's initial weights (rank 0 writes them,
    ``ranks/initial_weights.npz``; converted by name and layout, ``sweep.models.convert``)
    and the same data. Refused before launch (``sweep.run.checks``) where the model or a
    setting has no counterpart in that framework, and with ``baseline.file``,
    ``precision=policy``, ``weights.transfer=shared`` or ``runner=command``.
    """

    precision: BaselinePrecision = affects(
        BASELINE, default=BaselinePrecision.float32,
        doc="``float32``: a plain standalone copy, no mixed precision; ``policy``: the standalone copy runs "
            "``mp_policy`` (``fully_shard`` on a one-rank mesh; torch, ``torch_fsdp2`` only).")
    framework: Optional[str] = affects(
        BASELINE, default=None,
        doc="The framework the standalone copy trains in: ``null`` (the default) the job's own; ``torch`` or "
            "``mindspore`` the other one, in a process of its own after the ranks, from the distributed copy's "
            "initial weights converted by name and layout (``sweep.models.convert``) and the same data, for a "
            "model preset both frameworks have (``mlp``, ``mlp_norm``); refused before launch, one line naming "
            "what has no counterpart. The first differing tensor is not traced across frameworks.")
    file: Optional[str] = affects(
        BASELINE, default=None,
        doc="A golden file (``python -m sweep.report DIR --export-golden FILE``): its standalone losses are the "
            "baseline instead of running the standalone copy, for built-in and command jobs alike; refused when "
            "its steps or config keys differ from the job's (``sweep.report.golden``, ``sweep.run.baseline.from_file``).")
    ignore_keys: List[str] = affects(
        default_factory=lambda: ["device", "framework", "baseline", "execution", "runner.parse", "runner.cwd"],
        doc="Config keys (and sections) a golden file's may differ in from the job's: by default where and how "
            "it ran, so a run on one machine is compared with a golden run from another. A command job's "
            "``runner.command`` and ``runner.baseline_command`` as written (before interpolation) must match "
            "the golden file's unless listed here: a flag written into the command is part of the run.")


def foreign_framework(cfg: Any) -> Optional[str]:
    """The framework the standalone copy trains in where it is not the job's
    (``baseline.framework`` set and other than ``framework.name``), else ``None``.
    ``cfg``: a job config (``DictConfig`` or plain dict); a config without the field gives
    ``None``."""
    baseline = cfg.get("baseline") or {}
    name = baseline.get("framework") if hasattr(baseline, "get") else None
    job = (cfg.get("framework") or {}).get("name")
    return str(name) if name is not None and str(name) != str(job) else None
