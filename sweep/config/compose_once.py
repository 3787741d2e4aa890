"""Each job's config composed once per multirun, not twice.

A Hydra sweeper first checks that every job of a batch composes
(``Sweeper.validate_batch_is_legal``: "This repeat work the launcher will do", its docstring
says), then the launcher composes each job again to run it
(``ConfigLoaderImpl.load_sweep_config``, the same master config and overrides). Composing this
tool's config tree takes about 0.1 s a job here, so the default grid's 32 jobs paid 3 s for the
second composition. :func:`install` keeps what the check composed, and the launcher's call with
the same master config and overrides takes it (once: a later call composes again). The check
only composes and drops what it got, so the launcher receives a config nobody has touched,
equal to one composed anew (the same inputs; ``copy_cache`` from the same master config).

Only the basic launcher's and our launchers' calls made after a check in the same process are
served; submitit's workers and anything else compose as before.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

_HELD: Dict[Tuple[int, Tuple[str, ...]], Any] = {}  # (id(master config), overrides) -> the check's config
_CHECKING: List[bool] = []  # inside validate_batch_is_legal


def install() -> None:
    """Wrap Hydra's ``ConfigLoaderImpl.load_sweep_config`` and ``Sweeper.validate_batch_is_legal``
    (module docstring); once per process, a no-op where Hydra lacks either."""
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from hydra.plugins.sweeper import Sweeper
    except ImportError:  # another Hydra layout: every job composes twice, as before
        return
    load, check = ConfigLoaderImpl.load_sweep_config, Sweeper.validate_batch_is_legal
    if getattr(load, "_composed_once", False):
        return

    def load_sweep_config(self: Any, master_config: Any, sweep_overrides: List[str]) -> Any:
        key = (id(master_config), tuple(str(o) for o in sweep_overrides))
        if not _CHECKING and key in _HELD:
            return _HELD.pop(key)
        config = load(self, master_config, sweep_overrides)
        if _CHECKING:
            _HELD[key] = config
        return config

    def validate_batch_is_legal(self: Any, batch: Any) -> None:
        _CHECKING.append(True)
        try:
            check(self, batch)
        finally:
            _CHECKING.pop()

    load_sweep_config._composed_once = True  # type: ignore[attr-defined]
    ConfigLoaderImpl.load_sweep_config = load_sweep_config  # type: ignore[method-assign]
    Sweeper.validate_batch_is_legal = validate_batch_is_legal  # type: ignore[method-assign]
