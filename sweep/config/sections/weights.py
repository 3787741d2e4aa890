"""The ``weights`` section: how the two copies start from the same weights
(:class:`WeightTransfer`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

from sweep.config.roles import ALL_NUMERIC, affects


class WeightTransfer(str, enum.Enum):
    """How the standalone copy gets the distributed copy's initial weights.

    ``shared``: the report's ``standalone_param.set_data(distributed_param)`` (torch:
    ``standalone_param.data = distributed_param.data``): both share storage, so
    training one moves the other. ``independent``: a copy of the values.
    ``checkpoint``: a round-trip through a checkpoint file.
    """

    shared = "shared"
    independent = "independent"
    checkpoint = "checkpoint"


@dataclass
class WeightsConfig:
    """How the two copies start from the same weights (see :class:`WeightTransfer`).
    ``copy`` is the old name of ``transfer`` (deprecated: it collides with
    ``DictConfig.copy``); :func:`normalize` moves it to ``transfer`` with a warning."""

    transfer: WeightTransfer = affects(*ALL_NUMERIC, default=WeightTransfer.independent,
                                       doc="How the standalone copy gets the distributed copy's initial "
                                           "weights: ``independent`` (a copy of the values), ``shared`` (shared "
                                           "storage: MindSpore ``set_data(param)`` as in the report, torch "
                                           "``.data =``), ``checkpoint`` (a checkpoint round trip). On torch "
                                           "the buffers no ``state_dict`` carries (``persistent=False``; every "
                                           "buffer with ``shared``) are copied too "
                                           "(``sweep.train.torch_rank.copy_unsaved_buffers``).")
    copy: Optional[WeightTransfer] = affects(default=None,
                                             doc="Deprecated: the old name of ``weights.transfer`` (moved "
                                                 "there with a warning).")
