"""Atomic JSON files: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any


def _jsonable(obj: Any) -> Any:
    """Replace non-finite floats by the strings "nan", "inf", "-inf" (strict JSON has none)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "to_dict"):  # a record's Note (:func:`_plain`)
        return _jsonable(obj.to_dict())
    return obj


def _encoded(data: Any) -> str:
    """``data`` as JSON text: a dict one top-level key a line (readable, ``diff``-able), each
    value on its line in the C encoder's compact form (``json.dump`` with ``indent`` runs the
    pure-Python encoder: a 400 kB ``result.json`` took 29 ms, this 7 ms); :func:`_jsonable`
    only where a non-finite float is in it."""
    try:
        return _lines(data)
    except ValueError:  # a NaN or an inf: strict JSON has none
        return _lines(_jsonable(data))


def _lines(data: Any) -> str:
    if not isinstance(data, dict) or not data:
        return json.dumps(data, allow_nan=False, default=_plain) + "\n"
    return "{\n" + ",\n".join(" " + json.dumps({k: v}, allow_nan=False, default=_plain)[1:-1]
                              for k, v in data.items()) + "\n}\n"


def _plain(obj: Any) -> Any:
    """What JSON cannot hold as it is: an object with ``to_dict`` (a record's ``Note``) as that dict.

    Raises:
        TypeError: anything else (``json``'s own error)."""
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path: Path | str, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` via a temporary file in the same directory and
    ``os.replace``; non-finite floats become strings (see :func:`read_floats`). The file's
    mode follows the umask, as ``open()`` would make it (``mkstemp`` alone gives 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w") as f:
            f.write(_encoded(data))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path | str) -> Any:
    with open(path) as f:
        return json.load(f)


def read_floats(values: list) -> list[float]:
    """Loss list from a result file back to floats ("nan"/"inf"/"-inf" included)."""
    return [float(v) for v in values]


def read_array(values: Any) -> Any:
    """A tensor's values from a result file (nested lists, any shape) as a numpy array: the
    strings ``"nan"``, ``"inf"`` and ``"-inf"`` a non-finite value is written as (the JSON
    writer's, this module) read back as floats, as :func:`read_floats` reads a loss list."""
    import numpy as np

    array = np.asarray(values)
    return array.astype(np.float64) if array.dtype.kind in "US" else array


def unwritable(directory: Path | str) -> str | None:
    """Why no file can be created in ``directory`` (an existing folder), in a few words
    (``Read-only file system``, ``Permission denied``), or ``None`` when one can: a
    temporary file is created there and removed (permission bits do not tell: root ignores
    them, a read-only mount does not show in them)."""
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-probe-"):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None

