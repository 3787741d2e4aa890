"""The ``mesh`` section (``conf/mesh/``): the ``DeviceMesh``, and its check against
``world_size``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, List, Optional

from omegaconf import MISSING

from sweep.config.roles import DISTRIBUTED, affects
from sweep.errors import ConfigError


@dataclass
class MeshConfig:
    """A ``DeviceMesh``: ``world_size`` = product of ``mesh_shape``.

    A 2-D mesh is HSDP: replicate over the first dim, shard over the second
    (``fully_shard`` semantics in PyTorch and hyper-parallel).
    """

    name: str = affects(DISTRIBUTED, default=MISSING, doc="Labels the preset (``dp2``, ``dp4``, ``hsdp2x2``).")
    mesh_shape: List[int] = affects(DISTRIBUTED, default=MISSING,
                                    doc="Ranks per mesh dim; their product is ``world_size``.")
    mesh_dim_names: List[str] = affects(DISTRIBUTED, default=MISSING,
                                        doc="One name per dim of ``mesh_shape`` (e.g. ``[dp]``, "
                                            "``[replicate, shard]``).")

    @staticmethod
    def check(mesh: Any, world_size: Optional[int] = None) -> int:
        """The mesh's ``world_size``; it must equal ``world_size`` when that is set.

        Raises:
            ConfigError: a dim < 1, names and dims of different counts, or a mismatch.
        """
        shape, names = list(mesh.mesh_shape), list(mesh.mesh_dim_names)
        if not shape or any(int(n) < 1 for n in shape):
            raise ConfigError(f"mesh.mesh_shape={shape}: every dim must be a positive integer")
        if len(names) != len(shape):
            raise ConfigError(
                f"mesh.mesh_dim_names={names} has {len(names)} names but mesh.mesh_shape={shape} has {len(shape)} dims"
            )
        product = math.prod(shape)
        if world_size is not None and int(world_size) != product:
            raise ConfigError(
                f"mesh.mesh_shape={shape} needs world_size={product} ranks "
                f"({' x '.join(map(str, shape))}), but world_size={world_size}"
            )
        return product
