"""Giving memory back between a rank's copies: what a copy let go of leaves the process, not
just Python's and torch's hands.

A copy's tensors, freed, go back to the C allocator, which keeps much of them in its heap
(glibc's ``malloc`` returns a heap's top only, and keeps freed chunks below it for later
allocations that may never fit them). The next copy's allocations then grow the process beside
them: the tracing rerun of a failing 42.6M-parameter job (``benchmarks/scale.py``) held 1.93 GiB
on a rank before its distributed copy trained, most of it the standalone copy and the twin let go.
:func:`give_back` collects Python's cycles (the ones a model's hooks make) and asks glibc to
return every free page (``malloc_trim(0)``, glibc 2.8 and later); elsewhere (another C library,
another OS) it collects only.

A full collection walks every object the process holds: a rank that imported torch holds some
250,000, and one collection took 0.12 to 0.25 s here, three times a job (after the twin, after
the standalone copy, after the job): 31 s of CPU in ``benchmarks/reuse.py``'s 95 s fast path
(``py-spy``). :func:`settle` freezes (``gc.freeze``, Python 3.7 and later) what is still alive
where a rank holds no job, the imports and caches that live as long as the process, so the
later collections walk only what was made since."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
from functools import lru_cache
from typing import Any, Optional


@lru_cache(maxsize=1)
def _libc() -> Optional[Any]:
    """glibc's ``malloc_trim`` where this process has it, else ``None``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def give_back() -> bool:
    """Collect garbage, then return the C heap's free pages to the OS (``malloc_trim(0)``).
    Returns whether glibc returned any (``False`` also where there is no ``malloc_trim``)."""
    gc.collect()
    trim = _libc()
    return bool(trim(0)) if trim is not None else False


def settle() -> None:
    """Where a rank holds no job (before its first, after each): :func:`give_back`, then move
    every object still alive to the permanent generation (``gc.freeze``), which later
    collections skip. Those objects are freed as ever when their last reference goes; only a
    reference cycle among them would stay, and what is alive between jobs lives as long as the
    process (modules, caches)."""
    give_back()
    gc.freeze()
