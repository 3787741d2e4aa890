"""``baseline.precision``: the baseline cache key and the checks before launch.

With ``precision=policy`` the standalone copy runs the job's ``mp_policy`` and wrapping
(``sweep.engines.torch_fsdp2.StandaloneFSDP2``), so those fields key its cached sequence;
with the default ``float32`` they do not. Where it cannot be run, a one-line reason.
"""

import pytest

from sweep.config.schema import POLICY_BASELINE, BASELINE, ConfigError, baseline_fields, fields_with, to_container
from sweep.engines.base import TorchEngine
from sweep.run import checks
from sweep.run.baseline import key, key_fields


class PlainEngine(TorchEngine):
    """A torch engine that does not declare ``policy_baseline`` (plugged in by its path)."""

    def parallelize(self, model):
        return model


@pytest.fixture
def config(compose_cfg):
    return lambda *overrides: to_container(compose_cfg(list(overrides)))


def _key(config, *overrides, world=2):
    return key(key_fields(config(*overrides), world))


def test_the_precision_is_a_baseline_field_and_the_policy_joins_only_under_policy(config):
    assert "baseline.precision" in fields_with(BASELINE)
    assert set(fields_with(POLICY_BASELINE)) == {
        "mp_policy.param_dtype", "mp_policy.reduce_dtype", "mp_policy.output_dtype", "mp_policy.cast_forward_inputs",
        "mp_policy.overrides", "reshard_after_forward", "wrap", "offload_policy",
    }
    assert "mp_policy.param_dtype" not in baseline_fields(config("mp_policy=bf16"))
    assert "mp_policy.param_dtype" in baseline_fields(config("mp_policy=bf16", "baseline.precision=policy"))


def test_a_float32_baseline_is_never_reused_for_a_policy_one(config):
    for policy in ("bf16", "fp32"):  # also a policy that sets no dtype: another engine ran it
        assert _key(config, f"mp_policy={policy}") != _key(config, f"mp_policy={policy}", "baseline.precision=policy")


def test_policy_baselines_are_keyed_by_the_policy_and_the_wrapping(config):
    policy = ("baseline.precision=policy",)
    keys = {p: _key(config, f"mp_policy={p}", *policy) for p in ("bf16", "bf16_bf16", "fp16", "fp16_batchnorm_fp32")}
    assert len(set(keys.values())) == len(keys), keys  # bf16_bf16 differs from bf16 in reduce_dtype only
    bf16 = keys["bf16"]
    for other in ("wrap=per_layer", "reshard_after_forward=false", "mp_policy.output_dtype=float32",
                  "mp_policy.cast_forward_inputs=false", "+mp_policy.overrides.layer1.param_dtype=float32"):
        assert _key(config, "mp_policy=bf16", *policy, other) != bf16, other
    # what only the distributed copy sees still shares it: the mesh, the engine's name, zero_grad
    assert _key(config, "mp_policy=bf16", *policy, "mesh=hsdp2x2", world=4) == bf16
    assert _key(config, "mp_policy=bf16", *policy, "zero_grad=false") == bf16
    assert _key(config, "mp_policy=bf16", *policy, "mp_policy.name=renamed") == bf16


def test_float32_baselines_still_ignore_the_policy(config):
    assert _key(config, "mp_policy=bf16") == _key(config) == _key(config, "mp_policy=bf16_bf16", "wrap=per_layer")


def test_a_policy_baseline_passes_the_checks_on_fsdp2(compose_cfg):
    for policy in ("bf16", "bf16_bf16", "fp32", "fp16_batchnorm_fp32"):
        checks.check(compose_cfg([f"mp_policy={policy}", "baseline.precision=policy", "model=mlp_norm"]))
    checks.check(compose_cfg(["mp_policy=bf16", "baseline.precision=policy", "order=separate", "wrap=per_layer"]))


@pytest.mark.parametrize("overrides, reason", [
    (["framework=mindspore", "engine=data_parallel"],
     r"^baseline.precision=policy is not implemented for framework=mindspore \(its standalone copy trains in the "
     r"parameters' dtype only\); use baseline.precision=float32$"),
    (["engine=data_parallel"],
     r"^baseline.precision=policy: engine=data_parallel has no mixed-precision policy \(its copy computes in the "
     r"parameters' dtype, as the default baseline does\); use baseline.precision=float32$"),
    (["mp_policy=bf16", f"engine.impl.torch={__name__}.PlainEngine"],
     r"^baseline.precision=policy: engine=torch_fsdp2 \(PlainEngine\) does not declare that it applies mp_policy as "
     r"torch's fully_shard does \(Engine.policy_baseline\)"),
    (["mp_policy=bf16", "weights.transfer=shared"],
     r"^baseline.precision=policy with weights.transfer=shared: fully_shard moves the standalone copy's parameters "
     r"into storage of its own"),
])
def test_what_cannot_run_a_policy_baseline_is_refused_in_one_line(compose_cfg, overrides, reason):
    with pytest.raises(ConfigError, match=reason) as info:
        checks.check(compose_cfg(overrides + ["baseline.precision=policy"]))
    assert "\n" not in str(info.value)


def test_the_precision_takes_only_its_values(compose_cfg):
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        compose_cfg(["baseline.precision=bfloat16"])
