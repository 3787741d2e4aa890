"""The bisection behind ``BisectSweeper.sweep``: commits, runnable trees, probes, report.

1. The commits of ``good..bad`` (``git rev-list --reverse --ancestry-path``), oldest first.
2. :class:`sweep.analysis.bisect.Bisection` proposes a commit; the commit is made runnable
   (its tree exported with ``git archive`` into the cache, once per commit; with
   ``install``, a venv per commit in which the command ran, once) and probed: the command
   line's job (or grid) with ``runtime.pythonpath`` (and ``runtime.python``) pointing at it,
   launched through the configured launcher. The probe fails if a job fails, passes if
   every job passes, and is skipped (``git bisect skip``) if the commit cannot be exported
   or installed or a job errs (an import that fails, a crash): with the reason.
3. ``bisect.json`` after every probe (an interrupted bisection leaves what it knew), then
   ``bisect.md`` and the answer on the terminal; the multirun's end callback writes the
   grid report over the probe jobs (``summary.md``: attribution names ``runtime.pythonpath``).
"""

from __future__ import annotations

import atexit
import io
import itertools
import json
import logging
import os
import re
import shutil
import site
import subprocess
import sys
import tarfile
import time
import venv
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hydra.core.utils import JobReturn

from hydra_plugins.sweep_isolate._core import parse_arguments, record_of
from sweep.analysis.bisect import FAIL, PASS, SKIP, Bisection

log = logging.getLogger(__name__)

BISECT_JSON, BISECT_MD = "bisect.json", "bisect.md"
PLAIN = re.compile(r"^[\w/.\-~+@:]+$")  # a value Hydra's override grammar takes unquoted


class GitError(RuntimeError):
    """A git command failed (its stderr is the message)."""


def git(repo: str, *args: str) -> str:
    """``git -C repo ARGS``'s stdout, stripped.

    Raises:
        GitError: git exits non-zero (its stderr), or is not installed.
    """
    try:
        out = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise GitError("git is not installed") from exc
    if out.returncode:
        raise GitError(f"git {' '.join(args)}: {out.stderr.strip() or out.stdout.strip()}")
    return out.stdout.strip()


def commits_between(repo: str, good: str, bad: str) -> List[Dict[str, str]]:
    """``[{"sha", "subject"}]`` of ``good..bad`` on the ancestry path, oldest first (``bad``
    last, ``good`` not in it).

    Raises:
        GitError: ``repo`` is no git checkout, a revision does not resolve, or ``good`` is
            not an ancestor of ``bad``.
    """
    if not os.path.isdir(repo):
        raise GitError(f"hydra.sweeper.repo={repo}: no such directory")
    try:
        git(repo, "rev-parse", "--git-dir")
    except GitError:
        raise GitError(f"hydra.sweeper.repo={repo}: not a git checkout") from None
    good_sha = git(repo, "rev-parse", "--verify", f"{good}^{{commit}}")
    bad_sha = git(repo, "rev-parse", "--verify", f"{bad}^{{commit}}")
    try:
        git(repo, "merge-base", "--is-ancestor", good_sha, bad_sha)
    except GitError:
        raise GitError(f"hydra.sweeper.good={good} is not an ancestor of hydra.sweeper.bad={bad}") from None
    lines = git(repo, "log", "--reverse", "--ancestry-path", "--format=%H%x09%s", f"{good_sha}..{bad_sha}")
    return [dict(zip(("sha", "subject"), line.split("\t", 1))) for line in lines.splitlines() if line]


def export(repo: str, sha: str, cache: Path) -> Path:
    """The tree of ``sha``, exported once into ``cache/trees/<sha>`` (``git archive``).

    Raises:
        GitError: the archive cannot be made.
    """
    where = cache / "trees" / sha
    if (where / ".exported").exists():
        return where
    try:
        data = subprocess.run(["git", "-C", repo, "archive", "--format=tar", sha], capture_output=True,
                              check=True).stdout
    except subprocess.CalledProcessError as exc:
        raise GitError(f"git archive {sha[:10]}: {exc.stderr.decode(errors='replace').strip()}") from None
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(where, filter="data")
    (where / ".exported").write_text(sha)
    return where


def install(tree: Path, sha: str, command: str, cache: Path) -> Path:
    """The python of ``cache/venvs/<sha>``: a venv made once per commit that sees this
    interpreter's packages (a ``.pth`` of its site-packages), in which ``command`` ran in
    ``tree`` (``VIRTUAL_ENV`` and ``PATH`` set to it).

    Raises:
        RuntimeError: the command failed (its last output lines).
    """
    where = cache / "venvs" / sha
    python = where / "bin" / "python"
    if (where / ".installed").exists():
        return python
    shutil.rmtree(where, ignore_errors=True)
    venv.EnvBuilder(with_pip=True, symlinks=True).create(where)
    inner = next((where / "lib").glob("python*/site-packages"))
    (inner / "_sweep_parent.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = dict(os.environ, VIRTUAL_ENV=str(where), PATH=f"{where / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("PYTHONHOME", None)
    out = subprocess.run(command, shell=True, cwd=tree, env=env, capture_output=True, text=True)
    (where / "install.log").write_text(f"$ {command}\n{out.stdout}\n{out.stderr}")
    if out.returncode:
        tail = " | ".join((out.stderr or out.stdout).strip().splitlines()[-3:])
        raise RuntimeError(f"install ({command}) exited with code {out.returncode}: {tail}")
    (where / ".installed").write_text(sha)
    return python


def _value(text: str) -> str:
    """``text`` as an override value: unquoted where Hydra's grammar takes it, else quoted."""
    return text if PLAIN.match(text) else "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class Run:
    """One bisection: the commits, the probes, job numbering, the files it writes."""

    def __init__(self, sweeper: Any, arguments: List[str]) -> None:
        self.sweeper = sweeper
        self.sweep_dir = Path(sweeper.config.hydra.sweep.dir)
        self.cache = Path(sweeper.cache).expanduser() if sweeper.cache else self.sweep_dir / ".bisect"
        fixed, grid = parse_arguments(sweeper, arguments)
        keys = list(grid)
        base = [f"{k}={v}" for k, v in fixed.items() if not k.startswith("runtime.")]
        self.jobs = [base + [f"{k}={v}" for k, v in zip(keys, combo)]
                     for combo in itertools.product(*(grid[k] for k in keys))] or [base]
        self.returns: List[Sequence[JobReturn]] = []
        self.next_idx = 0
        self.began = time.monotonic()
        self.state: Dict[str, Any] = {"repo": os.path.abspath(sweeper.repo), "good": sweeper.good,
                                      "bad": sweeper.bad, "path": sweeper.path, "install": sweeper.install,
                                      "status": "running", "probes": []}

    def save(self) -> None:
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        (self.sweep_dir / BISECT_JSON).write_text(json.dumps(self.state, indent=2) + "\n")

    def runnable(self, sha: str) -> Tuple[List[str], Optional[str]]:
        """The overrides that run ``sha`` (``runtime.pythonpath``, ``runtime.python``), or
        ``([], reason)`` when it cannot be made runnable."""
        try:
            tree = export(self.sweeper.repo, sha, self.cache)
            extra = []
            if self.sweeper.install:
                extra.append(f"runtime.python={_value(str(install(tree, sha, self.sweeper.install, self.cache)))}")
            if self.sweeper.path or not self.sweeper.install:
                extra.append(f"runtime.pythonpath={_value(str(tree / self.sweeper.path))}")
            return extra, None
        except (GitError, RuntimeError, OSError, StopIteration) as exc:
            return [], f"{type(exc).__name__}: {exc}" if not isinstance(exc, (GitError, RuntimeError)) else str(exc)

    def probe(self, index: int, commit: Dict[str, str]) -> Dict[str, Any]:
        """Probe one commit: its jobs launched as one batch; the probe's row."""
        sha = commit["sha"]
        row: Dict[str, Any] = {"probe": len(self.state["probes"]), "index": index, "sha": sha,
                               "subject": commit["subject"], "jobs": [], "reason": None}
        extra, reason = self.runnable(sha)
        if reason is not None:
            row.update(verdict=SKIP, reason=reason)
            return row
        batch = [job + extra for job in self.jobs]
        self.sweeper.validate_batch_is_legal(batch)
        first = self.next_idx
        log.info(f"bisect: probe {row['probe']}: {sha[:10]} {commit['subject']!r}: jobs {first}..{first + len(batch) - 1}")
        results = self.sweeper.launcher.launch(batch, initial_job_idx=first)
        self.next_idx += len(batch)
        self.returns.append(results)
        records = [record_of(ret) for ret in results]
        row["jobs"] = list(range(first, first + len(batch)))
        row["statuses"] = [r["status"] for r in records]
        errors = [r for r in records if r["status"] not in ("ok", "fail")]
        if errors:
            row.update(verdict=SKIP, reason=f"job {first + records.index(errors[0])} {errors[0]['status']}: "
                                            f"{errors[0].get('reason')}")
        else:
            row["verdict"] = FAIL if any(r["status"] == "fail" for r in records) else PASS
        return row

    def run(self) -> None:
        try:
            commits = commits_between(self.sweeper.repo, self.sweeper.good, self.sweeper.bad)
        except GitError as exc:
            self.state.update(status="error", reason=str(exc))
            self.finish()
            return
        self.state.update(commits=commits, n_commits=len(commits), bound=Bisection(commits).bound
                          if commits else 0)
        if not commits:
            self.state.update(status="error", reason=f"no commits in {self.sweeper.good}..{self.sweeper.bad}")
            self.finish()
            return
        bisection = Bisection([c["sha"] for c in commits])
        self.save()
        while (index := bisection.next_probe()) is not None:
            row = self.probe(index, commits[index])
            bisection.record(index, row["verdict"])
            self.state["probes"].append(row)
            self.save()
        found = bisection.result()
        last = len(commits) - 1
        if found["first_bad"] == last and last not in bisection.verdicts:
            # every probe passed: the bad end, taken as failing, is probed before it is named
            row = self.probe(last, commits[last])
            bisection.record(last, row["verdict"])
            self.state["probes"].append(row)
            self.save()
            if row["verdict"] == PASS:
                self.state.update(status="bad_passes", bad_jobs=row["jobs"], n_probes=len(self.state["probes"]),
                                  result={"first_bad": None, "candidates": [], "parent": last})
                self.finish()
                return
            found = bisection.result()
        status = "done" if found["first_bad"] is not None else "undecided"
        self.state.update(status=status, result=found, n_probes=len(self.state["probes"]))
        if found["first_bad"] is not None:
            self.state["first_bad"] = commits[found["first_bad"]]
            self.state["parent"] = commits[found["parent"]] if found["parent"] >= 0 else \
                {"sha": git(self.sweeper.repo, "rev-parse", f"{commits[0]['sha']}^"), "subject": "(the good end)"}
        self.finish()

    def finish(self) -> None:
        from sweep.report import bisect_report
        from sweep.report.bisect_report import render, verdict
        from sweep.report.terminal import fit

        self.state.update(n_jobs=self.next_idx, wall_s=time.monotonic() - self.began)
        self.save()
        bisect_report.STATE.clear()
        bisect_report.STATE.update(self.state)
        text = render(self.state)
        (self.sweep_dir / BISECT_MD).write_text(text)
        print("\n" + fit(text), flush=True)
        where = f"bisection: {self.sweep_dir / BISECT_MD} and {BISECT_JSON}"
        atexit.register(print, f"\n{fit(verdict(self.state))}\n{where}", flush=True)


def run_bisection(sweeper: Any, arguments: List[str]) -> List[Sequence[JobReturn]]:
    """``BisectSweeper.sweep``: run the bisection and return every probe's JobReturns."""
    assert sweeper.config is not None and sweeper.launcher is not None
    bisection = Run(sweeper, arguments)
    bisection.run()
    return bisection.returns
