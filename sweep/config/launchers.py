"""Launcher configs the tool registers over a plugin's: ``hydra/launcher=submitit_local``
runs ``hydra_plugins.sweep_launcher.local_launcher.WavedLocalLauncher`` (the plugin's local launcher, its jobs
in waves the cores can hold).

hydra-submitit-launcher stores its ``submitit_local`` node in Hydra's ``ConfigStore`` when
its config module runs, which Hydra's plugin discovery does (``Plugins.instance()``, once
per process, re-executing every plugin module); :func:`register` runs that discovery
first and then stores, under the same name, the plugin's ``LocalQueueConf`` with our two
fields added, so the name users know gets the cap. Without the plugin (the ``cluster``
extra) nothing is stored and Hydra's own message names the missing launcher.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import Any, Optional


def register() -> None:
    """Store ``hydra/launcher/submitit_local`` (module docstring), if the plugin is installed."""
    try:
        from hydra_plugins.hydra_submitit_launcher.config import LocalQueueConf
    except ImportError:
        return
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins

    Plugins.instance()  # discovery re-executes each plugin's modules once: ours must come after it
    conf = _waved(LocalQueueConf)
    ConfigStore.instance().store(group="hydra/launcher", name="submitit_local", node=conf, provider="sweep")


def _waved(base: Any) -> Any:
    """``base`` (the plugin's ``LocalQueueConf``) with ``array_parallelism`` (at most this
    many jobs at once; ``None``: as many as the cores hold ranks for) and ``cores`` (the
    cores a wave may fill with ranks; ``None``: ``os.cpu_count()``), its target our launcher."""
    return dataclass(make_dataclass(
        "WavedLocalQueueConf",
        [("_target_", str, field(default="hydra_plugins.sweep_launcher.local_launcher.WavedLocalLauncher")),
         ("array_parallelism", Optional[int], field(default=None)),
         ("cores", Optional[int], field(default=None))],
        bases=(base,),
    ))
