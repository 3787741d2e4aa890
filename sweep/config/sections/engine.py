"""The ``engine`` section (``conf/engine/``): how the distributed copy is parallelised."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict

from omegaconf import MISSING

from sweep.config.roles import DISTRIBUTED, affects


@dataclass
class EngineConfig:
    """How the distributed copy is parallelised.

    ``impl`` maps a framework name to the dotted path of an engine class
    (``sweep.engines``); an engine exists for a framework iff it has an entry. A test
    or a user plugs in another engine by overriding one entry. ``options`` are the
    engine's own settings, checked against the loaded class's ``Options`` dataclass.
    """

    name: str = affects(DISTRIBUTED, default=MISSING,
                        doc="The engine preset's name (``torch_fsdp2``, ``hyper_parallel``, ``data_parallel``).")
    impl: Dict[str, str] = affects(DISTRIBUTED, default_factory=dict,
                                   doc="Framework name -> dotted path of the engine class; the engine exists "
                                       "for a framework iff it has an entry. Override one entry to plug in "
                                       "an engine of your own (``engine.impl.torch=my_pkg.MyEngine``).")
    options: Dict[str, Any] = affects(DISTRIBUTED, default_factory=dict,
                                      doc="The engine's own settings, checked against its class's ``Options`` "
                                          "dataclass (hyper_parallel: ``skip_dtensor_dispatch``).")
