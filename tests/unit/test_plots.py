"""PNG plots of a tiny constructed sweep: loss curves of the failing job, factor effects."""

import pytest

from sweep.analysis.attribution import level_stats
from sweep.report.plots import plot_factor_effects, plot_job, write_plots
from sweep.report.summary import collect
from tests.helpers.records import make_record, write_job

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _job(sweep_dir, num, overrides, status, distributed):
    standalone = [1.0, 0.9, 0.8, 0.7]
    comparison = None if distributed is None else {
        "n_steps": 4, "n_fail": 0 if status == "ok" else 3,
        "first_fail_step": None if status == "ok" else 1, "max_abs_diff": 0.0 if status == "ok" else 0.03, "max_rel_diff": 0.04,
        "mean_signed_diff": -0.015, "first_nonfinite_step": None,
    }
    losses = None if distributed is None else {"standalone": standalone, "distributed": distributed}
    write_job(sweep_dir, num, overrides, make_record(status, overrides, comparison, losses=losses))


@pytest.fixture
def rows(tmp_path):
    _job(tmp_path, 0, ["optimizer=adam"], "ok", [1.0, 0.9, 0.8, 0.7])
    _job(tmp_path, 1, ["optimizer=sgd"], "fail", [1.0, 0.89, 0.78, 0.67])
    _job(tmp_path, 2, ["optimizer=adamw"], "error", None)
    return collect(tmp_path)


def test_failing_jobs_and_factor_effects_become_png_files(tmp_path, rows):
    paths = write_plots(tmp_path / "plots", rows, level_stats(rows))
    assert [p.name for p in paths] == ["job_1.png", "factor_effects.png"]  # not the ok or errored job
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000


def test_plots_refuse_what_they_cannot_draw(tmp_path, rows):
    with pytest.raises(ValueError, match="job 2 has no losses"):
        plot_job(rows[2], tmp_path / "job_2.png")
    with pytest.raises(ValueError, match="no factor varies"):
        plot_factor_effects(rows, [], tmp_path / "factor_effects.png")
    assert not list(tmp_path.glob("*.png"))
