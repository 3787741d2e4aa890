"""engine=hyper_parallel on real torchrun and msrun jobs on CPU, with hyper-parallel
installed from its repository (skipped without it: tests/helpers/hyper_parallel.py)."""

import json
from pathlib import Path

import pytest

from sweep.engines.hyper_parallel import FULLY_SHARD_ENTRY_POINTS
from tests.conftest import run_cli
from tests.helpers.hyper_parallel import needs_hyper_parallel

pytestmark = [pytest.mark.slow, *needs_hyper_parallel]


def _results(sweep_dir: Path) -> list:
    return [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/result.json"), key=lambda p: int(p.parent.name))]


def _key(r: dict) -> tuple:
    c = r["config"]
    return tuple(c["mesh"]["mesh_shape"]), c["optimizer"]["name"], c["reshard_after_forward"], c["mp_policy"]["name"]


def test_torch_defaults_run_and_fp32_matches_fsdp2_bit_for_bit(tmp_path):
    """The grid of the issue with every other value at its default: no error, and the same
    losses as PyTorch's FSDP2 (fp32 and bf16 here), with the workaround named in the record."""
    proc = run_cli(["-m", "ablation=none", "engine=hyper_parallel,torch_fsdp2", "mesh=dp2,hsdp2x2",
                    "optimizer=adam,sgd", "reshard_after_forward=true,false", "mp_policy=fp32,bf16", "steps=5"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = _results(tmp_path / "multirun")
    assert len(results) == 32 and all(r["status"] == "ok" for r in results), [r["reason"] for r in results]
    hp = {_key(r): r for r in results if r["config"]["engine"]["name"] == "hyper_parallel"}
    fsdp2 = {_key(r): r for r in results if r["config"]["engine"]["name"] == "torch_fsdp2"}
    assert len(hp) == len(fsdp2) == 16
    for key, r in hp.items():
        assert r["losses"]["distributed"] == fsdp2[key]["losses"]["distributed"], key
        if key[3] == "fp32":
            assert r["losses"]["distributed"] == r["losses"]["standalone"], key
        assert r["versions"]["hyper_parallel"] and "hyper_parallel_commit" in r["versions"]
        notes = r["engine"]["notes"]
        assert any("workaround: autograd version counter" in n for n in notes) == key[2], (key, notes)
        # the entry point that ran, by import (fdd0a80: its top level exports none)
        assert r["engine"]["api"]["name"] == "fully_shard"
        assert r["engine"]["api"]["entry_point"] in FULLY_SHARD_ENTRY_POINTS
        assert fsdp2[key]["engine"] == {}


def test_torch_adam_without_skip_dispatch_is_rejected_before_launch(tmp_path):
    proc = run_cli(["engine=hyper_parallel", "engine.options.skip_dtensor_dispatch=false", "steps=5"], tmp_path)
    r = json.loads((tmp_path / "run" / "result.json").read_text())
    assert proc.returncode == 2 and r["status"] == "error" and r["launch"] is None
    assert "hyper-parallel" in r["reason"] and "lerp_" in r["reason"] and "Traceback" not in r["reason"]


@pytest.mark.mindspore
def test_mindspore_sharding_runs_on_cpu_with_emulated_collectives(tmp_path):
    """hyper-parallel's own MindSpore sharding over msrun: with data.split=sharded the ranks'
    gradients differ, so the job matches standalone only if its hooks reduce them."""
    pytest.importorskip("mindspore")
    proc = run_cli(["-m", "ablation=none", "framework=mindspore", "engine=hyper_parallel", "device=cpu",
                    "mesh=dp2,hsdp2x2", "reshard_after_forward=true,false", "data.split=sharded", "steps=10"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = _results(tmp_path / "multirun")
    assert len(results) == 4 and all(r["status"] == "ok" for r in results), [r["reason"] for r in results]
    for r in results:
        engine, shape = r["engine"], r["config"]["mesh"]["mesh_shape"]
        assert engine["api"]["name"] in ("hsdp", "fully_shard")
        if engine["api"]["name"] == "hsdp":
            assert engine["api"]["entry_point"] == "hyper_parallel.hsdp" and engine["api"]["fully_shard_why_not"]
            level = "level3" if r["config"]["reshard_after_forward"] else "level2"
            assert engine["api"]["optimizer_level"] == level and engine["api"]["shard_size"] == shape[-1]
        else:
            assert engine["api"]["entry_point"] in FULLY_SHARD_ENTRY_POINTS
        assert len(engine["collectives_emulated"]) == 2
        assert any(n.startswith("collectives emulated") for n in engine["notes"])
        calls = engine["emulated_calls"]
        assert calls["reduce_scatter_tensor"] >= 4 * 10 and calls["all_gather_into_tensor"] >= 4 * 10
        assert r["versions"]["mindspore"] and r["versions"]["hyper_parallel"]
        # the reduce dtype, watched at hyper-parallel's platform layer (fp32 policy: float32)
        assert r["dtypes"]["observed"]["reduce"] == "float32", r["dtypes"]
        # and every call there, in the ledger: hyper-parallel's platform collectives at step 0
        ops = {c["op"] for c in r["collectives"]["calls"]}
        assert {"reduce_scatter_tensor", "all_gather_into_tensor"} <= ops, r["collectives"]
        assert all(c["dtype"] == "float32" for c in r["collectives"]["calls"] if c["op"] == "reduce_scatter_tensor")
        # held against hyper-parallel's contract: the mesh's groups, the policy's dtypes
        assert r["collectives"]["expected"]["reduce_scatter"]["dim"] == r["config"]["mesh"]["mesh_dim_names"][-1]
        assert r["collectives"]["notes"] == [] and r["collectives"]["unchecked"] is None
    summary = (tmp_path / "multirun" / "summary.md").read_text()
    assert "collectives emulated" in summary


@pytest.mark.mindspore
def test_mindspore_policy_hsdp_cannot_express_is_rejected_before_launch(tmp_path):
    pytest.importorskip("mindspore")
    from sweep.engines.hyper_parallel import mindspore_api

    if mindspore_api() != "hsdp":
        pytest.skip("the installed hyper-parallel has MindSpore fully_shard")
    proc = run_cli(["framework=mindspore", "engine=hyper_parallel", "device=cpu", "mp_policy=bf16", "steps=5"], tmp_path)
    r = json.loads((tmp_path / "run" / "result.json").read_text())
    assert proc.returncode == 2 and r["status"] == "error" and r["launch"] is None
    assert "mp_policy.param_dtype=bfloat16" in r["reason"] and "hsdp" in r["reason"]


@pytest.mark.exhaustive
@pytest.mark.mindspore
def test_mindspore_reduce_dtype_is_observed_in_hyper_parallels_reduction(tmp_path):
    """The reduce dtype is watched at hyper-parallel's platform layer, not copied from the
    config: float16 here (MindSpore's CPU AllReduce has float32 and float16 kernels only)."""
    pytest.importorskip("mindspore")
    proc = run_cli(["framework=mindspore", "engine=hyper_parallel", "device=cpu", "mp_policy.reduce_dtype=float16",
                    "steps=3"], tmp_path)
    r = json.loads((tmp_path / "run" / "result.json").read_text())
    assert proc.returncode == 0 and r["status"] == "ok", r["reason"]
    assert r["dtypes"]["configured"]["reduce_dtype"] == "float16"
    assert r["dtypes"]["observed"]["reduce"] == "float16" and r["dtypes"]["observed"]["grad"] == "float32"


@pytest.mark.exhaustive
@pytest.mark.mindspore
def test_mindspore_collectives_that_depart_from_the_config_are_named(tmp_path):
    """hyper-parallel's MindSpore collectives held against the config's contract: an HSDP
    mesh sharded over every rank (its losses still agree) and a reduce dtype the policy
    does not set are each named in the job's notes; the clean job has none."""
    pytest.importorskip("mindspore")
    from sweep.engines.hyper_parallel import mindspore_api
    from tests.conftest import case_jobs

    if mindspore_api() != "hsdp":
        pytest.skip("the planted engines change hsdp's arguments; the installed hyper-parallel has fully_shard")
    faults = "engine.impl.mindspore=tests.helpers.ms_hp_faults."
    found, _ = case_jobs(tmp_path, {"world": [faults + "WorldShardHP"], "half": [faults + "HalfReduceHP"],
                                    "clean": []},
                         "ablation=none", "framework=mindspore", "engine=hyper_parallel", "mesh=hsdp2x2", "steps=3")
    jobs = {name: record for name, (record, _) in found.items()}
    world = jobs["world"]["collectives"]["notes"]
    assert "reduce_scatter over world, expected the dp_shard group" in world, world
    assert "all_gather over world, expected the dp_shard group" in world, world
    assert any(n in jobs["world"]["notes"] for n in world)
    half = jobs["half"]["collectives"]["notes"]
    assert any(n.startswith("reduce_scatter ran in float16 over dp_shard, expected float32") for n in half), half
    assert jobs["clean"]["status"] == "ok" and jobs["clean"]["collectives"]["notes"] == []
