"""Start and supervise the processes of one launch: the one place that starts them.

A launch is a framework launcher (``torchrun``, ``msrun``, ``srun`` on several nodes;
the command lines come from ``sweep.frameworks``) started in its own session, with
output to its log file. :class:`Launch` is the handle of a running one (``poll``,
``wait``, ``kill``); :func:`run` runs one to completion or to its time limit. On
timeout, Ctrl-C or exit no process of the launch is left behind: every process started
for it carries ``SWEEP_KILL_TAG`` in its environment and is killed by that tag
(msrun's workers run in sessions of their own and survive a SIGTERM to msrun).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Protocol, Tuple

import psutil

from sweep.launch import interrupts

TAG = "SWEEP_KILL_TAG"
WATCH_S = 1.0  # how often a running launch's log is read for LaunchSpec.fail_patterns


@dataclass
class LaunchSpec:
    """What to run: ``argv``, extra environment, log file, time limit (s), and the
    ``kill_tag`` every process of the launch carries (``SWEEP_KILL_TAG``)."""

    argv: List[str]
    env: Dict[str, str]
    log_path: Path
    timeout_s: float
    kill_tag: str = field(default_factory=lambda: uuid.uuid4().hex)
    # Regexes of a launcher's log line saying a rank died while the others wait for it
    # (msrun: "Worker process N exit with exception"): the launch ends at once, not at
    # its time limit (``Framework.early_exit_patterns``).
    fail_patterns: Tuple[str, ...] = ()
    cwd: Optional[str] = None  # the working directory (None: this process's)
    # False for a user's own command (runner=command): a script run as ``python repro.py``
    # needs its own directory on sys.path, which PYTHONSAFEPATH=1 would drop
    safe_path: bool = True
    # At the time limit, ask the ranks for their stacks before the kill (dump_stacks); False for
    # a user's own command, whose SIGUSR1 may mean something else (a checkpoint, a requeue)
    ask_stacks: bool = True


@dataclass
class LaunchOutcome:
    """How a launch ended. ``returncode`` is ``None`` when it was killed by us."""

    returncode: Optional[int]
    timed_out: bool
    wall_s: float
    killed: int  # processes of the launch that were still alive and got SIGKILL
    failed_early: Optional[str] = None  # the log line of a rank that died first (LaunchSpec.fail_patterns)


class LogWatch:
    """Reads what a log file gained since the last :meth:`match` (or since it was made,
    ``from_end``: a shared launch's log holds earlier jobs) and returns the first line
    matching one of ``patterns`` (``re.search``), from the match on; ``None`` otherwise."""

    def __init__(self, path: Path, patterns: Tuple[str, ...], from_end: bool = False) -> None:
        self.path, self.patterns = path, [re.compile(p) for p in patterns]
        self.offset = path.stat().st_size if from_end and path.exists() else 0
        self.partial = ""

    def match(self) -> Optional[str]:
        if not self.patterns or not self.path.exists():
            return None
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            chunk = log.read()
        self.offset += len(chunk)
        lines = (self.partial + chunk.decode(errors="replace")).split("\n")
        self.partial = lines.pop()
        for line in lines:
            for pattern in self.patterns:
                found = pattern.search(line)
                if found:
                    return line[found.start():].strip()
        return None


class Handle(Protocol):
    """What every running launch offers (:class:`Launch`, ``sweep.launch.forkserver.ForkedLaunch``)."""

    pid: int
    kill_tag: Optional[str]

    def poll(self) -> Optional[int]: ...

    def wait(self, timeout: Optional[float] = None) -> Optional[int]: ...

    def kill(self) -> int: ...


def free_port() -> int:
    """A TCP port that was free on localhost a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


USER_PATH = "SWEEP_USER_PATH"


def child_environment(extra: Dict[str, str], kill_tag: str, safe_path: bool = True) -> Dict[str, str]:
    """The environment of a launch: this process's, plus ``extra``, the
    ``SWEEP_KILL_TAG`` and this interpreter first on ``PATH`` (msrun runs the first
    ``python`` on ``PATH``).

    Nothing in the working directory may shadow an installed package in the ranks (a
    directory or file named ``sweep`` there, say): ``PYTHONSAFEPATH=1`` keeps ``python -m``
    from putting the working directory first on ``sys.path``, and the working directory
    goes into ``SWEEP_USER_PATH`` instead, which the ranks append at the end of
    ``sys.path`` (``sweep.train.__main__``), so that an engine or model named in the
    config may still live in the user's project."""
    env = dict(os.environ)
    env.update(extra)
    env[TAG] = kill_tag
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if safe_path:
        env["PYTHONSAFEPATH"] = "1"
    else:
        env.pop("PYTHONSAFEPATH", None)
    env[USER_PATH] = os.getcwd()
    return env


def tagged_processes(kill_tag: str) -> List[psutil.Process]:
    """Live processes whose environment carries ``SWEEP_KILL_TAG=kill_tag``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(TAG) == kill_tag:
                found.append(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def kill_processes(root: Optional[psutil.Process], kill_tag: Optional[str]) -> int:
    """SIGKILL ``root``'s process tree and every process tagged with ``kill_tag``
    (``None``: the tree only); returns how many were alive."""
    procs = {p.pid: p for p in tagged_processes(kill_tag)} if kill_tag is not None else {}
    if root is not None:
        try:
            procs.setdefault(root.pid, root)
            for child in root.children(recursive=True):
                procs.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass
    alive = []
    for proc in procs.values():
        try:
            proc.send_signal(signal.SIGKILL)
            alive.append(proc)
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(alive, timeout=10)
    return len(alive)


STACKS_SETTLE_S = 1.0  # how long the ranks get to write their stacks before the kill


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (``SigCgt`` of ``/proc/PID/status``;
    ``False`` where there is no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError):
        return False
    return False


def dump_stacks(pid: Optional[int], kill_tag: Optional[str], settle_s: float = STACKS_SETTLE_S) -> int:
    """Ask the processes of a launch (the tree under ``pid`` and those tagged ``kill_tag``,
    not the launcher ``pid`` itself) that catch ``SIGUSR1`` (the ranks:
    ``sweep.train.__main__.stacks_on_signal``) to write their Python stacks into their logs,
    then give them ``settle_s``; returns how many were asked. At a time limit, before the
    kill: the job then says which rank hung and where (``sweep.run.failures.hung_ranks``).
    Linux (``/proc``); elsewhere it asks none."""
    usr1 = getattr(signal, "SIGUSR1", None)
    if usr1 is None:
        return 0
    procs = {p.pid: p for p in tagged_processes(kill_tag)} if kill_tag is not None else {}
    if pid is not None:
        try:
            procs.update({c.pid: c for c in psutil.Process(pid).children(recursive=True)})
        except psutil.NoSuchProcess:
            pass
        procs.pop(pid, None)
    asked = 0
    for proc in procs.values():
        if _catches(proc.pid, int(usr1)):
            try:
                proc.send_signal(usr1)
                asked += 1
            except psutil.NoSuchProcess:
                continue
    if asked:
        time.sleep(settle_s)
    return asked


class Launch:
    """A launcher started by :func:`start`: its ``pid``, ``poll()``, ``wait()``,
    ``kill()`` (the process tree and every process carrying its ``kill_tag``)."""

    def __init__(self, spec: LaunchSpec) -> None:
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(spec.log_path, "ab") as log:
            log.write(("$ " + " ".join(spec.argv) + "\n").encode())
            log.flush()
            self._proc = subprocess.Popen(
                spec.argv, env=child_environment(spec.env, spec.kill_tag, spec.safe_path), stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=spec.cwd,
            )
        self.spec = spec
        self.pid = self._proc.pid
        self.kill_tag: Optional[str] = spec.kill_tag
        self._root = psutil.Process(self.pid)

    @property
    def returncode(self) -> Optional[int]:
        return self._proc.returncode

    def poll(self) -> Optional[int]:
        return self._proc.poll()

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """Raises: subprocess.TimeoutExpired: still running after ``timeout`` s."""
        return self._proc.wait(timeout=timeout)

    def kill(self) -> int:
        """SIGKILL everything of the launch; returns how many processes were alive."""
        killed = kill_processes(self._root, self.kill_tag)
        self._proc.wait()
        return killed


def start(spec: LaunchSpec) -> Launch:
    """Start ``spec`` in its own session, output appended to ``spec.log_path``."""
    return Launch(spec)


def run(spec: LaunchSpec) -> LaunchOutcome:
    """Run ``spec`` to completion or to ``spec.timeout_s``; never leaves processes behind.

    Raises:
        KeyboardInterrupt: re-raised after the launch's processes are killed.
    """
    began = time.monotonic()
    handle = start(spec)
    watch = LogWatch(spec.log_path, spec.fail_patterns)
    timed_out, early = False, None
    try:
        while True:
            try:
                returncode: Optional[int] = handle.wait(timeout=min(WATCH_S, max(0.0, began + spec.timeout_s
                                                                                  - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                interrupts.check()  # an interrupt whose raise was dropped (sweep.launch.interrupts)
                early = watch.match()
                if early is not None or time.monotonic() - began >= spec.timeout_s:
                    timed_out, returncode = early is None, None
                    break
    except BaseException:
        handle.kill()
        raise
    if (timed_out or early is not None) and spec.ask_stacks:  # where each rank is, into its log, before the kill
        dump_stacks(handle.pid, spec.kill_tag)
    # after a normal exit: stragglers with the tag (msrun's workers); after a timeout or an early failure: all
    killed = handle.kill() if returncode is None else kill_processes(None, spec.kill_tag)
    return LaunchOutcome(returncode=returncode, timed_out=timed_out, wall_s=time.monotonic() - began, killed=killed,
                         failed_early=early)
