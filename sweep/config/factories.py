"""Calling a factory a config names with ``_target_`` (``model._target_``,
``data._target_``): import it before launch, and offer it only the keyword arguments its
signature takes, so a user's factory names just what it needs."""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Dict, Optional

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
    except Exception:
        why = _why_not(path, kind)  # Hydra's "'m' is not a package" where m imports and lacks the name
        if why is None:
            raise
        raise ImportError(why) from None
    finally:
        logger.disabled = was


def _module_of(path: str) -> Any:
    """The module ``path`` names where it is one that imports, else ``None``."""
    try:
        return importlib.import_module(path)
    except Exception:  # no such module, or one that fails: the other checks say why
        return None


def _defined(module: Any, module_name: str, kind: str = "callable") -> str:
    """The public names ``module`` defines itself (classes only for ``kind="class"``), at most 8
    and a count."""
    have = sorted(n for n, v in vars(module).items() if not n.startswith("_") and callable(v)
                  and getattr(v, "__module__", None) == module_name and (kind != "class" or isinstance(v, type)))
    return ", ".join(have[:8]) + (f" and {len(have) - 8} more" if len(have) > 8 else "")


def _why_not(path: str, kind: str) -> Optional[str]:
    """Why ``path`` is no ``kind`` where its module imports: the module lacks the name (with the
    public names it has), or the name is no class / not callable; ``None`` where the module itself
    does not import (Hydra's message says why)."""
    whole = _module_of(path)
    if whole is not None:  # a module where a class or a function was meant
        have = _defined(whole, path, kind)
        return (f"{path} is a module, not a {kind}: name one in it ({path}.<name>)"
                + (f"; it defines: {have}" if have else ""))
    module_name, _, name = path.rpartition(".")
    if not module_name:
        return None
    try:
        module = importlib.import_module(module_name)
    except Exception:  # the module's own error: Hydra's message carries it
        return None
    if not hasattr(module, name):
        listed = _defined(module, module_name)
        return f"module {module_name} has no {name!r}" + (f" (it defines: {listed})" if listed else "")
    found = getattr(module, name)
    if kind == "class" and not isinstance(found, type):
        return f"{path} is a {type(found).__name__}, not a class"
    if kind != "class" and not callable(found):
        return f"{path} is a {type(found).__name__}, not callable"
    return None


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
