"""Shared launches of PyTorch ranks started from one process that imported torch once.

A multirun's shared launches (``sweep.run.pool``) with ``framework.pool_launcher=
elastic_fork`` each run ``sweep.launch.fork_launch``: torch's ``elastic_launch`` forking
the ranks. Each such launch would import torch, FSDP2, DTensor and inductor's config
first (3-5 s on this machine). Instead, Python's own fork server
(``multiprocessing`` start method ``forkserver``) imports them once, and each launch is
a process forked from it: start-up is paid once per sweep, not once per world size.

The server is started (:func:`start`) at the beginning of a multirun, with the
environment of its launches (``framework.env``, ``OMP_NUM_THREADS``: the variables a
rank's libraries read when they load), so that its imports run while Hydra composes
the first jobs. A launch whose environment differs is started as its own process
instead (``sweep.run.pool``). The server holds no job state; it leaves once the sweep's
process and the launches forked from it are gone (their ranks leave when the sweep's
process is gone, see ``sweep.train.__main__.serve``).

As with any ``multiprocessing`` start method but ``fork``, a launch imports the
sweep's main module first unless it is a package's ``__main__`` (``python -m sweep``
is): a script that drives sweep needs the ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional

import psutil

from sweep.launch import supervise

_CONTEXT = multiprocessing.get_context("forkserver")
_SERVER: Dict[str, Any] = {}  # "env": the environment the server was started with, "tag": its SWEEP_KILL_TAG, "pid"


def start(env: Dict[str, str], log_path: Path) -> None:
    """Start the fork server with ``env`` added to this process's environment; only the
    first call does anything. Returns at once; the server imports
    ``sweep.launch.fork_launch.PRELOAD`` in the background. The server and every process
    forked from it (its launches, their ranks; also multiprocessing's resource tracker,
    started alongside) carry ``SWEEP_KILL_TAG=forkserver-<hex>``. Their output goes to
    ``log_path``, so that they hold no pipe of this process's (a caller reading our
    stdout to its end would otherwise also wait for the server's own exit).

    If something in this process already started multiprocessing's fork server, it has
    another environment and no preload: it is left alone and :func:`serves` is false.
    """
    from sweep.launch.fork_launch import PRELOAD

    if _SERVER:
        return
    if getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None) is not None:
        _SERVER.update(env=None, tag=None, pid=None)  # not ours
        return
    tag = f"forkserver-{uuid.uuid4().hex}"
    child_env = supervise.child_environment(env, tag)
    saved_env = dict(os.environ)
    _CONTEXT.set_forkserver_preload(list(PRELOAD))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # No signal handler may run while this process's environment and fds 1, 2 are swapped.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    saved_fds = os.dup(1), os.dup(2)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.environ.clear()
        os.environ.update(child_env)  # the server process is started with this environment
        os.dup2(log, 1)
        os.dup2(log, 2)
        multiprocessing.forkserver.ensure_running()
    finally:
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in (log, *saved_fds):
            os.close(fd)
        os.environ.clear()
        os.environ.update(saved_env)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    # multiprocessing keeps the server's pid on its (module-private) ForkServer object
    _SERVER.update(env=dict(env), tag=tag, pid=getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None))


def serves(env: Dict[str, str]) -> bool:
    """Whether the server runs and its launches get exactly ``env``. (If it died,
    ``multiprocessing`` would start a new one with this process's environment, so a
    dead server serves nothing.)"""
    return bool(_SERVER) and _SERVER["env"] == dict(env) and _alive(_SERVER["pid"])


def _alive(pid: Any) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, TypeError, ValueError):
        return False


def tag() -> Optional[str]:
    """The ``SWEEP_KILL_TAG`` every process of the server carries (``None``: not started)."""
    return _SERVER.get("tag")


class ForkedLaunch:
    """One shared launch forked from the server: a launch handle (``sweep.launch.supervise.Handle``:
    ``pid``, ``poll()``, ``wait(timeout)``, ``kill()``, ``returncode``).

    The launch runs ``sweep.launch.fork_launch.run_pool(world, pool_dir, log_path)`` in a
    session of its own, its output appended to ``log_path``. Its processes carry the
    server's tag, shared with every other launch forked from it, so :meth:`kill` takes
    this launch's process tree only (``kill_tag`` is ``None``).
    """

    kill_tag = None

    def __init__(self, world: int, pool_dir: Path, log_path: Path, argv: List[str]) -> None:
        from sweep.launch.fork_launch import run_pool

        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            log.write(("$ (forked from the fork server) " + " ".join(argv) + "\n").encode())
        self._process = _CONTEXT.Process(
            target=run_pool, args=(world, str(pool_dir), str(log_path)), name=f"sweep-pool-{pool_dir.name}"
        )
        self._process.start()
        self.pid = self._process.pid
        self._root = psutil.Process(self.pid)
        self.argv = list(argv)

    @property
    def returncode(self) -> Optional[int]:
        return self.poll()

    def poll(self) -> Optional[int]:
        """The exit code, ``None`` while the launch runs. multiprocessing learns it from
        the server and says 255 when the server itself is gone; then the launch may
        still run, which the process table tells."""
        code = self._process.exitcode
        if code == 255 and _alive(self.pid):
            return None
        return code

    def kill(self) -> int:
        """SIGKILL the launch's process tree; returns how many processes were alive."""
        killed = supervise.kill_processes(self._root, None)
        self.wait()
        return killed

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """Wait for the launch to end; ``subprocess.TimeoutExpired`` after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._process.join(timeout)
        while (code := self.poll()) is None:  # the server is gone, the launch is not
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pool launch {self.pid}", timeout or 0.0)
            time.sleep(0.05)
        return code
