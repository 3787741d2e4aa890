"""Calling a factory a config names with ``_target_`` (``model._target_``,
``data._target_``): import it before launch, and offer it only the keyword arguments its
signature takes, so a user's factory names just what it needs."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict

from sweep.errors import ConfigError, import_reason


def load(key: str, target: str) -> Callable[..., Any]:
    """The callable ``target`` (a dotted path) names; ``key`` is the config key, for the error.

    Raises:
        ConfigError: it does not import.
    """
    from hydra.utils import get_method

    try:
        return get_method(target)
    except Exception as exc:  # hydra wraps ImportError/AttributeError in its own
        raise ConfigError(f"{key}={target} does not import: {import_reason(exc)}") from None


def accepted(factory: Callable[..., Any], offered: Dict[str, Any]) -> Dict[str, Any]:
    """The entries of ``offered`` that ``factory`` takes as keyword arguments (all of them
    if it takes ``**kwargs``)."""
    params = inspect.signature(factory).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(offered)
    return {k: v for k, v in offered.items() if k in params}
