"""engine=hyper_parallel before launch: how the config maps onto the installed
hyper-parallel, and what it rejects. Reads the installed release (no import of it, no
process started)."""

import re

import pytest

from sweep.config.schema import ConfigError, world_size
from sweep.engines import hyper_parallel as hp
from sweep.run.checks import check as validate
from tests.helpers.hyper_parallel import needs_hyper_parallel

pytestmark = needs_hyper_parallel


def test_installed_version_is_recorded():
    info = hp.installed_version()
    assert info["hyper_parallel"] and info["hyper_parallel_source"]
    commit = info["hyper_parallel_commit"]
    assert commit is None or re.fullmatch(r"[0-9a-f]{40}", commit)
    assert hp.describe_version(info).startswith("hyper-parallel ")


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["mesh=dp2"], dict(shard_size=2, optimizer_level="level3", grad_scale=0.5)),
        (["mesh=dp4", "reshard_after_forward=false"], dict(shard_size=4, optimizer_level="level2", grad_scale=0.25)),
        (["mesh=hsdp2x2"], dict(shard_size=2, optimizer_level="level3", grad_scale=0.25)),
        (["mp_policy=cast_forward_inputs"], dict(shard_size=2, reduce_dtype=None)),
    ],
)
def test_hsdp_arguments(compose_cfg, overrides, expected):
    cfg = compose_cfg(["framework=mindspore", "engine=hyper_parallel", *overrides])
    args = hp.hsdp_arguments(cfg, world_size(cfg))
    assert args["threshold"] == 0 and args["enable_grad_accumulation"] is False and args["use_eager_hook"] is True
    assert {k: args[k] for k in expected} == expected


def test_torch_defaults_are_accepted(compose_cfg):
    from sweep.engines import engine_class

    for overrides, skip in ((["optimizer=adam"], True), (["optimizer=sgd", "engine.options.skip_dtensor_dispatch=false"],
                                                        False)):
        cfg = compose_cfg(["engine=hyper_parallel", *overrides])
        validate(cfg)  # raises ConfigError if rejected
        assert engine_class(cfg, "torch").options_of(cfg).skip_dtensor_dispatch is skip


def test_torch_adam_without_skip_dispatch_is_rejected_naming_the_version(compose_cfg):
    if not hp._hp_missing_lerp():
        pytest.skip("the installed hyper-parallel has a layout infer for lerp_")
    cfg = compose_cfg(["engine=hyper_parallel", "engine.options.skip_dtensor_dispatch=false"])
    with pytest.raises(ConfigError, match=r"optimizer=adam: hyper-parallel \S+ \(.*\) has no parallel layout-infer "
                                          r"function for lerp_.*skip_dtensor_dispatch=true"):
        validate(cfg)


@pytest.mark.parametrize("policy, field", [("bf16", "param_dtype"), ("fp16", "param_dtype")])
def test_mindspore_hsdp_rejects_what_it_cannot_express(compose_cfg, policy, field):
    if hp.mindspore_api() != "hsdp":
        pytest.skip("the installed hyper-parallel has MindSpore fully_shard")
    cfg = compose_cfg(["framework=mindspore", "engine=hyper_parallel", f"mp_policy={policy}"])
    with pytest.raises(ConfigError, match=rf"mp_policy.{field}=\w+: hyper-parallel .* only through hsdp\(\)"):
        validate(cfg)


def test_the_job_line_names_the_entry_point_that_ran_where_it_is_not_the_configured_one():
    from sweep.records import JobRecord
    from sweep.report.job_line import summary_line

    comparison = {"passed": True, "max_abs_diff": 0.0, "mean_signed_diff": 0.0, "first_fail_step": None}
    record = JobRecord(status="ok", overrides=["engine=hyper_parallel"], comparison=comparison,
                       losses={"standalone": [1.0], "distributed": [1.0]}, timings_s={"wall": 1.0},
                       engine={"api": {"name": "hsdp"}, "api_configured": "fully_shard",
                               "collectives_emulated": ["all_gather_into_tensor", "reduce_scatter_tensor"]})
    line = summary_line(record)
    assert "[ran hsdp, not fully_shard; emulated all_gather_into_tensor, reduce_scatter_tensor]" in line
    record.engine = {"api": {"name": "fully_shard"}, "api_configured": "fully_shard"}
    assert "[" not in summary_line(record).split("]", 1)[1]  # nothing added when it ran as configured
