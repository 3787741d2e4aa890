"""Engines: how the distributed copy of the model is parallelised.

An engine class is named per framework in the config (``engine.impl.<framework>``,
see ``conf/engine/``) and loaded here, so a user or a test can plug in another
engine with one override, e.g. ``engine.impl.torch=my_pkg.MyEngine``.

A torch engine implements :class:`sweep.engines.base.TorchEngine`, a MindSpore
engine :class:`sweep.engines.base.MindSporeEngine`.
"""

from __future__ import annotations

from typing import Any

from hydra.utils import get_class


def load_engine(cfg: Any, framework: str, **kwargs: Any) -> Any:
    """Instantiate the engine class named by ``cfg.engine.impl[framework]``.

    Raises:
        KeyError: no engine implementation for this framework (``validate`` checks first).
        ImportError: the dotted path does not import.
    """
    path = cfg.engine.impl[framework]
    return get_class(path)(cfg, **kwargs)
