"""``logger=mlflow``: each job an MLflow run, nested under one parent run per sweep.

The default store needs no server: ``sqlite:///<sweep dir>/mlflow.db`` (a single run:
``<run dir>/mlflow.db``), artifacts in ``<that dir>/mlartifacts``. Browse it with
``mlflow ui --backend-store-uri sqlite:///<sweep dir>/mlflow.db``, read it with
``mlflow.tracking.MlflowClient(tracking_uri=...)``. Any tracking URI works
(``hydra.callbacks.logger.tracking_uri=http://host:5000``, one sqlite file for all sweeps, ...).

Per job run (name ``job <num>``, tag ``mlflow.parentRunId`` = the sweep's run): params =
the overrides; step metrics ``loss/standalone``, ``loss/distributed``, ``loss/difference``;
metrics = the report's numbers and ``passed``; tags ``sweep.status``, ``sweep.reason``,
``sweep.drift``, ``sweep.notes``, ``sweep.run.job``; artifacts ``result.json``, ``job.yaml``
and the plot under ``plots/``; run status FINISHED for ok, FAILED otherwise. The sweep's
run (name = the sweep dir's name, tag ``sweep.dir``): tag ``sweep.verdict``, metrics
``jobs_<status>``, the report files and the factor-effects plot. Logging a sweep dir again
(a resumed sweep) deletes the runs it logged before (tag ``sweep.dir``), so the store
holds each sweep once. Extra: ``mlflow``
(mlflow-skinny with SQLAlchemy and Alembic for the sqlite store).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional

from sweep.trackers import JobLog, SweepLog, TrackerCallback, require

BATCH = 1000  # MLflow's limit of metrics per log_batch call
TAG_LIMIT = 5000  # characters of a tag value MLflow stores


class MlflowCallback(TrackerCallback):
    """``tracking_uri``: ``None`` = sqlite in the sweep (or run) dir; ``experiment_name``:
    the experiment every sweep's runs go to (created when missing)."""

    MODULE = "mlflow"
    EXTRA = "mlflow"

    def __init__(self, tracking_uri: Optional[str] = None, experiment_name: str = "sweep") -> None:
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name

    def modules(self) -> List[str]:
        """mlflow; and SQLAlchemy and Alembic for a sqlite store (the default)."""
        sqlite = self.tracking_uri is None or str(self.tracking_uri).startswith("sqlite:")
        return ["mlflow", "sqlalchemy", "alembic"] if sqlite else ["mlflow"]

    def log_jobs(self, sweep: Optional[SweepLog], jobs: List[JobLog], where: Path) -> str:
        require("mlflow", self.EXTRA)
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        where = Path(where).resolve()
        uri = self.tracking_uri or f"sqlite:///{where / 'mlflow.db'}"
        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(self.experiment_name)
        experiment_id = experiment.experiment_id if experiment is not None else client.create_experiment(
            self.experiment_name, artifact_location=(where / "mlartifacts").as_uri() if not self.tracking_uri else None
        )
        parent_tags = {}
        if sweep is not None:  # a sweep logged again (resumed, re-run) replaces its earlier runs
            earlier = client.search_runs([experiment_id], filter_string=f"tags.`sweep.dir` = '{sweep.dir}'")
            for run in earlier:
                client.delete_run(run.info.run_id)
            parent = client.create_run(experiment_id, run_name=sweep.name,
                                       tags={"sweep.dir": str(sweep.dir), "sweep.verdict": sweep.verdict[:TAG_LIMIT]})
            now = int(time.time() * 1000)
            client.log_batch(parent.info.run_id, metrics=[Metric(f"jobs_{k}", float(v), now, 0)
                                                           for k, v in sweep.counts.items()])
            for path in sweep.artifacts:
                client.log_artifact(parent.info.run_id, str(path))
            for path in sweep.plots:
                client.log_artifact(parent.info.run_id, str(path), "plots")
            parent_tags["mlflow.parentRunId"] = parent.info.run_id
        for job in jobs:
            tags = {**parent_tags, "sweep.run.job": str(job.num), "sweep.dir": str(sweep.dir if sweep else job.job_dir),
                    **{f"sweep.{k}": v[:TAG_LIMIT] for k, v in job.verdict.items()}}
            run = client.create_run(experiment_id, run_name=job.name, tags=tags)
            run_id = run.info.run_id
            now = int(time.time() * 1000)
            metrics = [Metric(name, value, now, step) for name, values in job.series.items()
                       for step, value in enumerate(values)]
            metrics += [Metric(name, value, now, 0) for name, value in job.metrics.items()]
            params = [Param(k, str(v)[:6000]) for k, v in job.params.items()]
            for start in range(0, max(len(metrics), 1), BATCH):
                client.log_batch(run_id, metrics=metrics[start:start + BATCH],
                                 params=params if start == 0 else [])
            for path in job.artifacts:
                client.log_artifact(run_id, str(path), "plots" if path in job.plots else None)
            client.set_terminated(run_id, "FINISHED" if job.ok else "FAILED")
        if sweep is not None:
            client.set_terminated(parent_tags["mlflow.parentRunId"], "FINISHED")
        return f"{uri} (experiment {self.experiment_name!r})"


