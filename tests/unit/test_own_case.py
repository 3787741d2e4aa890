"""Issue 14's config pieces without processes: models, data, the train section's checks,
wrapping units, and the keys they add to the schema's roles."""

import numpy as np
import pytest

from sweep import models
from sweep.config import schema
from sweep.config.schema import BASELINE, DISTRIBUTED, LAUNCH, fields_with
from sweep.engines import wrapping
from sweep.models.data import tokens
from sweep.run import checks
from sweep.train import micro_batches


def test_new_keys_decide_baseline_reuse_and_not_the_shared_launch():
    baseline = fields_with(BASELINE)
    for key in ("model._target_", "model.init_dtype", "model.args", "data._target_", "data.args", "train.batch_size",
                "train.grad_accum_steps", "train.clip_grad_norm", "train.loss", "train.grad_scaler.enabled"):
        assert key in baseline
    assert "wrap" in fields_with(DISTRIBUTED) and "wrap" not in baseline
    assert "mp_policy.overrides" in fields_with(DISTRIBUTED)
    assert not {"wrap", "model._target_", "train.grad_accum_steps"} & set(fields_with(LAUNCH))


@pytest.mark.parametrize("overrides, message", [
    (["train.batch_size=3", "train.grad_accum_steps=2"], "not a multiple of train.grad_accum_steps=2"),
    (["train.clip_grad_norm=0"], "train.clip_grad_norm=0"),
    (["train.loss=hinge"], "train.loss=hinge: allowed: mse, cross_entropy"),
    (["+model.args.depth=3"], "cannot take model.args {'depth': 3}"),
    (["model._target_=no_such_pkg.build"], "No module named 'no_such_pkg'"),
    (["engine.impl.torch=tests.helpers.inside_faults"], "tests.helpers.inside_faults is a module, not a class: name "
                                                        "one in it (tests.helpers.inside_faults.<name>); it defines: "),
    (["model._target_=tests.helpers.own_models.no_framework"],
     "must take framework= (the framework each copy is built for, 'torch' or 'mindspore', passed by keyword); its "
     "signature is (in_size: "),
    (["framework=mindspore", "engine=data_parallel", "model=transformer"], "has no mindspore port; it runs on: torch"),
    (["framework=mindspore", "engine=data_parallel", "model._target_=sweep.models.transformer"],
     "model._target_=sweep.models.transformer has no mindspore port"),  # not the preset's name: model=mlp
    (["framework=mindspore", "engine=data_parallel", "model.init_dtype=bfloat16"], "float32 parameters only"),
    (["engine=data_parallel", "wrap=per_layer"], "replicates the whole model"),
    (["+mp_policy.overrides.norm1.param_dtype=float8"], "mp_policy.overrides.norm1.param_dtype=float8"),
    (["+model.norm=batchnorm"], "model.norm: no schema defines this key"),
])
def test_bad_case_settings_are_refused_before_launch(compose_cfg, overrides, message):
    with pytest.raises(schema.ConfigError, match=None) as caught:
        checks.check(compose_cfg(overrides))
    assert message in str(caught.value)


def test_a_factory_that_builds_another_frameworks_model_is_named_where_it_is_built(compose_cfg):
    pytest.importorskip("mindspore")
    cfg = compose_cfg(["framework=mindspore", "engine=data_parallel",
                       "model._target_=tests.helpers.own_models.torch_only"])
    with pytest.raises(schema.ConfigError) as caught:
        models.build(cfg, "mindspore")
    assert "returned a torch.nn.modules.linear.Linear for framework=mindspore, which needs a mindspore.nn.Cell" \
        in str(caught.value)
    assert type(models.build(compose_cfg(["model._target_=tests.helpers.own_models.torch_only"]), "torch")).__name__ \
        == "Linear"


def test_the_old_batch_size_key_still_works_with_a_warning(compose_cfg):
    cfg = compose_cfg(["data.batch_size=4"])
    with pytest.warns(FutureWarning, match="data.batch_size is deprecated"):
        schema.normalize(cfg)
    assert cfg.train.batch_size == 4 and cfg.data.batch_size is None


def test_a_factory_gets_only_the_arguments_it_names(compose_cfg):
    def narrow(*, framework, out_size):
        return framework, out_size

    cfg = compose_cfg(["+model.args.width=5"])
    assert models.factory_kwargs(cfg, narrow) == {"out_size": 24, "width": 5}
    assert models.factory_kwargs(cfg, models.mlp) == {"in_size": 32, "hidden_size": 64, "out_size": 24,
                                                      "init_std": 0.01, "width": 5}


def test_token_data_is_a_next_token_task():
    (x, y), = tokens(1, batch_size=3, seed_offset=0, vocab_size=11, seq_len=6)
    assert x.shape == y.shape == (3, 6) and x.dtype == np.int64
    assert np.array_equal(x[:, 1:], y[:, :-1])  # y is x shifted by one
    stride = (x[:, 1] - x[:, 0]) % 11
    assert np.array_equal((x[:, 0:1] + stride[:, None] * np.arange(1, 7)) % 11, y)


def test_micro_batches_are_equal_row_slices():
    x, y = np.arange(8).reshape(8, 1), np.arange(8)
    parts = micro_batches(x, y, 4)
    assert [p[1].tolist() for p in parts] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert micro_batches(x, y, 1)[0][0] is x


def test_units_are_the_layers_and_the_overrides_innermost_first(compose_cfg):
    cfg = compose_cfg(["model=transformer", "wrap=per_layer", "mp_policy=bf16",
                       "+mp_policy.overrides.RMSNorm.param_dtype=float32", "+mp_policy.overrides.head.output_dtype=float32"])
    model = models.build(cfg, "torch")
    units = wrapping.units(model, cfg)
    names = [name for name, _, _ in units]
    assert names[:5] == ["layers.0.attn_norm", "layers.0.mlp_norm", "layers.1.attn_norm", "layers.1.mlp_norm",
                         "layers.0"]  # nested units before the block that holds them
    assert set(names) == {"layers.0", "layers.1", "head", "norm", "layers.0.attn_norm", "layers.0.mlp_norm",
                          "layers.1.attn_norm", "layers.1.mlp_norm"}
    policy = {name: p for name, _, p in units}
    assert policy["norm"].param_dtype == "float32" and policy["layers.0"].param_dtype == "bfloat16"
    assert policy["head"].output_dtype == "float32" and policy["head"].param_dtype == "bfloat16"


def test_an_override_that_names_nothing_lists_what_the_model_has(compose_cfg):
    cfg = compose_cfg(["+mp_policy.overrides.norm9.param_dtype=float32"])
    with pytest.raises(ValueError, match="model=mlp has no module or module class of that name; its modules: "
                                         "layer0, layer1"):
        wrapping.units(models.build(cfg, "torch"), cfg)
    own = compose_cfg(["+mp_policy.overrides.norm9.param_dtype=float32",
                       "model._target_=tests.helpers.own_models.torch_only"])
    with pytest.raises(ValueError, match=r"model._target_=tests.helpers.own_models.torch_only has no module"):
        wrapping.units(models.build(own, "torch"), own)


def test_units_that_share_a_parameter_are_left_to_the_root_and_said(compose_cfg):
    cfg = compose_cfg(["wrap=per_layer", "model._target_=tests.helpers.own_models.tied_chain"])
    notes = []
    assert [name for name, _, _ in wrapping.units(models.build(cfg, "torch"), cfg, notes)] == ["inp", "out"]
    assert notes == ["a tied unit left to the root (wrap=per_layer): mid shares mid.weight with mid2, so it is no "
                     "fully_shard unit of its own: the "
                     "root's unit holds it (FSDP2 manages a tied parameter in one unit)",
                     "a tied unit left to the root (wrap=per_layer): mid2 shares mid.weight with mid, so it is no "
                     "fully_shard unit of its own: the "
                     "root's unit holds it (FSDP2 manages a tied parameter in one unit)"]
    # one of the two a unit of its own: the root would take the other's (the same) parameter
    cfg = compose_cfg(["model._target_=tests.helpers.own_models.tied_chain", "+mp_policy.overrides.mid.param_dtype=float32"])
    with pytest.raises(ValueError, match="mp_policy.overrides: mid shares mid.weight with mid2, so it cannot be"):
        wrapping.units(models.build(cfg, "torch"), cfg)


def test_init_dtype_sets_the_parameters_dtype(compose_cfg):
    import torch

    model = models.build(compose_cfg(["model=mlp_norm", "model.init_dtype=bfloat16"]), "torch")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_override_targets_find_the_modules_through_wrappers_and_fsdps_class_swap(compose_cfg):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    cfg = compose_cfg(["model=transformer", "mp_policy=bf16", "+mp_policy.overrides.RMSNorm.param_dtype=float32",
                       "+mp_policy.overrides.head.output_dtype=float32"])
    model = models.build(cfg, "torch")
    model.layers[0] = checkpoint_wrapper(model.layers[0])  # names gain _checkpoint_wrapped_module
    # a subclass named otherwise, as fully_shard makes, still matches by its base class
    model.norm.__class__ = type("FSDPRMSNorm", (type(model.norm),), {})
    from sweep.train.observers.dtypes import override_targets

    found = override_targets(model, cfg)
    assert set(found) == {"layers.0.attn_norm", "layers.0.mlp_norm", "layers.1.attn_norm", "layers.1.mlp_norm",
                          "norm", "head"}
    key, policy = found["norm"]
    assert key == "RMSNorm" and policy["param_dtype"] == "float32" and policy["output_dtype"] is None
    assert found["head"] == ("head", {"param_dtype": "bfloat16", "reduce_dtype": "float32",
                                      "output_dtype": "float32", "cast_forward_inputs": True})


def test_an_override_whose_module_ran_another_dtype_is_named_once_per_key_and_departure():
    from sweep.analysis import dtypes
    from sweep.report.notes import text_of

    def override_notes(observed):  # the notes as the report renders them
        return [text_of(n) for n in dtypes.override_notes(observed)]

    want = {"param_dtype": "float32", "reduce_dtype": None, "output_dtype": "bfloat16", "cast_forward_inputs": True}
    applied = {"key": "RMSNorm", "want": want, "param": "float32", "input": "float32", "output": "bfloat16"}
    ignored = dict(applied, param="bfloat16", input="bfloat16")
    assert override_notes({"overrides": {"norm": applied}}) == []
    observed = {"overrides": {f"layers.{i}.norm": ignored for i in range(5)}}
    assert override_notes(observed) == [
        "mp_policy.overrides.RMSNorm was not applied to layers.0.norm, layers.1.norm, layers.2.norm, layers.3.norm "
        "and 1 more: its forward's parameters ran bfloat16, the override gives param_dtype=float32, its input ran "
        "bfloat16, which cast_forward_inputs casts to float32"]
    # an override that only sets output_dtype: the parameters are the job's, the output is checked
    head = {"key": "head", "want": {"param_dtype": None, "output_dtype": "float32", "cast_forward_inputs": True},
            "param": "float32", "input": "float32", "output": "bfloat16"}
    assert override_notes({"overrides": {"head": head}}) == [
        "mp_policy.overrides.head was not applied to head: its output ran bfloat16, the override gives "
        "output_dtype=float32"]
    assert override_notes({}) == [] and override_notes(None) == []
    typed = dtypes.override_notes(observed)[0]
    assert typed.code == "N161" and typed.values["key"] == "RMSNorm" and len(typed.values["modules"]) == 5


def test_per_layer_units_of_a_container_child_are_its_entries():
    """A model whose layers sit in a ModuleList or ModuleDict not named ``layers``: each entry is a
    unit (``fully_shard`` cannot hook a container, which has no forward of its own)."""
    import torch

    class Blocks(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Linear(4, 4)
            self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4)])
            self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(4, 1)})
            self.act = torch.nn.ReLU()

    assert wrapping.layer_names(Blocks()) == ["embed", "blocks.0", "blocks.2", "heads.a"]

    class Named(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleDict({"first": torch.nn.Linear(2, 2), "second": torch.nn.Linear(2, 2)})

    assert wrapping.layer_names(Named()) == ["layers.first", "layers.second"]


def test_a_loss_of_more_than_one_element_is_refused_naming_train_loss():
    """A new user's ``reduction='none'`` loss failed with torch's "only one element tensors can be
    converted to Python scalars"; it is refused at its first call, naming the setting."""
    import torch

    from sweep.train.torch_step import loss_function

    out, target = torch.ones(4, 3), torch.zeros(4, 3)
    with pytest.raises(ValueError, match=r"^train.loss=tests.helpers.own_models.per_row_mse returned a tensor of "
                                         r"shape \(4, 3\): a loss returns one element"):
        loss_function("tests.helpers.own_models.per_row_mse")(out, target)
    assert float(loss_function("tests.helpers.own_models.sum_mse")(out, target)) == 12.0
    # a Python float: named, not "'float' object has no attribute 'detach'"
    with pytest.raises(TypeError, match=r"^train.loss=tests.helpers.own_models.item_mse returned a float, not a "
                                        r"tensor"):
        loss_function("tests.helpers.own_models.item_mse")(out, target)
    # a model that returns a tuple, with a built-in loss: named, not "'tuple' object has no attribute 'size'"
    with pytest.raises(TypeError, match=r"^train.loss=mse reads one output tensor, and the model returned a tuple"):
        loss_function("mse")((out, out), target)
    assert float(loss_function("mse")(out, target)) == 1.0
