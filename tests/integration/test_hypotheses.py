"""The report's other hypotheses as factors (issue 26) on real jobs: activation
checkpointing (full, selective; with Dropout), a meta-device init, CPU offload, an int
reshard_after_forward, compile, an lr schedule, frozen and tied parameters, on FSDP2 and on
MindSpore. Each applied to both copies alike: a correct feature changes nothing, so every
job passes bit for bit. One multirun of every torch case (the product's fast path: shared
launches), asserted by the tests, and one on MindSpore."""

import pytest

from tests.conftest import case_jobs, multirun_jobs

pytestmark = pytest.mark.slow

DROPOUT = "model._target_=tests.helpers.dropout_model.dropout_mlp"


def _multirun(tmp_path, *overrides):
    return multirun_jobs(tmp_path, *overrides, exit_codes=(0,))[0]


def _bit_for_bit(job):
    assert job["status"] == "ok", (job["overrides"], job["reason"])
    assert job["losses"]["standalone"] == job["losses"]["distributed"], job["overrides"]


AC = {f"ac_{mode}_{model}": [f"activation_checkpoint.mode={mode}", f"model={model}", "steps=6"]
      for mode in ("none", "full", "selective") for model in ("mlp", "transformer")}
RECOMPUTE = {f"recompute_dropout_{wrap}": [DROPOUT, "activation_checkpoint.mode=full",
                                           "activation_checkpoint.preserve_rng_state=true", f"wrap={wrap}", "steps=8"]
             for wrap in ("root", "per_layer")}
DP4 = {f"dp4_{init}_{offload}": ["mesh=dp4", f"model.init={init}", f"offload_policy={offload}",
                                 "reshard_after_forward=2", "steps=5"]
       for init in ("eager", "meta") for offload in ("none", "cpu")}
COMPILE = {f"compile_{on}": ["model=transformer", f"compile.enabled={on}", "compile.backend=aot_eager",
                             "train.lr_scheduler=cosine", "train.warmup_steps=2", "model.frozen=[layers.0.*]",
                             "model.tie=[[embed.weight,head.weight]]", "steps=5"]
           for on in ("false", "true")}


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """Every torch case of this module in one multirun (shared launches), by case name."""
    found, _ = case_jobs(tmp_path_factory.mktemp("hypotheses"), AC | RECOMPUTE | DP4 | COMPILE, exit_codes=(0,))
    return {name: record for name, (record, _) in found.items()}


def _of(cases, group):
    return [cases[name] for name in group]


@pytest.mark.exhaustive
def test_activation_checkpointing_changes_nothing_and_says_what_it_wrapped(cases):
    checkpointed = _of(cases, AC)
    assert len(checkpointed) == 6
    for job in checkpointed:
        _bit_for_bit(job)
        applied = job["features"]["activation_checkpoint"]
        mode = job["config"]["activation_checkpoint"]["mode"]
        assert applied["mode"] == mode
        model = job["config"]["model"]["name"]
        want = [] if mode == "none" else (["layers.0", "layers.1"] if model == "transformer" else ["layer0", "layer1"])
        assert applied["wrapped"] == want, (mode, model, applied)
    # the same losses whatever the mode: recompute is exact
    by_model = {}
    for job in checkpointed:
        by_model.setdefault(job["config"]["model"]["name"], []).append(job["losses"]["distributed"])
    assert all(all(seq == runs[0] for seq in runs) for runs in by_model.values())


@pytest.mark.exhaustive
def test_a_recompute_replays_the_forwards_dropout_masks_in_both_copies(cases):
    for job in _of(cases, RECOMPUTE):
        _bit_for_bit(job)
        assert job["random_draws"] is True and job["features"]["activation_checkpoint"]["wrapped"]


@pytest.mark.exhaustive
def test_meta_init_cpu_offload_and_an_int_reshard_on_dp4(cases):
    jobs = _of(cases, DP4)
    assert len(jobs) == 4
    for job in jobs:
        _bit_for_bit(job)
        assert job["collectives"]["notes"] == [], job["collectives"]  # gathers over groups of 2 are expected
    meta = [j for j in jobs if j["config"]["model"]["init"] == "meta"]
    eager = [j for j in jobs if j["config"]["model"]["init"] == "eager"]
    assert all(j["features"]["init"] == "meta" for j in meta)
    # a meta init draws its initial weights on the shards: not the eager ones, and both copies start from them
    assert meta[0]["losses"]["standalone"][0] != eager[0]["losses"]["standalone"][0]


@pytest.mark.exhaustive
def test_compile_a_cosine_schedule_frozen_and_tied_parameters(cases):
    jobs = _of(cases, COMPILE)
    assert [j["config"]["compile"]["enabled"] for j in jobs] == [False, True]
    _bit_for_bit(jobs[0])
    # compiled, FSDP2's hooks split the graph where the standalone copy's is whole: the copies may part by a
    # unit's rounding (one ulp at one step on one machine, none on another), within the job's own envelope
    compiled = jobs[1]
    assert compiled["status"] == "ok" and compiled["envelope"]["loss"]["within"], compiled["envelope"]
    for job in jobs:
        features = job["features"]
        assert features["tied"] == [["embed.weight", "head.weight"]]
        assert "layers.0.qkv.weight" in features["frozen"] and "layers.1.qkv.weight" not in features["frozen"]
        lrs = features["lr"]["distributed"]
        assert lrs[:2] == pytest.approx([5e-5, 1e-4]) and lrs[-1] < lrs[2]
        # step 0 ran the scheduled lr, which is what the config implies: no optimizer note
        assert job["optimizer"]["distributed"][0]["lr"] == pytest.approx(5e-5)
        assert not any(n.startswith("optimizer ") for n in job["notes"]), job["notes"]
    assert jobs[1]["features"]["compile"] == "aot_eager"
    # compiled or not, the same numbers up to float32 rounding (aot_eager may order a sum otherwise: one ulp
    # apart at one step on the CI machine, bit-equal on another)
    for copy in ("standalone", "distributed"):
        assert jobs[1]["losses"][copy] == pytest.approx(jobs[0]["losses"][copy], rel=4e-7)


def test_mindspore_recomputes_freezes_and_schedules_both_copies_alike(tmp_path):
    jobs = _multirun(tmp_path, "framework=mindspore", "engine=data_parallel", "activation_checkpoint.mode=full",
                     "model.frozen=[layer0.*]", "train.lr_scheduler=linear_warmup", "train.warmup_steps=3",
                     "steps=5")
    job = jobs[0]
    _bit_for_bit(job)
    assert job["features"]["activation_checkpoint"]["mechanism"] == "MindSpore Cell.recompute()"
    assert job["features"]["frozen"] == ["layer0.weight", "layer0.bias"]
    assert job["features"]["lr"]["schedule"][:3] == pytest.approx([1e-4 / 3, 2e-4 / 3, 1e-4])
