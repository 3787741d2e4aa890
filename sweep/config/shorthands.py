"""Command-line shorthands: a section set by one value, ``compile=true`` for
``compile.enabled=true``. OmegaConf holds a key either as a value or as a section, never
both, so the command line is rewritten before Hydra reads it (``sweep.__main__``): each
override ``KEY=VALUES`` (also ``+KEY``/``++KEY``, and swept lists ``KEY=false,true``) of a
key in :data:`SHORTHANDS` becomes ``KEY.FIELD=VALUES``. The job's recorded overrides are
the rewritten ones."""

from __future__ import annotations

from typing import List, Sequence

SHORTHANDS = {"compile": "enabled"}  # section -> the field its bare value sets


def expand(args: Sequence[str]) -> List[str]:
    """``args`` with every shorthand override rewritten (module docstring); everything
    else unchanged."""
    out = []
    for arg in args:
        prefix = arg[:len(arg) - len(arg.lstrip("+~"))]
        key, eq, value = arg[len(prefix):].partition("=")
        if eq and key in SHORTHANDS:
            arg = f"{prefix}{key}.{SHORTHANDS[key]}={value}"
        out.append(arg)
    return out
