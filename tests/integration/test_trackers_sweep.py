"""A real tiny sweep (2 torch jobs of 3 steps) logged by each tracker, read back with the
library's own reader, and loaded as DataFrames."""

import importlib.util

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow

MODULES = {"mlflow": "mlflow", "tensorboard": "tensorboard", "wandb": "wandb"}


@pytest.mark.exhaustive
@pytest.mark.parametrize("logger", ["tensorboard", "mlflow", "wandb"])
def test_a_sweep_logged_by_each_tracker(tmp_path, logger):
    if importlib.util.find_spec(MODULES[logger]) is None:
        pytest.skip(f"{logger} is not installed: pip install -e '.[{logger}]'")
    done = run_cli(["-m", "ablation=none", "steps=3", "optimizer=adam,sgd", f"logger={logger}"], tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    sweep_dir = tmp_path / "multirun"
    out = done.stdout
    assert f"logger={logger}: 2 job(s) logged" in out
    assert out.index("summary: ") < out.index(f"logger={logger}:")  # after the report
    if logger == "mlflow":
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=f"sqlite:///{sweep_dir.resolve() / 'mlflow.db'}")
        runs = client.search_runs([client.get_experiment_by_name("sweep").experiment_id])
        jobs = {r.info.run_name: r for r in runs if r.info.run_name.startswith("job ")}
        assert {r.data.params["optimizer"] for r in jobs.values()} == {"adam", "sgd"}
        assert [m.step for m in client.get_metric_history(jobs["job 0"].info.run_id, "loss/standalone")] == [0, 1, 2]
        assert jobs["job 0"].data.tags["sweep.status"] == "ok"
    elif logger == "tensorboard":
        from tensorboard.backend.event_processing.event_accumulator import (
            EventAccumulator,
        )

        acc = EventAccumulator(str(sweep_dir / "tensorboard" / "job_1")).Reload()
        assert [e.step for e in acc.Scalars("loss/distributed")] == [0, 1, 2]
        assert acc.Scalars("metrics/passed")[0].value == 1.0
    else:
        from tests.helpers.wandb_offline import read_run

        runs = [read_run(d) for d in (sweep_dir / "wandb").glob("offline-run-*")]
        job = next(r for r in runs if r["name"] == "job 1")
        assert job["config"]["optimizer"] == "sgd" and job["summary"]["status"] == "ok"
        assert [row["_step"] for row in job["history"] if "loss/difference" in row] == [0, 1, 2]


def test_a_real_sweep_as_dataframes(tmp_path):
    pd = pytest.importorskip("pandas", reason="pandas is not installed: pip install -e '.[pandas]'")
    import sweep

    done = run_cli(["-m", "ablation=none", "steps=3", "optimizer=adam,sgd"], tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = sweep.load(tmp_path / "multirun")
    assert list(jobs["optimizer.name"]) == ["adam", "sgd"] and set(jobs["status"]) == {"ok"}
    assert (jobs["steps"] == 3).all() and (jobs["mesh.mesh_shape"] == (2,)).all()
    steps = sweep.load_steps(tmp_path / "multirun")
    assert len(steps) == 2 * 2 * 3 and sorted(steps["rank"].unique()) == [0, 1]
    assert isinstance(steps, pd.DataFrame) and (steps["difference"].abs() < 1e-4).all()
