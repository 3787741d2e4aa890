"""The config tree composes, and bad values are rejected with a message naming the field."""

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from sweep.config.schema import ConfigError, world_size
from sweep.run.checks import check as validate
from tests.helpers.hyper_parallel import needs_no_hyper_parallel


def test_defaults_compose_to_the_seed_job(compose_cfg):
    cfg = compose_cfg()
    validate(cfg)
    assert cfg.framework.name == "torch" and cfg.engine.name == "torch_fsdp2"
    assert cfg.optimizer.name.value == "adam" and cfg.optimizer.lr == 1e-4
    assert cfg.compare.rtol == 1e-4 and cfg.compare.atol == 1e-4
    assert (cfg.model.in_size, cfg.model.hidden_size, cfg.model.out_size) == (32, 64, 24)
    assert cfg.steps == 1000 and cfg.seed == 42
    assert world_size(cfg) == 2


@pytest.mark.parametrize(
    "overrides, size",
    [(["mesh=dp4"], 4), (["mesh=hsdp2x2"], 4), (["mesh=dp2", "world_size=2"], 2)],
)
def test_world_size_follows_the_mesh(compose_cfg, overrides, size):
    cfg = compose_cfg(overrides)
    validate(cfg)
    assert world_size(cfg) == size


def test_every_preset_composes(compose_cfg):
    for group, options in {
        "mp_policy": ["fp32", "cast_forward_inputs", "bf16", "bf16_bf16", "fp16"],
        "optimizer": ["adam", "adamw", "sgd"],
        "mesh": ["dp2", "dp4", "hsdp2x2"],
        "engine": ["torch_fsdp2", "data_parallel"],
    }.items():
        for option in options:
            cfg = compose_cfg([f"{group}={option}"])
            assert cfg[group].name == option or cfg[group].name.value == option


def test_mixed_precision_presets_use_fsdp_field_names(compose_cfg):
    cfg = compose_cfg(["mp_policy=bf16"])
    assert cfg.mp_policy.param_dtype.value == "bfloat16"
    assert cfg.mp_policy.reduce_dtype.value == "float32"
    assert cfg.mp_policy.output_dtype is None and cfg.mp_policy.cast_forward_inputs is True


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["mesh=hsdp2x2", "world_size=2"], r"mesh.mesh_shape=\[2, 2\] needs world_size=4 .* but world_size=2"),
        (["mesh.mesh_shape=[2,2]"], r"mesh.mesh_dim_names=\['dp'\] has 1 names"),
        (["mesh.mesh_shape=[0]"], "positive integer"),
        (["steps=0"], r"steps=0: must be > 0"),
        (["compare.rtol=-1e-4"], r"compare.rtol=-0.0001: must be a finite number >= 0"),
        (["framework=mindspore", "engine=torch_fsdp2"], r"engine=torch_fsdp2 does not exist for framework=mindspore"),
        (["engine=data_parallel", "mp_policy=bf16"], r"engine=data_parallel has no mixed-precision policy"),
        pytest.param(["engine=hyper_parallel"], r"hyper-parallel.*not installed.*not on PyPI", marks=needs_no_hyper_parallel),
        (["framework=mindspore"], r"framework=mindspore has: engine=data_parallel, engine=hyper_parallel"),
        (["execution.timeout_s=-3"], r"execution.timeout_s=-3.0: must be a finite number > 0"),
        (["+engine.options.skip_dtensor_dispatch=true"],
         r"engine.options of engine=torch_fsdp2 \(TorchFSDP2\): Key 'skip_dtensor_dispatch' not in 'Options'.*its options: none"),
        (["framework.grad_api=value_and_grad"], r"framework.grad_api=value_and_grad is not framework=torch's; allowed: backward"),
        (["framework.name=jax"], r"framework.impl=sweep.frameworks.torch.TorchFramework is framework torch, not jax"),
        (["device=cuda"], r"device=cuda needs 2 GPUs for this mesh, this host has 0"),
        (["device=npu"], r"device=npu with framework=torch needs torch_npu"),
        (["framework.pool_launcher=msrun"],
         r"framework.pool_launcher=msrun does not start framework=torch .*elastic_fork"),
        (["framework=mindspore", "engine=data_parallel", "framework.launcher=torchrun"],
         r"framework.launcher=torchrun does not start framework=mindspore ranks; allowed: msrun"),
    ],
)
def test_cross_field_errors_name_the_field(compose_cfg, overrides, match):
    cfg = compose_cfg(overrides)
    with pytest.raises(ConfigError, match=match) as info:
        validate(cfg)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "overrides, bad, allowed",
    [
        (["mp_policy.param_dtype=float33"], "float33", "float32"),
        (["device=tpu"], "tpu", "npu"),
        (["steps=ten"], "ten", "Integer"),
    ],
)
def test_bad_values_fail_at_composition(compose_cfg, overrides, bad, allowed):
    with pytest.raises((ConfigCompositionException, ValidationError)) as info:
        compose_cfg(overrides)
    message = str(info.value) + str(info.value.__cause__ or "")
    assert bad in message and allowed in message


@pytest.mark.parametrize("override", ["optimizer=lamb", "mesh=dp3", "engine=megatron", "mp_policy=fp8"])
def test_unknown_preset_lists_the_available_ones(compose_cfg, override):
    with pytest.raises(MissingConfigException, match="Available options"):
        compose_cfg([override])


def test_default_multirun_grid_varies_the_reports_five_factors(compose_cfg):
    from hydra import compose

    cfg = compose_cfg()  # registers the schema
    from hydra import initialize_config_dir

    from tests.conftest import CONF

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        full = compose(config_name="config", return_hydra_config=True)
    params = full.hydra.sweeper.params
    assert set(params) == {"steps", "mp_policy", "reshard_after_forward", "mesh", "deterministic", "optimizer"}
    assert all("," in str(params[k]) for k in params if k != "steps")
    assert cfg.steps == 1000  # the grid's steps apply to multirun only
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        none = compose(config_name="config", overrides=["ablation=none"], return_hydra_config=True)
    assert not none.hydra.sweeper.params


def test_a_preset_with_a_grid_of_its_own_replaces_the_default_grid(compose_cfg):
    """Issue 52: ``experiment=bf16_loaded`` crossed its 2 levels with the default grid's 32
    jobs. Every ``experiment`` preset that sets ``hydra.sweeper.params`` sweeps only its own
    keys (and those of the presets it builds on): ``ablation=none`` under it."""
    from hydra import compose, initialize_config_dir

    from tests.conftest import CONF

    compose_cfg()  # registers the schema
    with_grid = []
    for path in sorted((CONF / "experiment").glob("*.yaml")):
        if not _own_grid(path):
            continue
        with_grid.append(path.stem)
        with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
            cfg = compose(config_name="config", overrides=[f"experiment={path.stem}"], return_hydra_config=True)
        assert set(cfg.hydra.sweeper.params) == _own_grid(path), f"experiment={path.stem}"
    assert {"bf16_loaded", "grad_accum", "clip_grad_norm", "batchnorm_fp16", "seed_hypotheses"} <= set(with_grid)


def _own_grid(path):
    """The grid keys a preset file sets, with those of the presets its defaults list names."""
    preset = OmegaConf.load(path)
    keys = set(OmegaConf.select(preset, "hydra.sweeper.params") or {})
    for entry in preset.get("defaults", []):
        if isinstance(entry, str) and (path.parent / f"{entry}.yaml").exists():
            keys |= _own_grid(path.parent / f"{entry}.yaml")
    return keys


def test_seed_issue_preset_is_the_report_as_config(compose_cfg):
    cfg = compose_cfg(["experiment=seed_issue"])
    assert cfg.framework.name == "mindspore" and cfg.engine.name == "hyper_parallel_report"
    assert cfg.engine.options.skip_dtensor_dispatch is False  # the report's optimizer step runs outside it
    assert list(cfg.mesh.mesh_shape) == [4] and list(cfg.mesh.mesh_dim_names) == ["dp"]
    assert cfg.mp_policy.name == "cast_forward_inputs" and cfg.mp_policy.param_dtype is None
    assert (cfg.steps, cfg.seed, cfg.deterministic, cfg.reshard_after_forward) == (1000, 42, True, True)
    assert cfg.weights.transfer.value == "shared" and cfg.order.value == "standalone_first"
    assert cfg.zero_grad is False and cfg.framework.grad_api.value == "value_and_grad"
    assert cfg.optimizer.name.value == "adam" and cfg.optimizer.lr == 1e-4


def test_npus_are_counted_before_launch_as_gpus_are(tmp_path, monkeypatch):
    from sweep.frameworks.base import check_npus, npu_count

    for name in ("davinci0", "davinci1", "davinci_manager", "davinci"):
        (tmp_path / name).write_text("")
    assert npu_count({}, tmp_path) == 2  # one /dev/davinci<N> per NPU
    assert npu_count({"ASCEND_RT_VISIBLE_DEVICES": "4,5,6"}, tmp_path) == 3  # CANN's own restriction wins
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1")
    with pytest.raises(ConfigError, match=r"device=npu needs 4 NPUs for this mesh, this host has 2"):
        check_npus(4)
    check_npus(2)


def test_a_setting_measured_on_one_device_reaches_the_ranks_on_that_device_only(compose_cfg):
    from sweep.run.pool import rank_env

    cpu = rank_env(compose_cfg(["framework=mindspore", "engine=data_parallel"]))
    npu = rank_env(compose_cfg(["framework=mindspore", "engine=data_parallel", "device=npu"]))
    assert cpu["MS_DEV_HOST_BLOCKING_RUN"] == "1" and "MS_DEV_HOST_BLOCKING_RUN" not in npu
    assert cpu["MS_RETRY_INTERVAL_LOWER"] == cpu["MS_RETRY_INTERVAL_UPPER"] == "1"
    assert not any(k.startswith("MS_RETRY_INTERVAL") for k in npu)
    assert cpu["GLOG_v"] == npu["GLOG_v"] == "3"
