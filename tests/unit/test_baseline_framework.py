"""``baseline.framework``: the standalone copy in the other framework. The field, its role
and its normalisation; the one-line refusals before launch; the conversion of weights by
name and layout (``sweep.models.convert``); the config the standalone process runs under."""

import importlib.util

import numpy as np
import pytest

from sweep.config import presets
from sweep.config.roles import BASELINE
from sweep.config.schema import ConfigError, fields_with, normalize, to_container
from sweep.config.sections.baseline import foreign_framework
from sweep.models import convert
from sweep.run.baseline import key, key_fields
from sweep.run.checks import check as validate
from sweep.train import copy_order, crosses_frameworks, standalone_config

both = pytest.mark.skipif(not (importlib.util.find_spec("torch") and importlib.util.find_spec("mindspore")),
                          reason="needs torch and mindspore installed")


@pytest.fixture
def job(compose_cfg):
    def _job(*overrides):
        cfg = compose_cfg(list(overrides))
        normalize(cfg)
        return cfg
    return _job


def test_the_field_defaults_to_the_jobs_own_framework_and_changes_the_baseline(job):
    assert "baseline.framework" in fields_with(BASELINE)
    cfg = job()
    assert cfg.baseline.framework is None and foreign_framework(cfg) is None and not crosses_frameworks(cfg)
    base = key(key_fields(to_container(cfg), 2))
    # naming the job's own framework is the default (one cache key); the other one is another baseline
    same = job("baseline.framework=torch")
    assert same.baseline.framework is None and key(key_fields(to_container(same), 2)) == base
    other = job("baseline.framework=mindspore")
    assert foreign_framework(other) == "mindspore" and crosses_frameworks(other)
    assert key(key_fields(to_container(other), 2)) != base
    assert copy_order(other) == "separate" and copy_order(cfg) == "standalone_first"


@both
@pytest.mark.parametrize("overrides", [
    ["framework=mindspore", "engine=data_parallel", "baseline.framework=torch"],
    ["framework=mindspore", "engine=data_parallel", "baseline.framework=torch", "model=mlp_norm"],
    ["baseline.framework=mindspore"],
    ["baseline.framework=mindspore", "model=mlp_norm", "optimizer=sgd", "model.init=meta"],
])
def test_presets_both_frameworks_have_pass(job, overrides):
    cfg = job(*overrides)
    validate(cfg)  # raises ConfigError on a refusal
    assert str(cfg.baseline.framework) in ("torch", "mindspore") and cfg.baseline.framework != cfg.framework.name


@both
@pytest.mark.parametrize("overrides, match", [
    (["baseline.framework=mindspore", "model=transformer"],
     r"^baseline.framework=mindspore: model=transformer has no mindspore port; "
     r"it runs on: torch$"),
    (["baseline.framework=mindspore", "train.loss=cross_entropy"],
     r"^baseline.framework=mindspore: train.loss=cross_entropy: sweep's MindSpore step has the mse loss only$"),
    (["baseline.framework=mindspore", "compile.enabled=true"],
     r"^baseline.framework=mindspore: compile.enabled=true: sweep's MindSpore step does not run it"),
    (["baseline.framework=mindspore", "model.init_dtype=bfloat16"],
     r"^baseline.framework=mindspore: model.init_dtype=bfloat16: sweep's MindSpore step creates float32"),
    (["baseline.framework=jax"],
     r"^baseline.framework=jax: no framework preset of that name; allowed: mindspore, torch$"),
    (["framework=mindspore", "engine=data_parallel", "baseline.framework=torch", "weights.transfer=shared"],
     r"^baseline.framework=torch with weights.transfer=shared: two frameworks' copies cannot share storage"),
    (["baseline.framework=mindspore", "baseline.precision=policy"],
     r"^baseline.framework=mindspore with baseline.precision=policy: the policy baseline is fully_shard"),
    (["baseline.framework=mindspore", "baseline.file=golden.json"],
     r"^baseline.framework=mindspore with baseline.file: the golden file's losses are the baseline"),
])
def test_what_has_no_counterpart_is_refused_in_one_line(job, overrides, match):
    with pytest.raises(ConfigError, match=match) as info:
        validate(job(*overrides))
    assert "\n" not in str(info.value)


def test_the_standalone_process_runs_under_the_other_frameworks_preset(job):
    cfg = job("framework=mindspore", "engine=data_parallel", "baseline.framework=torch", "steps=7")
    plain = to_container(cfg)
    alone = standalone_config(plain)
    assert alone.framework.name == "torch" and alone.framework.impl == presets.framework("torch").impl
    assert alone.framework.grad_api == "backward" and alone.framework.device_map.cpu == "gloo"
    assert alone.steps == 7 and alone.engine.name == "data_parallel" and alone.baseline.framework == "torch"
    assert crosses_frameworks(alone)  # it takes the other framework's initial weights
    own = to_container(job())
    assert standalone_config(own) is own


# The presets' tensors, as each framework names them (sweep.models.torch_models, mindspore_models).
TORCH_MLP_NORM = {"layer0.weight": (64, 32), "layer0.bias": (64,), "norm0.weight": (64,), "norm0.bias": (64,),
                  "layer1.weight": (24, 64), "layer1.bias": (24,), "norm1.weight": (24,), "norm1.bias": (24,),
                  "norm1.running_mean": (24,), "norm1.running_var": (24,), "norm1.num_batches_tracked": ()}
MINDSPORE_MLP_NORM = {"layer0.weight": (64, 32), "layer0.bias": (64,), "norm0.gamma": (64,), "norm0.beta": (64,),
                      "layer1.weight": (24, 64), "layer1.bias": (24,), "norm1.moving_mean": (24,),
                      "norm1.moving_variance": (24,), "norm1.gamma": (24,), "norm1.beta": (24,)}


def _state(shapes, seed):
    rng = np.random.RandomState(seed)
    return {n: (np.zeros(s, np.int64) if n.endswith("num_batches_tracked") else rng.randn(*s).astype(np.float32))
            for n, s in shapes.items()}


@pytest.mark.parametrize("source, shapes, target, wanted", [
    ("mindspore", MINDSPORE_MLP_NORM, "torch", TORCH_MLP_NORM),
    ("torch", TORCH_MLP_NORM, "mindspore", MINDSPORE_MLP_NORM),
])
def test_weights_convert_by_name_and_keep_their_layout(tmp_path, source, shapes, target, wanted):
    state = _state(shapes, 0)
    convert.save(tmp_path / "w.npz", state, source)
    canonical, writer, names = convert.load(tmp_path / "w.npz")
    assert writer == source and "norm1.num_batches_tracked" not in canonical
    values, renamed = convert.from_canonical(canonical, wanted, target, writer, names)
    assert "norm1.num_batches_tracked" not in values  # torch's own, 0 before any step
    pairs = {"norm0.weight": "norm0.gamma", "norm0.bias": "norm0.beta", "norm1.weight": "norm1.gamma",
             "norm1.bias": "norm1.beta", "norm1.running_mean": "norm1.moving_mean",
             "norm1.running_var": "norm1.moving_variance"}
    assert renamed == (pairs if target == "torch" else {v: k for k, v in pairs.items()})
    for name, value in values.items():
        assert value.shape == wanted[name]
        np.testing.assert_array_equal(value, state[renamed.get(name, name)])


def test_a_tensor_without_counterpart_or_of_another_layout_is_named(tmp_path):
    convert.save(tmp_path / "w.npz", _state(MINDSPORE_MLP_NORM, 1), "mindspore")
    canonical, writer, names = convert.load(tmp_path / "w.npz")
    transposed = dict(TORCH_MLP_NORM, **{"layer0.weight": (32, 64)})
    with pytest.raises(ValueError, match=r"^torch's layer0.weight is \(32, 64\), the mindspore copy's layer0.weight "
                                         r"is \(64, 32\): no layout conversion for it$"):
        convert.from_canonical(canonical, transposed, "torch", writer, names)
    extra = dict(TORCH_MLP_NORM, **{"layer2.weight": (3, 3)})
    with pytest.raises(ValueError, match=r"^torch's layer2.weight has no counterpart in the mindspore copy's weights"):
        convert.from_canonical(canonical, extra, "torch", writer, names)
    fewer = {k: v for k, v in TORCH_MLP_NORM.items() if not k.startswith("norm1")}
    with pytest.raises(ValueError, match=r"^the mindspore copy's norm1.beta, norm1.gamma, norm1.moving_mean, "
                                         r"norm1.moving_variance have no counterpart in the torch copy$"):
        convert.from_canonical(canonical, fewer, "torch", writer, names)
