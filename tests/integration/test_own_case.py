"""Bring your own case (issue 14): models, the training step and the wrapping as config,
applied the same way to both copies, on real torchrun/msrun jobs with few steps."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT, culprits_named, flat, run_cli

pytestmark = pytest.mark.slow


def _jobs(tmp_path):
    """The multirun's job records, by job number."""
    out = {}
    for path in sorted((tmp_path / "multirun").glob("*/result.json")):
        out[int(path.parent.name)] = json.loads(path.read_text())
    return out


def _summary(tmp_path):
    return json.loads((tmp_path / "multirun" / "summary.json").read_text())


def _multirun(tmp_path, *overrides):
    proc = run_cli(["-m", "ablation=none", *overrides], tmp_path)
    assert (tmp_path / "multirun" / "summary.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return _jobs(tmp_path), _summary(tmp_path)


def test_the_default_mlp_gives_the_numbers_it_gave_before_models_were_config(tmp_path):
    # The first 5 losses of `python -m sweep steps=30 optimizer=sgd`, run with the code
    # before the model/train sections (commit 57a5cd5): the default job is unchanged.
    before = [1.0770171880722046, 0.9550020098686218, 0.69455486536026, 0.9124967455863953, 1.7751574516296387]
    proc = run_cli(["steps=5", "optimizer=sgd"], tmp_path)
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["status"] == "ok", proc.stderr[-2000:]
    assert result["losses"]["standalone"] == before and result["losses"]["distributed"] == before


@pytest.mark.exhaustive
def test_every_model_runs_with_either_wrap(tmp_path):
    jobs, summary = _multirun(tmp_path, "model=mlp,mlp_norm,transformer", "wrap=root,per_layer", "steps=5")
    assert len(jobs) == 6 and all(r["status"] == "ok" for r in jobs.values()), \
        {n: r["reason"] for n, r in jobs.items() if r["status"] != "ok"}
    units = {(r["config"]["model"]["name"], r["config"]["wrap"]): sorted(r["engine"].get("units") or {})
             for r in jobs.values()}
    assert units[("mlp", "root")] == [] and units[("mlp", "per_layer")] == ["layer0", "layer1"]
    assert units[("mlp_norm", "per_layer")] == ["layer0", "layer1", "norm0", "norm1"]
    assert units[("transformer", "per_layer")] == ["layers.0", "layers.1"]  # the blocks: model.layers
    assert not culprits_named(summary), summary["verdict"]


@pytest.mark.exhaustive
def test_correct_accumulation_and_clipping_pass_against_a_standalone_doing_the_same(tmp_path):
    jobs, summary = _multirun(tmp_path, "experiment=grad_accum", "mesh=dp2", "steps=20",
                              "train.clip_grad_norm=null,0.05")
    assert len(jobs) == 4 and all(r["status"] == "ok" for r in jobs.values())
    assert not culprits_named(summary), summary["verdict"]


@pytest.mark.parametrize("experiment, engine, factor, extra, kind", [
    ("grad_accum", "SyncNeverRestoredFSDP2", "train.grad_accum_steps=4", [], "weight"),
    # gradients are traced where the optimizer reads them: the wrongly clipped gradient itself
    ("clip_grad_norm", "LocalNormClipFSDP2", "train.clip_grad_norm=0.05", ["optimizer=sgd", "optimizer.lr=0.1"],
     "grad"),
])
def test_a_planted_accumulation_or_clipping_bug_fails_and_is_named(tmp_path, experiment, engine, factor, extra, kind):
    jobs, summary = _multirun(tmp_path, f"experiment={experiment}", "mesh=dp2", "steps=20", *extra,
                              f"engine.impl.torch=tests.helpers.planted_step_faults.{engine}")
    failing = [r for r in jobs.values() if r["status"] == "fail"]
    assert len(failing) == 1 and factor in failing[0]["overrides"]
    assert f"Culprit: {factor}" in summary["verdict"]
    # the first tensor beyond float rounding is what the faulty step wrote: the weight, or the clipped gradient
    tensor = failing[0]["first_tensor"]
    real = tensor.get("beyond_rounding") or tensor
    assert real["kind"] == kind and real["step"] == 0 and real["rel_diff"] >= 1e-4, tensor["description"]
    if engine == "LocalNormClipFSDP2":  # the ledger saw no reduction of the norm
        assert any(n.startswith("the clipping norm of step 0 was never all-reduced") for n in failing[0]["notes"]), \
            failing[0]["notes"]


@pytest.mark.exhaustive
def test_a_clipping_norm_summed_over_every_rank_of_an_hsdp_mesh_is_named_by_its_group(tmp_path):
    jobs, summary = _multirun(tmp_path, "mesh=dp4,hsdp2x2", "steps=10", "train.clip_grad_norm=0.05", "optimizer=sgd",
                              "optimizer.lr=0.1", "engine.impl.torch=tests.helpers.planted_step_faults.WorldNormClipFSDP2")
    by_mesh = {r["config"]["mesh"]["name"]: r for r in jobs.values()}
    # on a 1-D mesh the world is the shard group: the same norm, nothing to say
    assert by_mesh["dp4"]["status"] == "ok" and not any("clipping norm" in n for n in by_mesh["dp4"]["notes"])
    hsdp = by_mesh["hsdp2x2"]
    assert hsdp["status"] == "fail" and "Culprit: mesh=hsdp2x2" in summary["verdict"]
    assert any(n.startswith("the clipping norm of step 0 was all-reduced over world") and "x1.414" in n
               for n in hsdp["notes"]), hsdp["notes"]
    assert "Note: clipping norm all-reduced over another group (N110) (1 job)." in summary["verdict"]  # V154


def test_a_bf16_loaded_model_fails_the_tolerance_by_rounding_alone(tmp_path):
    # the command as docs/own-model.md gives it (no ablation=none): the preset's own 2 jobs, and
    # what the docs say of them: the bf16 job fails 1e-4 within its rounding envelope, no culprit
    proc = run_cli(["-m", "experiment=bf16_loaded"], tmp_path)
    assert (tmp_path / "multirun" / "summary.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs, summary = _jobs(tmp_path), _summary(tmp_path)
    assert len(jobs) == 2
    by_dtype = {r["config"]["model"]["init_dtype"]: r for r in jobs.values()}
    assert by_dtype["float32"]["status"] == "ok" and by_dtype["bfloat16"]["status"] == "fail"
    assert by_dtype["bfloat16"]["dtypes"]["observed"]["master"] == "bfloat16"
    assert by_dtype["bfloat16"]["dtypes"]["observed"]["optimizer_state"] == "bfloat16"
    assert by_dtype["bfloat16"]["envelope"]["loss"]["within"], by_dtype["bfloat16"]["envelope"]["loss"]
    from sweep.report.summary import CULPRIT_CODES

    assert not summary["culprits"] and not [f for f in summary["findings"] if f["code"] in CULPRIT_CODES]
    assert "rounding envelope (bfloat16) at every step" in flat(summary["verdict"])
    assert "master dtype ran bfloat16" not in summary["verdict"]  # implied by init_dtype: no false alarm


@pytest.mark.exhaustive
def test_batch_norm_under_an_fp16_policy_fails_unless_kept_in_fp32(tmp_path):
    jobs, _ = _multirun(tmp_path, "experiment=batchnorm_fp16", "steps=20")
    by_policy = {r["config"]["mp_policy"]["name"]: r for r in jobs.values()}
    assert by_policy["fp32"]["status"] == "ok"
    assert by_policy["fp16"]["status"] == "error" and "expected scalar type Half" in by_policy["fp16"]["reason"]
    kept = by_policy["fp16_batchnorm_fp32"]
    assert kept["status"] in ("ok", "fail") and kept["engine"]["units"]["norm1"]["param_dtype"] == "float32"


MY_MODELS = textwrap.dedent('''
    """A user's model and data, outside the sweep package."""
    import numpy as np


    def build_model(*, framework, in_size, out_size, width):
        import torch
        from torch import nn

        assert framework == "torch"
        return nn.Sequential(nn.Linear(in_size, width), nn.Tanh(), nn.Linear(width, out_size))


    def make_data(steps, *, batch_size, seed_offset, in_size, out_size):
        rng = np.random.default_rng(seed_offset)
        x = rng.standard_normal((steps, batch_size, in_size)).astype(np.float32)
        w = rng.standard_normal((in_size, out_size)).astype(np.float32)
        return [(x[i], np.tanh(x[i] @ w)) for i in range(steps)]
''')


def test_a_user_model_defined_outside_the_package_runs_in_a_sweep(tmp_path):
    (tmp_path / "my_models.py").write_text(MY_MODELS)
    cmd = [sys.executable, "-m", "sweep", "-m", "ablation=none", "steps=8", "model.name=mine",
           "model._target_=my_models.build_model", "+model.args.width=8,16", "data._target_=my_models.make_data",
           "wrap=root,per_layer", "train.batch_size=2", f"hydra.sweep.dir={tmp_path}/multirun"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=900, env=dict(os.environ))
    jobs = _jobs(tmp_path)
    assert len(jobs) == 4 and all(r["status"] == "ok" for r in jobs.values()), proc.stdout[-3000:]
    assert {r["config"]["model"]["args"]["width"] for r in jobs.values()} == {8, 16}
    per_layer = [r for r in jobs.values() if r["config"]["wrap"] == "per_layer"]
    assert all(sorted(r["engine"]["units"]) == ["0", "2"] for r in per_layer)  # the Sequential's Linear children
    assert ROOT not in tmp_path.parents


def test_mindspore_runs_the_norm_model_with_accumulation_and_clipping(tmp_path):
    pytest.importorskip("mindspore")
    jobs, summary = _multirun(tmp_path, "framework=mindspore", "engine=data_parallel", "model=mlp_norm",
                              "train.grad_accum_steps=2", "train.clip_grad_norm=0.05", "data.split=replicated,sharded",
                              "steps=6")
    by_split = {r["config"]["data"]["split"]: r for r in jobs.values()}
    assert by_split["replicated"]["status"] == "ok"
    # each rank's BatchNorm normalises its own rows (no SyncBatchNorm): sharded data parts at step 0
    assert by_split["sharded"]["status"] == "fail" and by_split["sharded"]["comparison"]["first_fail_step"] == 0
    # traced on MindSpore too, buffers included: the BatchNorm statistics of the rank's own rows differ first
    tensor = by_split["sharded"]["first_tensor"]
    assert tensor["kind"] == "buffer" and tensor["name"].startswith("norm1.moving_") and tensor["step"] == 0, tensor
    assert tensor["rel_diff"] > 0.01, tensor


@pytest.mark.exhaustive
def test_hyper_parallel_on_torch_wraps_per_layer_accumulates_and_clips(tmp_path):
    pytest.importorskip("hyper_parallel")
    jobs, summary = _multirun(tmp_path, "engine=hyper_parallel", "wrap=per_layer", "train.grad_accum_steps=2",
                              "train.clip_grad_norm=0.05", "mesh=dp2,hsdp2x2", "data.split=sharded",
                              "train.batch_size=4", "optimizer=sgd", "optimizer.lr=0.1", "steps=6")
    assert len(jobs) == 2 and all(r["status"] == "ok" for r in jobs.values()), \
        {n: r["reason"] for n, r in jobs.items()}
    assert all(sorted(r["engine"]["units"]) == ["layer0", "layer1"] for r in jobs.values())


@pytest.mark.exhaustive
def test_the_gradient_scaler_runs_in_both_copies_and_skips_overflowing_steps(tmp_path):
    # fp16 parameters under a scale of 1e30 overflow: ShardedGradScaler skips those steps on
    # every rank (the inf check is all-reduced), while the standalone copy's float32
    # gradients do not overflow; at 65536 nothing overflows and the job passes.
    jobs, _ = _multirun(tmp_path, "mp_policy=fp16", "train.grad_scaler.enabled=true",
                        "train.grad_scaler.init_scale=65536,1e30", "steps=10")
    by_scale = {r["config"]["train"]["grad_scaler"]["init_scale"]: r for r in jobs.values()}
    assert by_scale[65536.0]["status"] == "ok"
    skipped = by_scale[1e30]
    assert skipped["status"] == "fail" and skipped["ranks_agree"]
    assert float(skipped["first_tensor"]["abs_diff"]) == float("inf") and skipped["first_tensor"]["step"] == 0


@pytest.mark.exhaustive
def test_a_per_module_policy_the_engine_never_applied_is_named_with_its_modules(tmp_path):
    engines = "sweep.engines.torch_fsdp2.TorchFSDP2,tests.helpers.planted_step_faults.OverridesIgnoredFSDP2"
    jobs, summary = _multirun(tmp_path, "model=transformer", "mp_policy=bf16", "baseline.precision=policy",
                              "+mp_policy.overrides.RMSNorm.param_dtype=float32",
                              "+mp_policy.overrides.RMSNorm.output_dtype=bfloat16", "steps=10",
                              f"engine.impl.torch={engines}")
    by_engine = {r["config"]["engine"]["impl"]["torch"].rsplit(".", 1)[-1]: r for r in jobs.values()}
    applied, ignored = by_engine["TorchFSDP2"], by_engine["OverridesIgnoredFSDP2"]
    assert not any("was not applied" in n for n in applied["notes"]), applied["notes"]
    seen = applied["dtypes"]["observed"]["overrides"]["layers.0.attn_norm"]
    assert (seen["param"], seen["input"], seen["output"]) == ("float32", "float32", "bfloat16")
    note = next(n for n in ignored["notes"] if "was not applied" in n)
    assert note.startswith("mp_policy.overrides.RMSNorm was not applied to layers.0.attn_norm, layers.0.mlp_norm")
    assert "its forward's parameters ran bfloat16, the override gives param_dtype=float32" in note
    assert "Note: a per-module policy not applied (N161) (1 job)." in summary["verdict"]  # V154, by code
    # the copies agree (the standalone copy runs the engine's wrapping too), yet the headline says it
    assert "ran another precision than configured" in flat(summary["headline"])


def test_the_fault_docs_using_gives_is_named_as_the_page_says(tmp_path):
    """docs/using.md's own fault (its first Python block, written out as the page says) under the
    command it gives: the culprit, exposed by SGD and hidden by Adam, with its first tensor and shard."""
    page = (ROOT / "docs" / "using.md").read_text()
    code = page.split("```python\n# my_faults.py", 1)[1].split("```", 1)[0]
    (tmp_path / "my_faults.py").write_text("# my_faults.py" + code)
    command = page.split("PYTHONPATH=. python -m sweep ", 1)[1].split("```", 1)[0].replace("\\\n", " ").split()
    proc = subprocess.run([sys.executable, "-m", "sweep", *command, f"hydra.sweep.dir={tmp_path}/multirun"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)])))
    verdict = _summary(tmp_path)["verdict"]
    assert "Culprit: engine.impl.torch=my_faults.OneRankScale" in verdict, proc.stdout[-3000:]
    assert "exposed by optimizer=sgd, which optimizer=adam hides below tolerance" in verdict
    assert "layer0.weight weight at step 0" in verdict and "only dim-0 shard 1 of 2 differs, held by rank 1" in verdict
