"""The report page (sweep.report.page, sweep.report.charts) on constructed sweeps: its
order, its folds, the table's data for the filters, the charts' specs (checked by plotly's
validator) and the size budget. The page in a real browser: tests/integration/test_report_page.py."""

import json
import re

import pytest

from sweep.analysis.attribution import level_stats
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


def test_the_page_opens_with_the_headline_and_folds_the_details(sweep_dir):
    write_report(sweep_dir)
    page = (sweep_dir / "summary.html").read_text()
    att = json.loads((sweep_dir / "summary.json").read_text())
    first = re.search(r'<section class="headline[^"]*" id="headline">(.*?)</section>', page, re.S)
    assert first and first.group(1) == att["headline"].replace("'", "&#x27;") and len(att["headline"]) <= 400
    parts = _blocks(page)
    assert parts[0] == ("section", "headline") and parts[1] == ("section", "culprits")
    assert ("details", "details") in parts and parts.index(("details", "details")) < parts.index(("section", "jobs"))
    assert "<details><summary>Legend" in page and "<details><summary>Factor levels" in page
    assert "optimizer=sgd" in page[page.index('id="culprits"'):page.index('id="details"')]


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
    assert "optimizer" in head and len(head) <= 400
    assert "Proof" in page[page.index('id="isolation"'):page.index('id="details"')]


def test_a_single_run_writes_its_page(tmp_path):
    from sweep.report.summary import write_job_page

    overrides = ["optimizer=sgd"]
    write_job(tmp_path, 0, overrides, make_record("fail", overrides, _cmp(False, -0.5)))
    path = write_job_page(tmp_path / "0", "[   fail] optimizer=sgd  max|diff|=0.5")
    page = path.read_text()
    assert path.name == "report.html" and (tmp_path / "0" / "plotly.min.js").exists()
    assert re.search(r'id="headline">\[   fail\] optimizer=sgd  max\|diff\|=0.5</section>', page)
    assert '"losses"' in page


def test_prose_splits_a_long_paragraph_into_sentences():
    text = "One thing. " * 40 + "Another: with 1.5e-05. And the last."
    html = prose(text)
    assert html.count("<p>") > 10 and "1.5e-05." in html
