"""Where every file of a job dir, a pool dir and a sweep dir lives: the one place that
spells out the on-disk layout.

A job dir (``hydra.runtime.output_dir``; ``SWEEP_DIR/<job num>/`` in a multirun)::

    job.yaml                  the resolved config the ranks read (written by the job)
    result.json               the job's record (sweep.records.JobRecord), written last
    plot.png                  a single run's curves and difference (sweep.report.plots)
    report.html, plotly.min.js  a single run's page and the charts' script (sweep.report.page;
                              the script a hard link to the plotly package's file)
    ranks/rank_<r>.json       rank r's result (sweep.records.RankResult)
    ranks/standalone.json     the standalone sequence when it was computed elsewhere
                              (order=separate, or a baseline reused from the sweep)
    ranks/twin.json           the standalone copy's twin, when the job found it cached
                              (its losses: the rounding envelope, sweep.train.twin)
    ranks/init_<who>.<ext>    weights.transfer=checkpoint's checkpoint files
    ranks/initial_weights.npz the distributed copy's initial weights, for a standalone copy in
                              another framework (baseline.framework; sweep.models.convert)
    ranks/trace_<who>.pkl     a tracing rerun's trace of one copy, where the other copy traced in
                              another framework's process (baseline.framework; sweep.train.trace_files)
    logs/launcher.log         the framework launcher's output (a launch of the job's own)
    logs/worker_<r>.log       rank r's output (msrun also writes scheduler.log)
    .hydra/overrides.yaml     Hydra's record of the job's overrides
    trace/                    the tracing rerun (sweep.run.job), a job dir of its own; with
                              compare.trace_capture=staged its ranks/ also hold, per rank r
                              (sweep.train.trace_book): tensors_<r>.jsonl (every traced tensor's
                              digest and statistics), pairs_<r>.jsonl (each pair's statistics),
                              capture_<r>.npz (the decisive tensors, both copies); spool_<r>/ is
                              the scratch spool while the rerun runs
    .pools/<name>/            a single run's shared launch (the job and its tracing rerun),
                              as in a sweep dir: the launcher's logs are there

A sweep dir (``hydra.sweep.dir``)::

    multirun.yaml             Hydra's record of the multirun (its grid)
    <num>/                    one job dir per job
    summary.md|html|csv|json  the report (sweep.report.summary); junit.xml: one test case per job
    plotly.min.js             the script of summary.html's charts (sweep.report.page), a hard link as above
    plots/                    its PNGs
    .baselines/<key>.json     reused standalone sequences (sweep.run.baseline)
    .pools/<name>/            shared launches (sweep.run.pool): a pool dir each
    .pools/forkserver.log     the fork server's output
    mlflow.db, mlartifacts/   logger=mlflow's default store (sweep.trackers)
    tensorboard/, wandb/      logger=tensorboard's event files, logger=wandb's offline runs

A pool dir: ``pool.yaml`` (the first job's config), ``owner.pid`` (the sweep process),
``queue/000000`` ... (job dirs to run, or ``STOP``), ``logs/``.
"""

from __future__ import annotations

from pathlib import Path

JOB_CONFIG = "job.yaml"
RESULT = "result.json"
RANKS_DIR = "ranks"
STANDALONE_RESULT = "standalone.json"
TWIN_RESULT = "twin.json"
INITIAL_WEIGHTS = "initial_weights.npz"
LOGS_DIR = "logs"
LAUNCHER_LOG = "launcher.log"
HYDRA_OVERRIDES = ".hydra/overrides.yaml"

MULTIRUN_YAML = "multirun.yaml"
SUMMARY_FILES = ("summary.md", "summary.csv", "summary.json", "summary.html", "junit.xml", "plotly.min.js")
PLOTS_DIR = "plots"
BASELINES_DIR = ".baselines"
POOLS_DIR = ".pools"
FORKSERVER_LOG = "forkserver.log"
TRACKER_FILES = ("mlflow.db", "mlartifacts", "tensorboard", "wandb")  # the logger group's default places

POOL_CONFIG = "pool.yaml"
POOL_OWNER = "owner.pid"
QUEUE_DIR = "queue"
STOP = "STOP"


class JobDir:
    """Paths of one job dir (see the module docstring). Creates nothing."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def __fspath__(self) -> str:
        return str(self.path)

    @property
    def config(self) -> Path:
        return self.path / JOB_CONFIG

    @property
    def result(self) -> Path:
        return self.path / RESULT

    @property
    def plot(self) -> Path:
        return self.path / "plot.png"

    @property
    def ranks(self) -> Path:
        return self.path / RANKS_DIR

    def rank_result(self, rank: int) -> Path:
        return self.ranks / f"rank_{rank}.json"

    def failed(self, rank: int) -> Path:
        """``logs/failed_<rank>``: left by a rank of a shared launch whose job raised, in the
        second it waits before it exits (``sweep.train.__main__.serve``): the supervisor asks
        the other ranks for their stacks while they live (``sweep.run.pool``), so a rank that
        hangs outside the collective the failed one gave up on is named."""
        return self.logs / f"failed_{rank}"

    @property
    def standalone_result(self) -> Path:
        return self.ranks / STANDALONE_RESULT

    @property
    def twin_result(self) -> Path:
        """``ranks/twin.json``: the twin's record the job took from the sweep's cache
        (``sweep.train.twin``); the ranks then train no twin."""
        return self.ranks / TWIN_RESULT

    def checkpoint(self, who: str, suffix: str) -> Path:
        """``ranks/init_<who><suffix>``: ``who`` is ``rank_<r>`` or ``standalone``."""
        return self.ranks / f"init_{who}{suffix}"

    @property
    def initial_weights(self) -> Path:
        """``ranks/initial_weights.npz``: rank 0's record of the distributed copy's initial
        weights, which a standalone copy in another framework starts from (``baseline.framework``)."""
        return self.ranks / INITIAL_WEIGHTS

    def trace_file(self, who: str) -> Path:
        """``ranks/trace_<who>.pkl``: ``who`` is ``rank_<r>`` or ``standalone``
        (``sweep.train.trace_files``)."""
        return self.ranks / f"trace_{who}.pkl"

    @property
    def logs(self) -> Path:
        return self.path / LOGS_DIR

    @property
    def launcher_log(self) -> Path:
        return self.logs / LAUNCHER_LOG

    def worker_log(self, rank: int) -> Path:
        return self.logs / f"worker_{rank}.log"

    @property
    def overrides(self) -> Path:
        return self.path / HYDRA_OVERRIDES


class SweepDir:
    """Paths of one sweep dir (see the module docstring). Creates nothing."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def __fspath__(self) -> str:
        return str(self.path)

    def job(self, num: int) -> JobDir:
        return JobDir(self.path / str(num))

    def job_dirs(self) -> list[Path]:
        """The numbered job dirs that exist, in job order."""
        if not self.path.is_dir():
            return []
        dirs = [p for p in self.path.iterdir() if p.is_dir() and p.name.isdigit()]
        return sorted(dirs, key=lambda p: int(p.name))

    @property
    def multirun_yaml(self) -> Path:
        return self.path / MULTIRUN_YAML

    def summary(self, suffix: str) -> Path:
        """``summary.<suffix>`` (``md``, ``csv``, ``json``)."""
        return self.path / f"summary.{suffix}"

    @property
    def plots(self) -> Path:
        return self.path / PLOTS_DIR

    @property
    def baselines(self) -> Path:
        return self.path / BASELINES_DIR

    @property
    def pools(self) -> Path:
        return self.path / POOLS_DIR

    @property
    def forkserver_log(self) -> Path:
        return self.pools / FORKSERVER_LOG


class PoolDir:
    """Paths of one shared launch's dir (``sweep.run.pool``). Creates nothing."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    @property
    def config(self) -> Path:
        return self.path / POOL_CONFIG

    @property
    def owner(self) -> Path:
        return self.path / POOL_OWNER

    @property
    def queue(self) -> Path:
        return self.path / QUEUE_DIR

    def item(self, seq: int) -> Path:
        return self.queue / f"{seq:06d}"

    @property
    def launcher_log(self) -> Path:
        return self.path / LOGS_DIR / LAUNCHER_LOG


def is_pool_dir(path: Path | str) -> bool:
    """Whether ``path`` is a pool dir (it holds ``pool.yaml``) rather than a job dir."""
    return (Path(path) / POOL_CONFIG).exists()
