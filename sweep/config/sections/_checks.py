"""What the sections' field-local checks share: an ``Enum`` member's value, and a
finite positive number."""

from __future__ import annotations

import enum
import math
from typing import Any

from sweep.errors import ConfigError


def _value(x: Any) -> Any:
    return x.value if isinstance(x, enum.Enum) else x


def _positive(section: str, cfg: Any, *keys: str, allow_none: bool = False) -> None:
    """Each of ``keys`` is a finite number > 0 (or ``None`` with ``allow_none``)."""
    for key in keys:
        value = cfg[key]
        if value is None and allow_none:
            continue
        if value is None or not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{section}.{key}={value}: must be a finite number > 0")
