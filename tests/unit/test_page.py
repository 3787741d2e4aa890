"""The report page (sweep.report.page, sweep.report.charts) on constructed sweeps: its
order, its folds, the table's data for the filters, the charts' specs (checked by plotly's
validator) and the size budget. The page in a real browser: tests/integration/test_report_page.py."""

import json
import re

import pytest

from sweep.analysis.grid import level_stats
from sweep.report import charts
from sweep.report.page import grid_page, job_table, prose
from sweep.report.summary import collect, main, write_report
from tests.helpers.records import make_record, write_job


def _cmp(passed, mean, n=10):
    return {"first_fail_step": None if passed else 2, "n_fail": 0 if passed else 3, "n_steps": n,
            "max_abs_diff": abs(mean), "max_rel_diff": abs(mean), "mean_signed_diff": mean, "rtol": 1e-4,
            "atol": 1e-4, "passed": passed}


@pytest.fixture
def sweep_dir(tmp_path):
    root = tmp_path / "grid"
    engine = "sweep.engines.torch_fsdp2.TorchFSDP2"
    for num, (opt, mesh) in enumerate([("adam", "dp2"), ("sgd", "dp2"), ("adam", "dp4"), ("sgd", "dp4")]):
        overrides = [f"optimizer={opt}", f"mesh={mesh}", f"engine.impl.torch={engine}", "steps=10"]
        ok = opt == "adam"
        write_job(root, num, overrides, make_record("ok" if ok else "fail", overrides, _cmp(ok, 0.0 if ok else -0.5)))
    write_job(root, 4, ["optimizer=adamw", "mesh=dp2", f"engine.impl.torch={engine}", "steps=10"],
              make_record("error", [], reason="rank 1: RuntimeError: boom"))
    return root


def _blocks(page):
    """The page's top-level parts in order: (tag, id or summary text)."""
    body = page[page.index("<body>"):]
    return [(tag, (re.search(r'id="([^"]*)"', attrs) or [None, ""])[1])
            for tag, attrs in re.findall(r"<(section|details)([^>]*)>", body)]


def test_the_page_opens_with_the_headline_then_the_findings_with_their_codes(sweep_dir):
    write_report(sweep_dir)
    page = (sweep_dir / "summary.html").read_text()
    att = json.loads((sweep_dir / "summary.json").read_text())
    first = re.search(r'<section class="headline[^"]*" id="headline">(.*?)</section>', page, re.S)
    assert first and first.group(1) == att["headline"].replace("'", "&#x27;") and len(att["headline"]) <= 400
    parts = _blocks(page)
    assert parts[0] == ("section", "headline") and parts[1] == ("section", "findings")
    assert parts.index(("section", "findings")) < parts.index(("section", "jobs"))
    assert "<details><summary>Legend" in page and "<details><summary>Factor levels" in page
    findings = page[page.index('id="findings"'):page.index('id="jobs"')]
    assert all(f["code"] in findings for f in att["findings"] if f["code"] != "V000")  # the same findings
    assert "V101 culprit: Culprit: optimizer=sgd" in findings


def test_the_job_table_shortens_long_values_and_lists_the_shared_overrides_once(sweep_dir):
    rows = collect(sweep_dir)
    html = job_table(rows, ["optimizer", "mesh"], ["engine.impl.torch=sweep.engines.torch_fsdp2.TorchFSDP2"])
    assert html.count("engine.impl.torch=") == 1 and "<b>Every job:</b>" in html
    assert 'data-key="status"' in html and 'data-key="f0"' in html and 'data-key="f1"' in html
    assert html.count("<tr data-job=") == 5 and 'data-status="error"' in html and 'data-f0="adamw"' in html
    assert 'title="rank 1: RuntimeError: boom"' in html  # a status cell's hover gives the reason
    assert charts.short("sweep.engines.torch_fsdp2.TorchFSDP2") == "TorchFSDP2"
    assert charts.short("x" * 40, 10) == "x" * 9 + "…" and charts.short("1.5e-05") == "1.5e-05"


def test_the_curves_chart_has_a_line_per_job_and_the_tolerance_band(sweep_dir):
    rows = collect(sweep_dir)
    spec = charts.curves_figure(rows, ["optimizer", "mesh"])
    jobs = [t for t in spec["data"] if "meta" in t]
    assert [t["meta"] for t in jobs] == [0, 1, 2, 3]  # the errored job has no losses
    assert spec["data"][1]["fill"] == "tonexty" and spec["data"][0]["y"][0] == pytest.approx(1e-4 + 1e-4 * 1.0)
    assert jobs[1]["y"][0] == pytest.approx(-0.5) and jobs[1]["customdata"][0] == [pytest.approx(1.0),
                                                                                   pytest.approx(0.5)]
    assert "step %{x}" in jobs[0]["hovertemplate"] and "standalone" in jobs[0]["hovertemplate"]
    json.loads(charts.figure_json(spec))  # plotly's validator accepts it
    with pytest.raises(ValueError):
        charts.figure_json({"data": [{"type": "scatter", "colour": "red"}], "layout": {}})


def test_a_level_whose_jobs_all_fail_is_a_labelled_bar_not_a_gap():
    """Issue 52: a 0 % level drew no bar, like a level that never ran. Every bar carries its
    rate; a 0 % one is outlined at the axis with its label outside; no judged job: "not judged"."""
    levels = [{"factor": "optimizer", "level": "sgd", "jobs": 4, "judged": 4, "pass_rate_pct": 0.0,
               "worst_abs_diff": 0.5},
              {"factor": "optimizer", "level": "adam", "jobs": 4, "judged": 4, "pass_rate_pct": 100.0,
               "worst_abs_diff": 1e-7},
              {"factor": "optimizer", "level": "adamw", "jobs": 1, "judged": 0, "pass_rate_pct": None,
               "worst_abs_diff": None}]
    bar = charts.levels_figure(levels)["data"][0]
    assert bar["text"] == ["0%", "100%", "not judged"] and bar["textposition"][0] == "outside"
    assert bar["marker"]["line"]["width"][0] > 0 and bar["marker"]["line"]["width"][1] == 0
    assert bar["cliponaxis"] is False


def test_every_chart_has_a_narrow_patch_for_a_phone(sweep_dir):
    """The narrow patch (a chart under 600 px): no title; a grid's many jobs without a
    legend, a run's few entries in a legend below; side-by-side panels stacked; each
    patched figure passes plotly's validator (figures_script checks it)."""
    rows = collect(sweep_dir)
    many = [dict(r, job=i) for i, r in enumerate(rows * 3) if r.get("result") is not None]
    curves = charts.narrow_patch(charts.curves_figure(many, ["optimizer", "mesh"]))
    assert curves["layout"]["showlegend"] is False and curves["layout"]["title"] == {"text": ""}
    losses = charts.narrow_patch(charts.losses_figure(rows[1]))
    assert losses["layout"]["legend"]["orientation"] == "h" and "showlegend" not in losses["layout"]
    levels_spec = charts.levels_figure(level_stats(rows))
    levels = charts.narrow_patch(levels_spec)
    assert levels["layout"]["xaxis"]["domain"] == [0, 1] and levels["layout"]["xaxis2"]["domain"] == [0, 1]
    assert levels["data"] == [{}, {"yaxis": "y2"}] and levels["layout"]["yaxis2"]["anchor"] == "x2"
    script = charts.figures_script({"curves": charts.curves_figure(rows, ["optimizer", "mesh"]),
                                    "levels": levels_spec})
    spec = json.loads(re.search(r'id="figures">(.*?)</script>', script, re.S).group(1))
    assert spec["levels"]["narrow"] == json.loads(json.dumps(levels)) and "data" in spec["curves"]


def test_curves_keep_the_budget_and_the_steps_that_matter():
    kept = charts.keep_steps(1000, 100, must=(517, 999))
    assert len(kept) <= 102 and 517 in kept and kept[0] == 0 and kept[-1] == 999
    assert charts.keep_steps(50, 100) == list(range(50))


def test_a_large_sweep_page_stays_under_its_budget(tmp_path):
    """80 jobs of 1000 steps: the curves keep at most about POINTS_BUDGET points, so the
    page stays under 1.5 MB (issue 40)."""
    root = tmp_path / "big"
    for num in range(80):
        overrides = [f"seed={num}", f"optimizer={'adam' if num % 2 else 'sgd'}"]
        losses = {"standalone": [1.0 + i * 1e-3 for i in range(1000)],
                  "distributed": [1.0 + i * 1e-3 + num * 1e-7 * ((-1) ** i) for i in range(1000)]}
        write_job(root, num, overrides, make_record("ok", overrides, _cmp(True, num * 1e-7, 1000), losses=losses))
    rows = collect(root)
    att = {"headline": "80 jobs: 80 ok.", "verdict": "80 jobs: 80 ok.", "counts": {"ok": 80}, "culprits": [],
           "levels": level_stats(rows), "factors": [], "contrasts": [], "interactions": [], "not_judged": []}
    page = grid_page(root, rows, att, [])
    assert len(page.encode()) < 1_500_000
    spec = json.loads(re.search(r'id="figures">(.*?)</script>', page, re.S).group(1))
    assert sum(len(t["x"]) for t in spec["curves"]["data"] if "meta" in t) <= charts.POINTS_BUDGET + 2 * 80


def test_against_puts_both_sweeps_side_by_side(sweep_dir, tmp_path):
    old = tmp_path / "old"
    for num, opt in enumerate(("adam", "sgd")):
        overrides = [f"optimizer={opt}", "mesh=dp2", "engine.impl.torch=sweep.engines.torch_fsdp2.TorchFSDP2",
                     "steps=10"]
        write_job(old, num, overrides, make_record("fail", overrides, _cmp(False, -0.7)))
    assert main([str(sweep_dir), "--against", str(old)]) == 0
    page = (sweep_dir / "summary.html").read_text()
    block = page[page.index('id="against"'):]
    assert f"against <b>{old}</b>" in block and "old status" in block and "fixed: 1" in block
    spec = json.loads(re.search(r'id="figures">(.*?)</script>', page, re.S).group(1))
    olds = [t for t in spec["curves"]["data"] if t.get("legendgroup") == "old"]
    assert len(olds) == 2 and all(t["visible"] == "legendonly" and t["line"]["dash"] == "dash" for t in olds)


def test_an_isolation_page_opens_with_its_answer_and_proof(sweep_dir):
    state = {"status": "isolated", "answer": "optimizer=sgd", "changes": [{"key": "optimizer", "passing": "adam",
                                                                             "failing": "sgd"}],
             "minimal": [{"key": "optimizer", "passing": "adam", "failing": "sgd"}],
             "proof": {"passing": [0], "failing": [1]}, "probes": [], "jobs": [], "n_jobs": 2,
             "passing": {"optimizer": "adam"}, "failing": {"optimizer": "sgd"}}
    (sweep_dir / "isolate.json").write_text(json.dumps(state))
    write_report(sweep_dir)
    page = (sweep_dir / "summary.html").read_text()
    parts = _blocks(page)
    assert parts[0] == ("section", "headline") and ("section", "isolation") in parts
    head = re.search(r'id="headline">(.*?)</section>', page, re.S).group(1)
    assert "optimizer" in head and len(head) <= 400 and "Isolation: the minimal failure-inducing change" in head
    assert "Proof" in page[page.index('id="isolation"'):]
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert summary["findings"][0]["code"] == "V001"  # the isolation's answer first


def test_a_single_run_writes_its_page(tmp_path):
    from sweep.report.summary import write_job_page

    overrides = ["optimizer=sgd"]
    write_job(tmp_path, 0, overrides, make_record("fail", overrides, _cmp(False, -0.5), reason="1/3 steps outside"))
    path = write_job_page(tmp_path / "0", "[   fail] optimizer=sgd  max|diff|=0.5")
    page = path.read_text()
    assert path.name == "report.html" and (tmp_path / "0" / "plotly.min.js").exists()
    assert re.search(r'id="headline">\[   fail\] optimizer=sgd  max\|diff\|=0.5</section>', page)
    assert '"losses"' in page
    # why it fails comes first, above the losses' own comparison (whose "passed" is the losses' alone)
    assert 'id="reason"' in page and page.index('id="reason"') < page.index("The losses compared")


def test_a_page_links_the_packages_plotly_js_instead_of_copying_it(tmp_path, monkeypatch):
    """Issue 52: every single run wrote its own 4.8 MB plotly.min.js. Each dir's file is the
    plotly package's own, hard-linked (no bytes written); a copy only where no link can be made."""
    import os

    from sweep.report.summary import write_job_page

    source = charts.package_plotly_js()
    assert source is not None and source.stat().st_size > 1_000_000
    for num in (0, 1):
        write_job(tmp_path, num, ["optimizer=sgd"], make_record("fail", ["optimizer=sgd"], _cmp(False, -0.5)))
        write_job_page(tmp_path / str(num), "[   fail] optimizer=sgd")
        assert os.path.samefile(tmp_path / str(num) / "plotly.min.js", source)
    assert charts.write_plotly_js(tmp_path / "0") == tmp_path / "0" / "plotly.min.js"  # again: left as it is
    assert os.path.samefile(tmp_path / "0" / "plotly.min.js", source)

    def no_link(*args):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    (tmp_path / "far").mkdir()
    copy = charts.write_plotly_js(tmp_path / "far")
    assert not os.path.samefile(copy, source) and copy.read_bytes() == source.read_bytes()


def test_prose_splits_a_long_paragraph_into_sentences():
    text = "One thing. " * 40 + "Another: with 1.5e-05. And the last."
    html = prose(text)
    assert html.count("<p>") > 10 and "1.5e-05." in html
