"""A multirun's claim on its sweep dir: one sweep at a time, one grid per dir.

At the start of a multirun (``sweep.run.callbacks.SweepDirCallback``), before Hydra writes
anything into ``hydra.sweep.dir``, :func:`claim` creates the dir, takes an exclusive lock
on ``SWEEP_DIR/.lock`` (``fcntl.flock``: released by the kernel when the process ends,
however it ends) and compares the grid about to run with the one the dir already holds
(its ``multirun.yaml``). Another grid is refused unless ``replace_grid=true``, which
moves the old jobs aside (to ``SWEEP_DIR/.replaced/<time>/``) instead of mixing them in;
the same grid again, with results in the dir, is refused unless ``resume=true`` (run
what is not complete) or ``replace_grid=true`` (move them aside, run it anew).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from pathlib import Path
from typing import List, Optional, Sequence

from sweep.errors import ConfigError
from sweep.layout import RESULT, SUMMARY_FILES, TRACKER_FILES, SweepDir

LOCK = ".lock"
REPLACED = ".replaced"
IGNORED_KEYS = ("resume", "replace_grid", "gate", "logger")  # switches of the run, not of the grid


def grid_text(jobs: Sequence[Sequence[str]]) -> str:
    """A grid as ``N jobs: key=v1,v2 ...`` (every key with its values in first-seen order)."""
    values: dict = {}
    for job in jobs:
        for item in job:
            key, _, value = str(item).partition("=")
            if key.lstrip("+~") in IGNORED_KEYS:
                continue
            values.setdefault(key, [])
            if value not in values[key]:
                values[key].append(value)
    return f"{len(jobs)} job{'s' if len(jobs) != 1 else ''}: " + (" ".join(f"{k}={','.join(v)}" for k, v in values.items()) or "(defaults)")


def _comparable(jobs: Sequence[Sequence[str]]) -> List[List[str]]:
    return [sorted(i for i in job if str(i).partition("=")[0].lstrip("+~") not in IGNORED_KEYS) for job in jobs]


class Claim:
    """The held lock of a sweep dir; :meth:`release` (or process exit) lets it go."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path

    def release(self) -> None:
        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def claim(sweep_dir: Path | str, planned: Optional[List[List[str]]], previous: Optional[List[List[str]]],
          replace_grid: bool = False, resume: bool = False) -> Claim:
    """Create ``sweep_dir``, lock it for this process, and check its grid.

    ``planned``: the job overrides about to run (``None``: unknown, e.g. another
    sweeper); ``previous``: those of the multirun the dir holds (from its
    ``multirun.yaml``; ``None``: none).

    Raises:
        ConfigError: the dir cannot be created; another sweep holds it; it holds
            another grid with jobs in it and ``replace_grid`` is false; or it holds this
            grid's results and neither ``resume`` nor ``replace_grid`` says what to do
            with them (never overwritten silently); or it holds a single run (``result.json``).
    """
    layout = SweepDir(sweep_dir)
    try:
        layout.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(layout.path / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise ConfigError(f"hydra.sweep.dir={layout.path} cannot be created: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise ConfigError(
            f"hydra.sweep.dir={layout.path} is in use by another sweep ({holder}); wait for it to end, "
            "or use another hydra.sweep.dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0)
    held = Claim(fd, layout.path / LOCK)
    if (layout.path / RESULT).exists():  # a single run's dir: its files and the grid's would mix
        held.release()
        raise ConfigError(f"hydra.sweep.dir={layout.path} holds a single run ({RESULT}, from python -m sweep "
                          "without -m): a multirun there would mix its files with that run's; use another "
                          "hydra.sweep.dir")
    if planned is not None and previous is not None and layout.job_dirs() \
            and _comparable(planned) != _comparable(previous):
        if not replace_grid:
            held.release()
            # the same jobs in another order: job N would be another config (numbers follow the values' order)
            reordered = sorted(_comparable(planned)) == sorted(_comparable(previous))
            raise ConfigError(
                f"hydra.sweep.dir={layout.path} holds another grid ({grid_text(previous)}); this sweep is "
                f"{grid_text(planned)}"
                + (" (the same jobs in another order: jobs are numbered in the order of the values, so give them "
                   "in the order the dir's grid has them)" if reordered else "")
                + f". Use another hydra.sweep.dir, or add replace_grid=true to move the old "
                f"jobs to {layout.path / REPLACED}/ and run this grid there"
            )
        _move_aside(layout)
    elif (previous is not None or planned is None) and not resume and _results(layout):
        # (planned None: a sweeper that picks its jobs as it goes, an isolation or a bisection: its results too)
        if not replace_grid:
            held.release()
            done = len(_results(layout))
            judged = _judged(layout)
            also = f", {judged} of them judged" if judged != done else ""  # (an interrupted job's result: an error)
            held_of = (f"the results of this grid ({done} of {len(previous)} jobs{also})"
                       if planned is not None and previous
                       else f"the results of an earlier run of this sweeper ({done} jobs{also})")
            raise ConfigError(
                f"hydra.sweep.dir={layout.path} already holds {held_of}. Add resume=true to run only the jobs "
                f"that are not complete, or replace_grid=true to move them to {layout.path / REPLACED}/ and run the "
                "grid anew (or use another hydra.sweep.dir)"
            )
        _move_aside(layout)
    return held


def _judged(layout: SweepDir) -> int:
    """How many of ``layout``'s results are judged (``ok`` or ``fail``): the rest are errors,
    time-outs or interrupted jobs, which ``resume=true`` runs again."""
    import json

    count = 0
    for path in _results(layout):
        try:
            count += json.loads((path / "result.json").read_text()).get("status") in ("ok", "fail")
        except (OSError, ValueError, AttributeError):
            continue
    return count


def _results(layout: SweepDir) -> List[Path]:
    """The job dirs of ``layout`` that hold a ``result.json``."""
    return [p for p in layout.job_dirs() if (p / "result.json").exists()]


def _move_aside(layout: SweepDir) -> Path:
    """Move the old grid's job dirs, report, plan and tracker logs to ``.replaced/<time>/``."""
    target = layout.path / REPLACED / time.strftime("%Y-%m-%d_%H-%M-%S")
    target.mkdir(parents=True, exist_ok=True)
    names = [p.name for p in layout.job_dirs()] + [layout.multirun_yaml.name, layout.plots.name, *SUMMARY_FILES,
                                                    *TRACKER_FILES]
    for name in names:
        if (layout.path / name).exists():
            shutil.move(str(layout.path / name), str(target / name))
    return target
