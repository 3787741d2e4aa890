"""Shared fixtures: compose the real config tree, and run the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"


@pytest.fixture
def compose_cfg():
    """compose_cfg(overrides) -> the job config exactly as `python -m sweep overrides` gets it."""
    from sweep.config.schema import register_configs

    register_configs()

    def _compose(overrides: List[str] = ()):
        with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
            return compose(config_name="config", overrides=list(overrides))

    return _compose


def run_cli(args: List[str], tmp_path: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    """`python -m sweep ARGS` from the project root, outputs under tmp_path."""
    cmd = [
        sys.executable, "-m", "sweep", *args,
        f"hydra.run.dir={tmp_path}/run", f"hydra.sweep.dir={tmp_path}/multirun",
    ]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=dict(os.environ))


def flat(text: str) -> str:
    """``text`` with every run of whitespace one space: terminal prose wraps at 120 columns
    (``sweep.report.terminal``), so a sentence may span lines."""
    return " ".join(text.split())


def survivors(job_id: str) -> list:
    """Live processes tagged ``SWEEP_JOB_ID=job_id``. A multirun's fork server (tag
    ``forkserver-...``, ``sweep.launch.forkserver``) leaves by itself once the sweep's process
    has exited, after tearing down its imports, so it is given up to 20 s to do so."""
    import psutil

    from sweep.launch.supervise import tagged_processes

    grace_s = 20 if job_id.startswith("forkserver-") else 0
    _, alive = psutil.wait_procs(tagged_processes(job_id), timeout=grace_s)
    return alive



def sweep_jobs(sweep_dir: Path) -> dict:
    """``{job number: result.json as a dict}`` of a sweep dir."""
    import json

    return {int(p.parent.name): json.loads(p.read_text()) for p in sorted(Path(sweep_dir).glob("*/result.json"))}


@pytest.fixture(scope="module")
def basic_sweep(request, tmp_path_factory):
    """The test module's ``GRID`` through Hydra's default (basic) launcher, on this
    machine: the reference a sweep through another Hydra launcher is compared with
    (:func:`assert_same_sweep`). Its sweep dir."""
    tmp = tmp_path_factory.mktemp("basic")
    proc = run_cli(request.module.GRID, tmp, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp / "multirun"


def assert_same_sweep(sweep_dir: Path, reference: Path) -> dict:
    """Two multiruns of one grid give the same table: the same jobs with the same overrides,
    statuses and loss sequences (bit for bit), the same ``summary.csv`` rows (less the
    wall-clock column) and the same rendered report. Returns ``sweep_dir``'s jobs
    (:func:`sweep_jobs`)."""
    import csv

    from sweep.report.summary import collect, render

    def rows(folder: Path) -> list:
        with open(folder / "summary.csv") as f:
            return [{k: v for k, v in row.items() if k != "wall_s"} for row in csv.DictReader(f)]

    got, want = sweep_jobs(sweep_dir), sweep_jobs(reference)
    assert sorted(got) == sorted(want) and got
    for num in got:
        assert got[num]["overrides"] == want[num]["overrides"]
        assert got[num]["status"] == want[num]["status"], (got[num]["reason"], want[num]["reason"])
        assert got[num]["losses"] == want[num]["losses"]  # bit for bit
    assert rows(sweep_dir) == rows(reference)
    assert render(collect(sweep_dir)) == render(collect(reference))
    return got


def multirun_jobs(tmp_path: Path, *overrides: str, exit_codes: tuple = (0, 1)) -> tuple:
    """`python -m sweep -m ablation=none OVERRIDES` under tmp_path: ``(jobs by number, the
    finished process)``, after asserting that it exited with one of ``exit_codes`` and wrote
    its report (the tail of its output otherwise)."""
    proc = run_cli(["-m", "ablation=none", *overrides], tmp_path)
    assert proc.returncode in exit_codes and (tmp_path / "multirun" / "summary.json").exists(), \
        proc.stdout[-3000:] + proc.stderr[-3000:]
    return sweep_jobs(tmp_path / "multirun"), proc


GROUPS = frozenset(p.name for p in CONF.iterdir() if p.is_dir() and p.name != "hydra")


def _case_yaml(overrides: List[str]) -> str:
    """A ``# @package _global_`` config of ``overrides`` (``group=option`` lines become
    ``override /group: option`` in its defaults list, ``a.b=value`` lines values)."""
    import yaml

    defaults, values = [], {}
    for line in overrides:
        key, _, value = line.lstrip("+").partition("=")
        if key in GROUPS:
            defaults.append({f"override /{key}": value})
            continue
        node = values
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    text = yaml.safe_dump(({"defaults": defaults} if defaults else {}) | values, sort_keys=False)
    return "# @package _global_\n" + text


def case_jobs(tmp_path: Path, cases: dict, *common: str, exit_codes: tuple = (0, 1)) -> tuple:
    """One multirun whose jobs are the named ``cases`` (name -> its overrides), on the
    product's fast path (shared launches, baseline reuse), where each test would otherwise
    start a run of its own: each case becomes a config of a ``case`` group on a search path
    of its own (``hydra.searchpath``), swept as ``+case=a,b,...``. Returns ``({name: (result
    dict, job dir)}, the finished process)``."""
    root = tmp_path / "cases"
    (root / "case").mkdir(parents=True, exist_ok=True)
    for name, overrides in cases.items():
        (root / "case" / f"{name}.yaml").write_text(_case_yaml(list(overrides)))
    jobs, proc = multirun_jobs(tmp_path, f"hydra.searchpath=[file://{root}]", f"+case={','.join(cases)}", *common,
                               exit_codes=exit_codes)
    by_name = {}
    for num, record in jobs.items():
        name = next(o.partition("=")[2] for o in record["overrides"] if o.lstrip("+").startswith("case="))
        by_name[name] = (record, tmp_path / "multirun" / str(num))
    assert set(by_name) == set(cases), proc.stdout[-3000:] + proc.stderr[-3000:]
    return by_name, proc


def culprits_named(summary: dict) -> list:
    """The findings of ``summary.json`` that name a culprit (``sweep.report.summary.CULPRIT_CODES``)."""
    from sweep.report.summary import CULPRIT_CODES

    return [f for f in summary.get("findings") or [] if f["code"] in CULPRIT_CODES]


def finding_codes(summary: dict) -> list:
    """The codes of ``summary.json``'s findings, in their order."""
    return [f["code"] for f in summary.get("findings") or []]
