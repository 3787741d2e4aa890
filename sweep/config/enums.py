"""Config values that may be ``Enum`` members: a structured config (``sweep.config.schema``)
holds the member, a plain ``DictConfig`` (e.g. a rank's job file) the string."""

from __future__ import annotations

from typing import Any


def as_str(value: Any) -> str:
    """``value.value`` for an ``Enum`` member (``Device.cpu`` -> ``"cpu"``), ``str(value)``
    otherwise: the same text for both kinds of config."""
    return str(getattr(value, "value", value))
