"""The ``framework`` section (``conf/framework/``): the framework the ranks run, how
they are started, and how a step takes gradients (:class:`GradApi`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Dict

from omegaconf import MISSING

from sweep.config.roles import BASELINE, DISTRIBUTED, LAUNCH, affects


class GradApi(str, enum.Enum):
    """How a step computes gradients: ``loss.backward()`` (torch; MindSpore only where
    its ``Tensor`` has ``backward``) or ``mindspore.value_and_grad`` (the report's)."""

    backward = "backward"
    value_and_grad = "value_and_grad"


@dataclass
class FrameworkConfig:
    """The framework the ranks run, and how they are started.

    ``impl`` is the dotted path of the framework's class (``sweep.frameworks``), which
    owns its launchers, checks and rank entry point. ``launcher`` starts a job's own
    ranks (torchrun, msrun); ``pool_launcher`` a multirun's shared launch
    (``sweep.run.pool``; torch's ``elastic_fork``: ``sweep.launch.fork_launch``).
    ``device_map`` maps ``device`` to the framework's own name for it (torch: the
    process-group backend, gloo on CPU; MindSpore: ``device_target``). ``env`` is added
    to every rank's environment (e.g. ``GLOG_v=3``); ``device_env[device]`` too, on that
    device only (MindSpore's ``MS_DEV_HOST_BLOCKING_RUN=1`` and a 1 s
    ``MS_RETRY_INTERVAL_LOWER``/``UPPER``, measured to help on CPU).
    """

    name: str = affects(BASELINE, DISTRIBUTED, LAUNCH, default=MISSING,
                        doc="The framework of the ranks, as the preset names it (``torch``, ``mindspore``).")
    impl: str = affects(BASELINE, DISTRIBUTED, LAUNCH, default=MISSING,
                        doc="Dotted path of the framework's class (a ``sweep.frameworks.base.Framework`` "
                            "subclass): its launchers, checks and rank entry point.")
    launcher: str = affects(default=MISSING,
                            doc="The launcher of a job's own launch (``torchrun``, ``msrun``).")
    pool_launcher: str = affects(LAUNCH, default=MISSING,
                                 doc="How a multirun's shared launch starts (``execution.reuse_processes``): "
                                     "torch ``elastic_fork`` (torchrun's engine forking the ranks from a "
                                     "process that imported torch once) or ``torchrun``; MindSpore ``msrun``.")
    grad_api: GradApi = affects(BASELINE, DISTRIBUTED, default=GradApi.backward,
                                doc="How a step takes gradients: ``backward`` (torch; MindSpore only where "
                                    "its ``Tensor`` has one) or ``value_and_grad`` (MindSpore, the report's).")
    device_map: Dict[str, str] = affects(BASELINE, DISTRIBUTED, LAUNCH, default_factory=dict,
                                         doc="``device`` -> the framework's name for it: torch's process-group "
                                             "backend (gloo on CPU, nccl, hccl), MindSpore's ``device_target``.")
    env: Dict[str, str] = affects(BASELINE, DISTRIBUTED, LAUNCH, default_factory=dict,
                                  doc="Added to every rank's environment (MindSpore: ``GLOG_v=3``).")
    device_env: Dict[str, Dict[str, str]] = affects(
        BASELINE, DISTRIBUTED, LAUNCH, default_factory=dict,
        doc="``device`` -> more environment for the ranks on that device only (MindSpore on CPU: "
            "``MS_DEV_HOST_BLOCKING_RUN=1``, ``MS_RETRY_INTERVAL_LOWER/UPPER=1``, measured to help there).")
