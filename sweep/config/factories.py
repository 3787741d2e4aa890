"""Calling a factory a config names with ``_target_`` (``model._target_``,
``data._target_``): import it before launch, and offer it only the keyword arguments its
signature takes, so a user's factory names just what it needs."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict

from sweep.errors import ConfigError, import_reason


def locate(path: str, kind: str = "callable") -> Any:
    """The object at dotted ``path``: ``hydra.utils.get_method`` (``kind="callable"``) or
    ``get_class`` (``kind="class"``), without the error line Hydra logs before it raises
    (the caller says it once, in its own words).

    Raises:
        Exception: Hydra's, as it raises it (``ImportError`` or ``ValueError`` wrapping the
            cause): the path does not import, or names no callable / class.
    """
    import logging

    from hydra.utils import get_class, get_method

    logger = logging.getLogger("hydra.utils")
    was = logger.disabled
    logger.disabled = True
    try:
        return get_class(path) if kind == "class" else get_method(path)
    finally:
        logger.disabled = was


def load(key: str, target: str) -> Callable[..., Any]:
    """The callable ``target`` (a dotted path) names; ``key`` is the config key, for the error.

    Raises:
        ConfigError: it does not import.
    """
    try:
        return locate(target)
    except Exception as exc:  # hydra wraps ImportError/AttributeError in its own
        raise ConfigError(f"{key}={target} does not import: {import_reason(exc)}") from None


def accepted(factory: Callable[..., Any], offered: Dict[str, Any]) -> Dict[str, Any]:
    """The entries of ``offered`` that ``factory`` takes as keyword arguments (all of them
    if it takes ``**kwargs``)."""
    params = inspect.signature(factory).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(offered)
    return {k: v for k, v in offered.items() if k in params}
