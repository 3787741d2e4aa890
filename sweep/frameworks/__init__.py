"""Frameworks: what the core needs to know about PyTorch, MindSpore or any other.

May import: ``sweep.config``, ``sweep.launch`` and the contracts at the top; the rank
module is named by a string (``rank_module``), not imported.

A framework is a class (:class:`sweep.frameworks.base.Framework`) named by the config
(``framework.impl``, see ``conf/framework/``), so the core looks it up instead of
branching on framework names: its launchers' command lines (a job's, a shared
launch's, one node's), its checks (installed, devices, gradient API), its rank entry
point, its device map and the fields its shared launches depend on. A new framework is
one module plus one ``conf/framework/<name>.yaml``.
"""

from __future__ import annotations

from typing import Any, Type

from sweep.errors import ConfigError
from sweep.frameworks.base import Framework


def by_path(path: str) -> Type[Framework]:
    """The framework class at dotted ``path``.

    Raises:
        ConfigError: it does not import, or is not a :class:`Framework`.
    """
    from sweep.config.factories import locate

    try:
        cls = locate(path, "class")
    except Exception as exc:  # hydra wraps ImportError/AttributeError in its own
        raise ConfigError(f"framework.impl={path} does not import: {exc}".splitlines()[0]) from None
    if not (isinstance(cls, type) and issubclass(cls, Framework)):
        raise ConfigError(f"framework.impl={path} is not a sweep.frameworks.base.Framework")
    return cls


def load(cfg: Any) -> Type[Framework]:
    """The framework class of a job config (``framework.impl``), checked to be the one
    its ``framework.name`` says.

    Raises:
        ConfigError: see :func:`by_path`; or the class is another framework's.
    """
    cls = by_path(str(cfg.framework.impl))
    if cls.name != str(cfg.framework.name):
        raise ConfigError(f"framework.impl={cfg.framework.impl} is framework {cls.name}, not {cfg.framework.name}")
    return cls
