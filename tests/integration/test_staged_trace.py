"""The staged trace names what the full capture names (issue 53): the same faults traced
both ways (``compare.trace_capture=staged,full``) on real jobs, torch and MindSpore, give
the same first module, first tensor, class and notes, their rounding envelope included (the
standalone copy's twin traced as a third copy: bound, envelope ratio, the first tensor beyond
it, the update onset's envelope); the staged rerun keeps digests, statistics and the
decisive tensors, and no spool."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import case_jobs

pytestmark = pytest.mark.slow

TORCH = {
    "forward": ["model=transformer", "model.hidden_size=64", "model.args.num_layers=3",
                "engine.impl.torch=tests.helpers.inside_faults.LaterLayerForwardFSDP2"],
    "scale": ["optimizer=sgd", "engine.impl.torch=tests.helpers.planted_divergence.GradScaleFSDP2"],
    "shard": ["optimizer=sgd", "engine.impl.torch=tests.helpers.planted_divergence.Rank1ShardGradScaleFSDP2"],
    # sharded data sums the gradients in another order (rounding), the doubled step parts beyond it
    "rounding_first": ["optimizer=sgd", "data.split=sharded",
                       "engine.impl.torch=tests.helpers.planted_divergence.GradScaleFSDP2"],
    # the standalone copy trains last: the twin's pairs grow alongside the distributed copy's
    "distributed_first": ["optimizer=sgd", "data.split=sharded", "order=distributed_first",
                          "engine.impl.torch=tests.helpers.planted_divergence.GradScaleFSDP2"],
    # a bf16 policy: the twin nudged in bf16, trained under the policy on a one-rank mesh (DTensors)
    "bf16": ["mp_policy=bf16", "model=transformer", "model.hidden_size=64", "model.args.num_layers=3",
             "engine.impl.torch=tests.helpers.inside_faults.LaterLayerForwardFSDP2"],
}
MINDSPORE = {
    "forward": ["engine.impl.mindspore=tests.helpers.ms_faults.LaterLayerForwardDP"],
    "frozen": ["engine.impl.mindspore=tests.helpers.ms_faults.FrozenStatsDP", "model=mlp_norm"],
}
SAME = ("status", "first_module", "first_tensor", "notes", "reason")


def _both_ways(tmp_path_factory, name, cases, *common):
    both = {f"{case}_{how}": [*overrides, f"compare.trace_capture={how}"]
            for case, overrides in cases.items() for how in ("staged", "full")}
    found, _ = case_jobs(tmp_path_factory.mktemp(name), both, "ablation=none", "steps=6", *common)
    summary = json.loads((next(iter(found.values()))[1].parent / "summary.json").read_text())
    drift = {job["job"]: job for job in summary["jobs"]}
    return {name: (record, where, drift[int(where.name)]) for name, (record, where) in found.items()}


@pytest.fixture(scope="module")
def torch_jobs(tmp_path_factory):
    # compare.twin_rows_from=0: the twin compared by the shards' rows and merged, even at this size
    return _both_ways(tmp_path_factory, "staged_torch", TORCH, "mesh=dp2", "compare.twin_rows_from=0")


@pytest.fixture(scope="module")
def mindspore_jobs(tmp_path_factory):
    pytest.importorskip("mindspore")
    return _both_ways(tmp_path_factory, "staged_ms", MINDSPORE, "framework=mindspore", "engine=data_parallel")


def _same_finding(jobs, case):
    staged, staged_dir, staged_row = jobs[f"{case}_staged"]
    full, _, full_row = jobs[f"{case}_full"]
    assert staged["first_tensor"].get("step") is not None, staged["first_tensor"]  # traced, and it found one
    for key in SAME:
        assert staged[key] == full[key], (case, key)
    for key in ("drift", "first_real_step", "onset", "first_module", "first_tensor"):
        assert staged_row[key] == full_row[key], (case, key)
    first = staged["first_tensor"]  # the envelope was measured (the twin traced), and read alike
    assert first.get("envelope") != "not measured" and first.get("bound") is not None, first
    assert (first.get("updates") or {}).get("envelope") is not None
    return staged, staged_dir


@pytest.mark.parametrize("case", sorted(TORCH))
def test_the_staged_trace_names_what_the_full_capture_names_torch(torch_jobs, case):
    staged, where = _same_finding(torch_jobs, case)
    ranks = where / "trace" / "ranks"
    assert not list(ranks.glob("spool_*")), "the scratch spool is deleted"
    for rank in (0, 1):
        lines = (ranks / f"tensors_{rank}.jsonl").read_text().splitlines()
        assert {json.loads(line)["copy"] for line in lines} == {"twin", "standalone", "distributed"}
        rows = [json.loads(line) for line in (ranks / f"pairs_{rank}.jsonl").read_text().splitlines()]
        assert {row["copy"] for row in rows} == {"twin", "distributed"}  # each against the standalone copy
        twin_lines = [json.loads(line) for line in lines if json.loads(line)["copy"] == "twin"]
        assert any("rows" in line for line in twin_lines)  # the twin digested by the shard's rows
        assert any(row["copy"] == "twin" and row.get("of") == 2 for row in rows)  # merged over both shards
        assert (ranks / f"pairs_{rank}.jsonl").exists()
        features = json.loads((ranks / f"rank_{rank}.json").read_text())["features"]["trace"]
        assert features["capture"] == "staged" and features["spooled_bytes"] > 0
    first = staged["first_tensor"]
    base = f"distributed/first/{first['kind']}/{first['step']}/{first['name']}"
    largest = 0.0  # each rank captured its shard of the first tensor where its shard differs
    for path in ranks.glob("capture_*.npz"):
        with np.load(path) as captured:
            if f"{base}/distributed" in captured:
                a, b = captured[f"{base}/standalone"], captured[f"{base}/distributed"]
                largest = max(largest, float(np.max(np.abs(a.astype(np.float64) - b))))
    assert largest == first["abs_diff"]
    beyond = first.get("beyond_rounding")
    if beyond:  # the first difference within its envelope: the first beyond it captured whole as well
        key = f"distributed/beyond/{beyond['kind']}/{beyond['step']}/{beyond['name']}/distributed"
        assert any(key in np.load(path) for path in ranks.glob("capture_*.npz"))
    assert not any(k.startswith("twin/") or "/twin" in k for path in ranks.glob("capture_*.npz")
                   for k in np.load(path))  # the twin is the envelope, never a suspect
    if case == "forward":
        assert staged["first_module"]["module"] == "layers.1.up" and staged["first_module"]["phase"] == "forward"
    if case == "shard":
        assert first["shards"] == {"of": 2, "differ": [1], "ranks": [1]}
    if first["rel_diff"] <= first["bound"]:  # within its envelope: the first beyond it named (the doubled step)
        assert "beyond_rounding" in first, first


def test_a_full_capture_writes_no_staged_files(torch_jobs):
    _, where, _ = torch_jobs["forward_full"]
    ranks = where / "trace" / "ranks"
    assert not list(ranks.glob("tensors_*")) and not list(ranks.glob("capture_*"))
    assert json.loads((ranks / "rank_0.json").read_text())["features"]["trace"] == {"capture": "full"}


@pytest.mark.mindspore
@pytest.mark.parametrize("case", sorted(MINDSPORE))
def test_the_staged_trace_names_what_the_full_capture_names_mindspore(mindspore_jobs, case):
    staged, where = _same_finding(mindspore_jobs, case)
    assert not list((where / "trace" / "ranks").glob("spool_*"))
