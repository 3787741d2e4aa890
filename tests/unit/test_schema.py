"""Field roles are declared on every schema field and drive the derived field lists;
unknown keys are rejected; deprecated keys still work, with a warning."""

import dataclasses

import pytest
from hydra.errors import ConfigCompositionException

from sweep.config import schema
from sweep.config.schema import BASELINE, LAUNCH, ROLES, fields_with, to_container
from sweep.frameworks.mindspore import MindSporeFramework
from sweep.frameworks.torch import TorchFramework
from sweep.run import checks
from sweep.run.baseline import key_fields
from sweep.run.pool import pool_key
from tests.helpers.hyper_parallel import needs_hyper_parallel


def _leaves(cls, prefix=""):
    for f in dataclasses.fields(cls):
        section = schema._SECTIONS.get(f.type) if isinstance(f.type, str) else None
        if "affects" in f.metadata:
            yield prefix + f.name, f.metadata["affects"]
        elif section is not None:
            yield from _leaves(section, prefix + f.name + ".")
        else:
            yield prefix + f.name, None


def test_every_schema_field_declares_its_role():
    undeclared = [path for path, roles in _leaves(schema.SweepConfig) if roles is None]
    assert undeclared == [], f"declare what these affect (sweep.config.schema.affects): {undeclared}"
    for role in ROLES:
        fields_with(role)  # raises on an undeclared field


def test_an_undeclared_field_is_caught():
    @dataclasses.dataclass
    class Extended(schema.SweepConfig):
        new_factor: int = 3

    with pytest.raises(ValueError, match="new_factor declares no role"):
        fields_with(BASELINE, Extended)


def test_derived_lists_follow_the_roles():
    assert "optimizer.lr" in fields_with(BASELINE) and "mp_policy.param_dtype" not in fields_with(BASELINE)
    assert "mesh.mesh_shape" not in fields_with(BASELINE) and "compare.rtol" not in fields_with(BASELINE)
    assert set(fields_with(LAUNCH)) == {
        "framework.name", "framework.impl", "framework.pool_launcher", "framework.device_map", "framework.env",
        "framework.device_env",
        "execution.omp_num_threads", "device", "runtime.python", "runtime.pythonpath",
    }
    assert fields_with("verdict") == ["compare.rtol", "compare.atol", "compare.noise_floor", "compare.envelope",
                                      "compare.envelope_margin", "repeat"]


def test_pool_key_and_baseline_key_follow_the_roles(compose_cfg):
    base = to_container(compose_cfg())
    other_mesh = to_container(compose_cfg(["mesh=hsdp2x2"]))
    assert pool_key(base, TorchFramework, 4) == pool_key(other_mesh, TorchFramework, 4)
    assert pool_key(base, TorchFramework, 2) != pool_key(base, TorchFramework, 4)
    threads = to_container(compose_cfg(["execution.omp_num_threads=2"]))
    assert pool_key(base, TorchFramework, 2) != pool_key(threads, TorchFramework, 2)
    # MindSpore sets `deterministic` once per process: it joins that framework's key only
    ms = [to_container(compose_cfg(["framework=mindspore", "engine=data_parallel", f"deterministic={d}"]))
          for d in ("true", "false")]
    assert pool_key(ms[0], MindSporeFramework, 2) != pool_key(ms[1], MindSporeFramework, 2)
    det = [to_container(compose_cfg([f"deterministic={d}"])) for d in ("true", "false")]
    assert pool_key(det[0], TorchFramework, 2) == pool_key(det[1], TorchFramework, 2)
    assert key_fields(base, 2) == key_fields(other_mesh, 4)


@pytest.mark.parametrize("override, key", [
    ("+anything.unknown=1", "anything"), ("+model.norm=batchnorm", "model.norm"), ("+engine.flavour=x", "engine.flavour"),
    ("+framework.backend.cpu=gloo", "framework.backend"), ("+execution.retries=3", "execution.retries"),
])
def test_a_key_no_schema_defines_is_rejected(compose_cfg, override, key):
    with pytest.raises(schema.ConfigError, match=rf"^{key}: no schema defines this key"):
        checks.check(compose_cfg([override]))


def test_a_misspelt_key_added_with_plus_is_given_the_close_one(compose_cfg):
    with pytest.raises(schema.ConfigError) as caught:
        checks.check(compose_cfg(["+compare.rtoll=1e-3"]))
    assert str(caught.value).startswith("compare.rtoll: no schema defines this key (did you mean compare.rtol? ")
    with pytest.raises(schema.ConfigError) as caught:
        checks.check(compose_cfg(["+anything.unknown=1"]))
    assert "did you mean" not in str(caught.value)


def test_a_key_without_plus_is_rejected_at_composition(compose_cfg):
    with pytest.raises(ConfigCompositionException, match="Could not override 'model.norm'"):
        compose_cfg(["model.norm=batchnorm"])


def test_old_weights_copy_key_still_works_with_a_warning(compose_cfg):
    cfg = compose_cfg(["weights.copy=shared"])
    with pytest.warns(FutureWarning, match="weights.copy is deprecated: use weights.transfer"):
        schema.normalize(cfg)
    assert cfg.weights.transfer.value == "shared" and cfg.weights["copy"] is None


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["compare.rtol=nan"], r"compare.rtol=nan: must be a finite number >= 0"),
        (["seed=-1"], r"seed=-1: must be in \[0, 2\*\*32\)"),
        (["optimizer.lr=0"], r"optimizer.lr=0.0: must be a finite number > 0"),
        (["engine.impl.torch=nope.Mod"], r"engine.impl.torch=nope.Mod does not import"),
        (["engine.impl.torch=sweep.engines.data_parallel.MindSporeGradReducer"],
         r"is an engine for framework=mindspore"),
        (["framework.impl=sweep.frameworks.nope.Nope"], r"framework.impl=sweep.frameworks.nope.Nope does not import"),
        (["train.loss=my_faults.nope"], r"train.loss=my_faults.nope does not import"),  # before launch, not in a rank
        (["engine=hyper_parallel", "+engine.options.flavour=x"], r"Key 'flavour' not in"),
        # a new user's paths: the module imports and lacks the name; the name is a function, not a class
        (["model._target_=sweep.models.torch_models.nope"],
         r"module sweep.models.torch_models has no 'nope' \(it defines: .*MLP.*\)$"),
        (["engine.impl.torch=sweep.models.data.tokens"], r"sweep.models.data.tokens is a function, not a class$"),
        # a fault planted in data_parallel's class, run under hyper_parallel's preset (its options)
        pytest.param(["framework=mindspore", "engine=hyper_parallel",
                      "engine.impl.mindspore=sweep.engines.data_parallel.MindSporeGradReducer"],
                     r"MindSporeGradReducer is the engine of engine=data_parallel, not of engine=hyper_parallel",
                     marks=[pytest.mark.mindspore, *needs_hyper_parallel]),
    ],
)
def test_each_section_and_component_checks_itself(compose_cfg, overrides, match):
    cfg = compose_cfg(overrides)
    with pytest.raises(schema.ConfigError, match=match):
        checks.check(cfg)


def test_a_plugged_in_engine_is_checked_by_its_own_class(compose_cfg):
    # data parallel refuses a policy that sets dtypes; plugged in under another preset's name, it still does
    cfg = compose_cfg(["mp_policy=bf16", "engine.impl.torch=sweep.engines.data_parallel.TorchDDP"])
    with pytest.raises(schema.ConfigError, match="has no mixed-precision policy"):
        checks.check(cfg)


def test_a_third_framework_needs_no_change_of_the_core(compose_cfg, tmp_path):
    from sweep import engines, frameworks
    from sweep.run import pool
    from tests.helpers.toy_framework import OVERRIDES, ToyEngine, ToyFramework

    cfg = compose_cfg(OVERRIDES + ["mesh=dp4"])
    checks.check(cfg)
    assert frameworks.load(cfg) is ToyFramework and engines.engine_class(cfg, "toy") is ToyEngine
    spec = ToyFramework.job_launch("toyrun", 4, tmp_path, env={}, timeout_s=1)
    assert spec.argv == ["toyrun", "-n4", str(tmp_path)]
    config = to_container(cfg)
    assert pool.pool_key(config, ToyFramework, 4) != pool.pool_key(dict(config, seed=7), ToyFramework, 4)
    with pytest.raises(schema.ConfigError, match="framework.launcher=torchrun does not start framework=toy ranks"):
        checks.check(compose_cfg(OVERRIDES + ["framework.launcher=torchrun"]))


def test_settings_without_effect_are_noted(compose_cfg):
    from sweep.records import JobRecord
    from sweep.run.judge import effect_notes

    cfg = compose_cfg(["engine=data_parallel", "reshard_after_forward=false", "weights.transfer=shared"])
    record = JobRecord(overrides=["engine=data_parallel", "reshard_after_forward=false"],
                       weights_moved={"distributed_during_standalone": 0.0, "standalone_during_distributed": 0.0})
    notes = effect_notes(cfg, record)
    assert notes[0] == "reshard_after_forward had no effect: engine=data_parallel does not use it"
    assert notes[1].startswith("weights.transfer=shared had no effect: engine=data_parallel copied the parameters")
    cfg = compose_cfg(["framework=mindspore", "engine=data_parallel", "zero_grad=true"])
    record = JobRecord(overrides=["zero_grad=true"], zero_grad_effective=False)
    assert effect_notes(cfg, record) == ["zero_grad=true had no effect: engine=data_parallel's gradients are "
                                         "functional (nothing accumulates to clear)"]
    # an engine written for the other framework (a new user's override, silently unused before)
    impl = ["framework=mindspore", "engine=data_parallel", "engine.impl.torch=tests.helpers.ran_faults.StuckGradsFSDP2"]
    assert effect_notes(compose_cfg(impl), JobRecord(overrides=impl)) == [
        "engine.impl.torch had no effect: framework=mindspore builds its engine from engine.impl.mindspore"]
    assert effect_notes(compose_cfg(impl[2:]), JobRecord(overrides=impl[2:])) == []
    assert effect_notes(compose_cfg(["reshard_after_forward=false"]), JobRecord(overrides=["reshard_after_forward=false"])) == []
    # a group chosen on the command line (mp_policy=fp32) sets an unused field only where it moves it off its default
    # (a new user's mp_policy=fp32 with engine=data_parallel was told cast_forward_inputs, never set, had no effect)
    group = ["engine=data_parallel", "mp_policy=fp32"]
    assert effect_notes(compose_cfg(group), JobRecord(overrides=group)) == []
    moved = group + ["mp_policy.cast_forward_inputs=false"]
    assert effect_notes(compose_cfg(moved), JobRecord(overrides=moved)) == [
        "mp_policy.cast_forward_inputs had no effect: engine=data_parallel does not use it"]
