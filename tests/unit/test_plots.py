"""PNG plots of a tiny constructed sweep: loss curves of the failing job, factor effects."""

import pytest

from sweep.analysis.grid import level_stats
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


def test_a_page_links_its_static_plots_and_embeds_none(tmp_path):
    """summary.html links the PNGs (folded: the interactive charts replace them on the
    page, issue 40) and embeds none, so its size does not grow with the plots."""
    from sweep.report.page import grid_page

    plots = tmp_path / "plots"
    plots.mkdir()
    paths = []
    for i in range(20):
        path = plots / f"job_{i}.png"
        path.write_bytes(PNG_MAGIC + bytes(180_000))  # the size of a job plot
        paths.append(path)
    att = {"headline": "20 jobs: 20 ok.", "verdict": "20 jobs: 20 ok.", "counts": {"ok": 20}, "culprits": [],
           "levels": [], "factors": [], "contrasts": [], "interactions": [], "not_judged": []}
    page = grid_page(tmp_path, [], att, paths)
    assert len(page.encode()) < 200_000 and "data:image/png" not in page
    assert '<a href="plots/job_19.png">job_19</a>' in page


def test_a_job_plot_within_tolerance_says_so_not_none(tmp_path, rows, monkeypatch):
    from matplotlib.figure import Figure

    titles = []
    monkeypatch.setattr(Figure, "suptitle", lambda self, text, **kw: titles.append(text))
    plot_job(dict(rows[0], first_fail_step=None), tmp_path / "job_0.png")
    assert titles == ["job 0 (ok, within tolerance): optimizer=adam"]


def test_a_command_with_dollars_in_its_overrides_is_drawn_literally(tmp_path):
    """A runner=command job's overrides hold shell text (``$SWEEP_JOB_DIR``, ``${steps}``),
    which matplotlib's mathtext cannot parse: the titles and ticks take it as plain text."""
    shell = "runner.command='run.py --out $SWEEP_JOB_DIR/x --tag=\"${mp_policy.name}\" ${steps}'"
    _job(tmp_path, 0, [shell, "+runner.args.reduce=mean"], "ok", [1.0, 0.9, 0.8, 0.7])
    _job(tmp_path, 1, [shell, "+runner.args.reduce=$sum"], "fail", [1.0, 0.89, 0.78, 0.67])
    rows = collect(tmp_path)
    paths = write_plots(tmp_path / "plots", rows, level_stats(rows))
    assert [p.name for p in paths] == ["job_1.png", "factor_effects.png"]
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in paths)


def test_long_level_names_become_readable_ticks_of_a_few_lines():
    from sweep.report.plots import tick_label

    assert tick_label("sgd") == "sgd"
    assert tick_label("tests.helpers.planted_step_faults.OverridesIgnoredFSDP2") == \
        "tests.helpers.planted_\nstep_faults.\nOverridesIgnoredFSDP2"
    long = tick_label("a.very.long.module.path.of.a.user.package.with.many.parts.ReplicaSumFSDP2")
    assert long.startswith("…") and long.endswith("ReplicaSumFSDP2") and long.count("\n") == 2
    assert all(len(line) <= 25 for line in long.splitlines())


def test_every_label_of_a_job_plot_and_the_factor_effects_lies_inside_the_figure(tmp_path, monkeypatch):
    """The job plot's middle y-label was clipped at the figure's left edge by long tick
    labels (0.0015), and one factor's effects squashed the title and the legend."""
    from matplotlib.figure import Figure

    engine = "engine.impl.torch=tests.helpers.planted_step_faults.OverridesIgnoredFSDP2"
    _job(tmp_path, 0, ["engine.impl.torch=sweep.engines.torch_fsdp2.TorchFSDP2"], "ok", [1.0, 0.9, 0.8, 0.7])
    _job(tmp_path, 1, [engine], "fail", [1.0, 0.9015, 0.7985, 0.7012])
    rows = collect(tmp_path)
    outside = []
    save = Figure.savefig

    def check(fig, path, **kw):
        fig.canvas.draw()  # ticks placed, layout done, as savefig draws it
        renderer = fig.canvas.get_renderer()
        width, height = fig.bbox.width, fig.bbox.height
        # each panel as drawn (its labels, ticks, title and legend: Axes.get_tightbbox), the
        # figure's legends and its title
        boxes = [(f"axes {i}", ax.get_tightbbox(renderer)) for i, ax in enumerate(fig.axes)]
        boxes += [("legend", legend.get_window_extent(renderer)) for legend in fig.legends]
        boxes += [("title", fig._suptitle.get_window_extent(renderer))] if fig._suptitle is not None else []
        for name, box in boxes:
            if box.x0 < -1 or box.y0 < -1 or box.x1 > width + 1 or box.y1 > height + 1:
                outside.append((path.name, name, [round(v) for v in box.extents], (width, height)))
        return save(fig, path, **kw)

    monkeypatch.setattr(Figure, "savefig", check)
    paths = write_plots(tmp_path / "plots", rows, level_stats(rows))
    assert [p.name for p in paths] == ["job_1.png", "factor_effects.png"] and not outside, outside


def test_a_zero_tolerance_is_drawn_without_a_warning(tmp_path):
    # compare.rtol=0 compare.atol=0: a log axis cannot draw the zero tolerance (matplotlib warned
    # "Data has no positive values"); the job plot labels it instead, the factor plot leaves it out
    import warnings

    for num, option in enumerate(["adam", "sgd"]):
        comparison = {"n_steps": 4, "n_fail": 3, "first_fail_step": 1, "max_abs_diff": 0.03 * (num + 1),
                      "max_rel_diff": 0.04, "mean_signed_diff": -0.015, "first_nonfinite_step": None,
                      "rtol": 0.0, "atol": 0.0}
        write_job(tmp_path, num, [f"optimizer={option}"], make_record(
            "fail", [f"optimizer={option}"], comparison,
            losses={"standalone": [1.0, 0.9, 0.8, 0.7], "distributed": [1.0, 0.89, 0.78, 0.67]}))
    rows = collect(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        paths = write_plots(tmp_path / "plots", rows, level_stats(rows))
    assert sorted(p.name for p in paths) == ["factor_effects.png", "job_0.png", "job_1.png"]
