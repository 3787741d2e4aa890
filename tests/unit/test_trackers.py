"""The logger group's trackers, read back with each library's own reader, on a
constructed sweep dir (the report written first, as SummaryCallback does)."""

import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sweep.report.summary import write_report
from tests.helpers.records import make_record, write_job

CONFIG = {"optimizer": {"name": "adam", "lr": 1e-4}, "steps": 3}


def _cmp(passed, first, mean):
    return {"passed": passed, "first_fail_step": first, "n_fail": 0 if passed else 3, "n_steps": 3,
            "max_abs_diff": abs(mean), "max_rel_diff": abs(mean), "mean_signed_diff": mean}


@pytest.fixture
def sweep_dir(tmp_path):
    """Job 0 ok (adam), job 1 fail (sgd, runs low by 0.5 from step 0), job 2 error; report written."""
    d = tmp_path / "2026-11-30_16-00-00"
    for num, (opt, status, mean) in enumerate([("adam", "ok", 0.0), ("sgd", "fail", -0.5)]):
        losses = {"standalone": [1.0, 0.9, 0.8], "distributed": [1.0 + mean, 0.9 + mean, 0.8 + mean]}
        record = make_record(status, [f"optimizer={opt}"], _cmp(status == "ok", None if status == "ok" else 0, mean),
                             None if status == "ok" else "3/3 steps fail", losses=losses, config=CONFIG)
        write_job(d, num, [f"optimizer={opt}"], record)
    write_job(d, 2, ["optimizer=adamw"], make_record("error", ["optimizer=adamw"], reason="launcher exited with code 1"))
    write_report(d)
    assert (d / "plots" / "job_1.png").exists() and (d / "plots" / "factor_effects.png").exists()
    return d


def _end(callback, sweep_dir):
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}})
    callback.on_multirun_end(config)


def test_mlflow_runs_per_job_under_the_sweep(sweep_dir, capsys):
    pytest.importorskip("mlflow", reason="mlflow is not installed: pip install -e '.[mlflow]'")
    pytest.importorskip("sqlalchemy", reason="the sqlite store needs SQLAlchemy: pip install -e '.[mlflow]'")
    from mlflow.tracking import MlflowClient

    from sweep.trackers.mlflow import MlflowCallback

    _end(MlflowCallback(), sweep_dir)
    _end(MlflowCallback(), sweep_dir)  # logged again (a resumed sweep): replaces the first runs
    assert "3 job(s) logged to sqlite:///" in capsys.readouterr().out
    client = MlflowClient(tracking_uri=f"sqlite:///{sweep_dir.resolve() / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("sweep")
    found = client.search_runs([experiment.experiment_id])
    runs = {r.info.run_name: r for r in found}
    assert len(found) == 4 and set(runs) == {"job 0", "job 1", "job 2", sweep_dir.name}
    parent = runs[sweep_dir.name]
    assert parent.data.tags["sweep.verdict"].startswith("3 jobs: 1 ok, 1 fail, 1 error")
    assert all(runs[f"job {n}"].data.tags["mlflow.parentRunId"] == parent.info.run_id for n in range(3))
    failed = runs["job 1"]
    assert failed.data.params == {"optimizer": "sgd"} and failed.info.status == "FAILED"
    assert failed.data.tags["sweep.status"] == "fail" and failed.data.tags["sweep.drift"] == "step0"
    assert failed.data.metrics["mean_signed_diff"] == -0.5 and failed.data.metrics["passed"] == 0.0
    history = client.get_metric_history(failed.info.run_id, "loss/difference")
    assert [m.step for m in history] == [0, 1, 2] and all(m.value == pytest.approx(-0.5) for m in history)
    assert [a.path for a in client.list_artifacts(failed.info.run_id, "plots")] == ["plots/job_1.png"]
    assert runs["job 0"].info.status == "FINISHED"
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} >= {"summary.md", "summary.csv", "plots"}


def test_tensorboard_event_files_per_job(sweep_dir):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed: pip install -e '.[tensorboard]'")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from sweep.trackers.tensorboard import TensorBoardCallback

    _end(TensorBoardCallback(), sweep_dir)
    _end(TensorBoardCallback(), sweep_dir)  # logged again (a resumed sweep): replaces the first events
    root = sweep_dir / "tensorboard"
    assert sorted(p.name for p in root.iterdir()) == ["job_0", "job_1", "job_2", "sweep"]
    job = EventAccumulator(str(root / "job_1"), size_guidance={"images": 0, "scalars": 0, "tensors": 0}).Reload()
    assert [e.step for e in job.Scalars("loss/difference")] == [0, 1, 2]
    assert len(list((root / "job_1").iterdir())) == 1  # one event file
    assert all(e.value == pytest.approx(-0.5) for e in job.Scalars("loss/difference"))
    assert job.Scalars("metrics/mean_signed_diff")[0].value == -0.5
    assert job.Tags()["images"] == ["plot"] and job.Images("plot")[0].width > 0
    text = job.Tensors("verdict/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "**status**: fail" in text and "optimizer=sgd" in text
    sweep = EventAccumulator(str(root / "sweep"), size_guidance={"images": 0}).Reload()
    assert sweep.Tags()["images"] == ["factor_effects"] and sweep.Scalars("jobs/ok")[0].value == 1.0


def test_wandb_offline_runs(sweep_dir):
    pytest.importorskip("wandb", reason="wandb is not installed: pip install -e '.[wandb]'")
    from sweep.trackers.wandb import WandbCallback
    from tests.helpers.wandb_offline import read_run

    _end(WandbCallback(), sweep_dir)
    runs = {r["name"]: r for r in map(read_run, sorted((sweep_dir / "wandb").glob("offline-run-*")))}
    assert set(runs) == {"job 0", "job 1", "job 2", f"sweep {sweep_dir.name}"}
    assert {r["group"] for r in runs.values()} == {sweep_dir.name}
    failed = runs["job 1"]
    assert failed["config"]["optimizer"] == "sgd" and failed["job_type"] == "job"
    losses = [row for row in failed["history"] if "loss/difference" in row]
    assert [row["_step"] for row in losses] == [0, 1, 2]
    assert all(row["loss/difference"] == pytest.approx(-0.5) for row in losses)
    assert failed["summary"]["status"] == "fail" and failed["summary"]["mean_signed_diff"] == -0.5
    assert failed["summary"]["plot/_type"] == "image-file"
    run_dir = next((sweep_dir / "wandb").glob(f"offline-run-*-{failed['id']}"))
    assert (run_dir / "files" / failed["summary"]["plot/path"]).exists()
    assert runs[f"sweep {sweep_dir.name}"]["summary"]["verdict"].startswith("3 jobs: 1 ok, 1 fail, 1 error")


@pytest.mark.parametrize("logger, module", [("mlflow", "mlflow"), ("mlflow", "sqlalchemy"), ("tensorboard", "tensorboard"),
                                           ("wandb", "wandb")])
def test_missing_tracker_is_one_line_naming_the_extra(tmp_path, logger, module):
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            "from omegaconf import OmegaConf\n"
            f"from hydra.utils import instantiate\n"
            f"cfg = OmegaConf.load('sweep/config/conf/logger/{logger}.yaml').hydra.callbacks.logger\n"
            "instantiate(cfg).on_multirun_start(OmegaConf.create({}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and f"[{logger}]" in done.stderr and "pip install" in done.stderr


def test_logger_callback_runs_after_the_report(compose_cfg):
    from hydra import compose, initialize_config_dir

    from tests.conftest import CONF

    compose_cfg()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        for logger in ("mlflow", "tensorboard", "wandb"):
            cfg = compose(config_name="config", overrides=[f"logger={logger}"], return_hydra_config=True)
            names = list(cfg.hydra.callbacks)
            # Hydra calls on_multirun_end in reverse order: first in the dict = after the summary
            assert names.index("logger") < names.index("summary")
            assert "logger" not in cfg  # only hydra.callbacks: the job config is unchanged


def test_the_logger_is_a_switch_of_the_run_not_a_factor():
    from sweep.report.summary import _pairs
    from sweep.run.sweep_dir import grid_text

    assert _pairs(["logger=mlflow", "optimizer=adam"]) == {"optimizer": "adam"}
    assert grid_text([["logger=mlflow", "optimizer=adam"], ["logger=mlflow", "optimizer=sgd"]]) == "2 jobs: optimizer=adam,sgd"


def test_a_single_run_is_logged_into_its_run_dir(sweep_dir):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed: pip install -e '.[tensorboard]'")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from sweep.trackers.tensorboard import TensorBoardCallback

    run_dir = sweep_dir / "1"
    TensorBoardCallback().on_run_end(OmegaConf.create({"hydra": {"runtime": {"output_dir": str(run_dir)}}}))
    acc = EventAccumulator(str(run_dir / "tensorboard" / "run")).Reload()
    assert [e.value for e in acc.Scalars("loss/difference")] == pytest.approx([-0.5] * 3)
    assert acc.Scalars("metrics/passed")[0].value == 0.0


def test_replace_grid_moves_the_tracker_logs_aside(tmp_path):
    from sweep.run.sweep_dir import claim

    (tmp_path / "0").mkdir()
    (tmp_path / "mlflow.db").write_text("old grid")
    (tmp_path / "tensorboard" / "job_0").mkdir(parents=True)
    claim(tmp_path, [["optimizer=sgd"]], [["optimizer=adam"]], replace_grid=True).release()
    (moved,) = (tmp_path / ".replaced").iterdir()
    assert (moved / "mlflow.db").read_text() == "old grid" and (moved / "tensorboard" / "job_0").is_dir()
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "tensorboard").exists()
