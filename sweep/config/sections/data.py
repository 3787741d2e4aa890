"""The ``data`` section: the samples both copies train on, and how a step's rows reach
the ranks (:class:`DataSplit`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Dict, Optional

from sweep.config.roles import ALL_NUMERIC, WORKLOAD, affects
from sweep.errors import ConfigError


class DataSplit(str, enum.Enum):
    """``replicated``: every rank sees the same ``batch_size`` sample (the report).
    ``sharded``: rank ``r`` sees rows ``[r*b, (r+1)*b)`` of a global batch of
    ``b * world_size`` rows, on which the standalone copy trains; the distributed loss
    of a step is then the mean of the ranks' losses."""

    replicated = "replicated"
    sharded = "sharded"


@dataclass
class DataConfig:
    """The samples, from a factory named by ``_target_`` (``sweep.models.data``), the same on
    every rank. ``sweep.models.data.regression`` (the default, the report's): sample ``i`` is
    ``x = RandomState(seed_offset + i).randn(rows, in_size)`` and
    ``y = RandomState(seed_offset + i).randn(rows, out_size)``, float32.
    ``sweep.models.data.tokens``: random token ids and their next tokens (the transformer's).
    ``split`` says how a step's rows reach the ranks (:class:`DataSplit`).
    ``batch_size`` is the old name of ``train.batch_size`` (deprecated; :func:`normalize`).
    """

    _target_: str = affects(*ALL_NUMERIC, WORKLOAD, default="sweep.models.data.regression",
                            doc="Dotted path of the data factory: ``sweep.models.data.regression`` (the "
                                "report's), ``sweep.models.data.tokens``, or yours; it returns ``steps`` "
                                "pairs ``(inputs, targets)`` of numpy arrays.")
    seed_offset: int = affects(*ALL_NUMERIC, WORKLOAD, default=44,
                               doc="Sample ``i`` is drawn from ``RandomState(seed_offset + i)`` "
                                   "(in [0, 2**32)).")
    split: DataSplit = affects(*ALL_NUMERIC, WORKLOAD, default=DataSplit.replicated,
                               doc="``replicated``: the same sample on every rank (the report); ``sharded``: "
                                   "each rank its shard of a global batch, which the standalone copy trains on.")
    args: Dict[str, Any] = affects(*ALL_NUMERIC, WORKLOAD, default_factory=dict,
                                   doc="More keyword arguments of the data factory.")
    batch_size: Optional[int] = affects(default=None,
                                        doc="Deprecated: the old name of ``train.batch_size`` "
                                            "(moved there with a warning).")

    @staticmethod
    def check(data: Any) -> None:
        """Raises: ConfigError: ``seed_offset`` outside numpy's seeds."""
        if not 0 <= data.seed_offset < 2**32:
            raise ConfigError(f"data.seed_offset={data.seed_offset}: must be in [0, 2**32) (numpy's seeds)")
