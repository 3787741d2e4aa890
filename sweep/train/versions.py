"""What a rank ran under, for the record (``RankResult.versions``, merged into
``result.json``'s ``versions``): the interpreter and its Python, numpy, and the file the
engine class came from (which checkout of a library on ``runtime.pythonpath`` ran)."""

from __future__ import annotations

import inspect
import platform
import sys
from typing import Any, Dict


def ran(engine: Any = None) -> Dict[str, str]:
    """``{"python", "interpreter", "numpy"}`` of this process, and ``"engine_file"``: the
    source file of ``engine``'s class where it has one."""
    import numpy

    out = {"python": platform.python_version(), "interpreter": sys.executable, "numpy": numpy.__version__}
    if engine is not None:
        try:
            out["engine_file"] = inspect.getfile(type(engine))
        except (TypeError, OSError):
            pass
    return out
