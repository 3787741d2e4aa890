"""The signal that interrupted this process (Ctrl-C's SIGINT, SIGTERM, SIGHUP), kept where
every loop that waits on ranks can see it.

The handler raises ``KeyboardInterrupt`` wherever the main thread is when the signal
arrives. Python drops an exception raised inside a finalizer, a weakref callback or the
garbage collector (it prints "Exception ignored in ..." and goes on), so that one raise
can be lost: a CI run once saw an interrupted sweep run on to its end and exit 0. The
signal itself is never lost: :func:`handle` records it first, the wait loops
(``sweep.launch.supervise.run``, ``sweep.run.pool.Pool.wait``) call :func:`check` at every
poll, and the command (``sweep.__main__``) ends as an interrupt whenever one was recorded.
"""
from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator, List

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

RECEIVED: List[str] = []  # the names of the signals received, in order


def handle(signum: int, frame: object) -> None:
    """The handler for :data:`SIGNALS`: records the signal, then raises.

    Raises:
        KeyboardInterrupt: always, with the signal's name (``SIGINT``, ...).
    """
    RECEIVED.append(signal.Signals(signum).name)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def install() -> None:
    """Make :func:`handle` the handler of each of :data:`SIGNALS` (the main thread only)."""
    for signum in SIGNALS:
        signal.signal(signum, handle)


def check() -> None:
    """Raise again an interrupt that was recorded, in case its first raise was dropped.

    Raises:
        KeyboardInterrupt: where a signal was received, with its name.
    """
    if RECEIVED:
        raise KeyboardInterrupt(RECEIVED[0])


@contextmanager
def surfaced() -> Iterator[None]:
    """Inside it, an error raised after a signal was received is that signal's interrupt.

    A ``KeyboardInterrupt`` raised while a library runs can come out as another error: OmegaConf
    catches what a key's lookup raises and raises a ``ConfigKeyError`` in its place (a CI run saw an
    interrupted job recorded as one). Where :data:`RECEIVED` holds a signal, the error is raised
    again as the interrupt, the error as its cause.

    Raises:
        KeyboardInterrupt: for any exception raised inside once a signal was recorded.
    """
    try:
        yield
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        if RECEIVED:
            raise KeyboardInterrupt(RECEIVED[0]) from exc
        raise


def reason() -> str:
    """A job's reason when a signal stopped it: ``interrupted (Ctrl-C)`` for SIGINT (or none
    recorded: the interpreter's own KeyboardInterrupt), else ``interrupted (SIGTERM)``, ...
    (a scheduler's or ``timeout``'s stop is not a Ctrl-C)."""
    name = RECEIVED[0] if RECEIVED else "SIGINT"
    return "interrupted (Ctrl-C)" if name == "SIGINT" else f"interrupted ({name})"
