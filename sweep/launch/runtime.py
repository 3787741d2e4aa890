"""The runtime a job's processes run under: ``runtime.python`` and ``runtime.pythonpath``
(``sweep.config.sections.runtime``).

The job's launch environment (``sweep.run.pool.rank_env``) carries both: the interpreter as
:data:`PYTHON_ENV` (read back by :func:`interpreter` wherever an argv is built: the
framework's launcher, the standalone process, the shared launches; a fork server started
from this interpreter never serves such an environment), the path as ``PYTHONPATH``:
``runtime.pythonpath``, then the directory ``sweep`` itself is imported from (so another
interpreter finds this ``sweep``), then the ``PYTHONPATH`` this process was given.
:func:`on_path` gives the launching process the same path while it checks and judges a job.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Mapping, Optional

PYTHON_ENV = "SWEEP_RUNTIME_PYTHON"
SWEEP_ROOT = str(Path(__file__).resolve().parents[2])  # the directory the sweep package is imported from


def entries(pythonpath: Optional[str]) -> List[str]:
    """``runtime.pythonpath`` as absolute directories, in order (``os.pathsep``-separated;
    ``~`` expanded); ``[]`` for ``None`` or ``""``."""
    return [os.path.abspath(os.path.expanduser(e)) for e in str(pythonpath or "").split(os.pathsep) if e]


def launch_env(python: Optional[str], pythonpath: Optional[str],
               inherited: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """What a job with this runtime adds to its processes' environment: ``{}`` for the
    default runtime; else :data:`PYTHON_ENV` (with ``python``) and ``PYTHONPATH``
    (module docstring). ``inherited``: the environment to extend (``os.environ``)."""
    if python is None and not pythonpath:
        return {}
    inherited = os.environ if inherited is None else inherited
    path = entries(pythonpath) + [SWEEP_ROOT] + [e for e in inherited.get("PYTHONPATH", "").split(os.pathsep) if e]
    out = {"PYTHONPATH": os.pathsep.join(dict.fromkeys(path))}
    if python is not None:
        out[PYTHON_ENV] = os.path.abspath(os.path.expanduser(python))
    return out


def interpreter(env: Optional[Mapping[str, str]]) -> str:
    """The interpreter a launch with ``env`` runs: its :data:`PYTHON_ENV`, else this one's."""
    return (env or {}).get(PYTHON_ENV) or sys.executable


def site_packages(python: Optional[str]) -> List[str]:
    """The site-packages of the venv ``python`` belongs to (``<venv>/lib/pythonX.Y/
    site-packages``), where X.Y is this interpreter's (else nothing: its modules would not
    import here); ``[]`` for ``None``."""
    if not python:
        return []
    root = Path(os.path.expanduser(python)).parent.parent
    inner = root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    return [str(inner)] if inner.is_dir() and str(inner) not in sys.path else []


@contextlib.contextmanager
def on_path(pythonpath: Optional[str], python: Optional[str] = None) -> Iterator[None]:
    """Within: ``runtime.pythonpath``'s entries first on ``sys.path``, and ``runtime.python``'s
    site-packages last (:func:`site_packages`: a library installed there, e.g. by the bisect
    sweeper's ``install``); after: removed again, and every module imported from them
    dropped from ``sys.modules``, so that the next job's checkout (another commit of the same
    package) is imported afresh."""
    first = [e for e in entries(pythonpath) if e not in sys.path]
    last = site_packages(python)
    added = first + last
    sys.path[:0] = first
    sys.path.extend(last)
    try:
        yield
    finally:
        for e in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(e)
        roots = tuple(e.rstrip(os.sep) + os.sep for e in added)
        if roots:
            for name, module in list(sys.modules.items()):
                where = getattr(module, "__file__", None) or ""
                if where and os.path.abspath(where).startswith(roots):
                    del sys.modules[name]
