"""Engines: how the distributed copy of the model is parallelised.

May import: ``sweep.config``, ``sweep.models`` and the contracts at the top only.

An engine class is named per framework in the config (``engine.impl.<framework>``,
see ``conf/engine/``) and loaded here, so a user or a test can plug in another
engine with one override, e.g. ``engine.impl.torch=my_pkg.MyEngine``. Every engine
derives from :class:`sweep.engines.base.Engine` (``TorchEngine``, ``MindSporeEngine``).
"""

from __future__ import annotations

from typing import Any, List, Type

from omegaconf import OmegaConf

from sweep.config import CONF_DIR
from sweep.engines.base import Engine
from sweep.errors import ConfigError, import_reason

ENGINE_CONF = CONF_DIR / "engine"


def engines_for(framework: str) -> List[str]:
    """Names of the ``conf/engine/`` presets that have an implementation for ``framework``."""
    return [
        path.stem for path in sorted(ENGINE_CONF.glob("*.yaml"))
        if (OmegaConf.load(path).get("impl") or {}).get(framework)
    ]


def engine_class(cfg: Any, framework: str) -> Type[Engine]:
    """The engine class ``engine.impl[framework]``, imported (engine modules import
    their framework lazily, so this is cheap).

    Raises:
        ConfigError: no implementation for ``framework``, a path that does not import,
            or a class that is not an :class:`Engine` of that framework.
    """
    from sweep.config.factories import locate

    impl = cfg.engine.impl
    if framework not in impl or not impl[framework]:
        have = ", ".join(sorted(k for k, v in impl.items() if v)) or "none"
        options = ", ".join(f"engine={name}" for name in engines_for(framework)) or "none"
        raise ConfigError(
            f"engine={cfg.engine.name} does not exist for framework={framework} (it exists for: {have}); "
            f"framework={framework} has: {options}"
        )
    path = str(impl[framework])
    try:
        cls = locate(path, "class")
    except Exception as exc:  # hydra wraps ImportError/AttributeError in its own
        raise ConfigError(f"engine.impl.{framework}={path} does not import: {import_reason(exc)}") from None
    if not (isinstance(cls, type) and issubclass(cls, Engine)):
        raise ConfigError(f"engine.impl.{framework}={path} is not a sweep.engines.base.Engine")
    if cls.framework and cls.framework != framework:
        raise ConfigError(f"engine.impl.{framework}={path} is an engine for framework={cls.framework}")
    return cls


def load_engine(cfg: Any, framework: str, **kwargs: Any) -> Engine:
    """Instantiate ``engine.impl[framework]`` with ``kwargs`` (``device``, ``world_size``).

    Raises:
        ConfigError: see :func:`engine_class`.
    """
    return engine_class(cfg, framework)(cfg, **kwargs)
