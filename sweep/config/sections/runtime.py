"""The ``runtime`` section: the interpreter and the import path both copies run under.

``runtime.python`` (another venv's ``bin/python``, with another torch or MindSpore) and
``runtime.pythonpath`` (entries prepended to the ranks' and the standalone process's
``PYTHONPATH``, e.g. a checkout of a library at some commit) are config values like any
other: ``runtime.pythonpath=/src/a,/src/b`` is a sweep whose attribution names the
runtime, whose baseline cache and shared launches are per runtime (roles ``baseline``,
``distributed`` and ``launch``), and whose records give the versions that ran
(``versions`` in ``result.json``). The launching process (``python -m sweep``) stays in
its own interpreter; it puts ``runtime.pythonpath`` first on its own path while it checks
and judges a job (an engine class named from that path imports there too), then drops
what it imported from it (``sweep.launch.runtime``).

Another interpreter must import ``sweep`` and its rank-side dependencies (numpy,
omegaconf, hydra-core, the framework): ``pip install -e <this repo>`` into that venv, or
rely on the repository's own directory, which is put on its ``PYTHONPATH`` after
``runtime.pythonpath``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

from sweep.config.roles import ALL_NUMERIC, LAUNCH, affects


@dataclass
class RuntimeConfig:
    """What the ranks and the standalone copy run under (module docstring)."""

    python: Optional[str] = affects(*ALL_NUMERIC, LAUNCH, default=None,
                                    doc="The interpreter the ranks and the standalone copy run under (a path to "
                                        "another venv's ``bin/python``; torchrun and msrun are taken from beside "
                                        "it); ``null``: the one running ``python -m sweep``.")
    pythonpath: Optional[str] = affects(*ALL_NUMERIC, LAUNCH, default=None,
                                        doc="Entries (``os.pathsep``-separated) put first on the ranks' and the "
                                            "standalone process's ``PYTHONPATH``, e.g. a checkout of a library at "
                                            "some commit (``hydra/sweeper=bisect`` sets it per probe); ``null``: "
                                            "nothing added.")

    @staticmethod
    def check(runtime: "RuntimeConfig") -> None:
        """Raises: ConfigError: ``python`` that is no executable file or no Python 3
        interpreter (:func:`python_major`), or a ``pythonpath`` entry that is no directory
        (a checkout that is not there)."""
        import os

        from sweep.errors import ConfigError

        if runtime.python is not None:
            path = os.path.expanduser(str(runtime.python))
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                raise ConfigError(f"runtime.python={runtime.python}: no executable file there (give a venv's "
                                  "bin/python)")
            if python_major(os.path.abspath(path)) != "3":
                raise ConfigError(f"runtime.python={runtime.python}: not a Python 3 interpreter (it does not "
                                  "print 3 for: -c 'import sys; print(sys.version_info[0])')")
        for entry in str(runtime.pythonpath or "").split(os.pathsep):
            if entry and not os.path.isdir(os.path.expanduser(entry)):
                raise ConfigError(f"runtime.pythonpath: {entry} is not a directory")


@functools.lru_cache(maxsize=None)
def python_major(path: str) -> str:
    """What ``path -c 'import sys; print(sys.version_info[0])'`` prints, stripped (``""`` if
    it fails or takes over 20 s): ``"3"`` for a Python 3 interpreter. Asked once per path."""
    import subprocess

    try:
        out = subprocess.run([path, "-c", "import sys; print(sys.version_info[0])"], capture_output=True, text=True,
                             timeout=20)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""
