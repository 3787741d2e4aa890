"""Which fields a standalone baseline depends on, and the cache round trip."""

import pytest

from sweep.config.schema import to_container
from sweep.run.baseline import key, key_fields, lookup, store


@pytest.fixture
def config(compose_cfg):
    return lambda *overrides: to_container(compose_cfg(list(overrides)))


def test_baseline_ignores_what_only_the_distributed_copy_sees(config):
    base = key(key_fields(config(), 2))
    for overrides in (["mesh=hsdp2x2"], ["engine=data_parallel"], ["mp_policy=bf16"],
                      ["reshard_after_forward=false"], ["zero_grad=false"], ["compare.rtol=0"]):
        world = 4 if overrides == ["mesh=hsdp2x2"] else 2
        assert key(key_fields(config(*overrides), world)) == base, overrides


def test_baseline_depends_on_what_the_standalone_copy_sees(config):
    base = key(key_fields(config(), 2))
    for overrides in (["optimizer=sgd"], ["steps=10"], ["seed=1"], ["deterministic=false"],
                      ["framework=mindspore"], ["model.hidden_size=8"], ["data.split=sharded"],
                      ["order=separate"], ["order=distributed_first"]):
        # order: where the standalone copy trains (a model that branches on the distributed
        # state gave order=separate the cached standalone_first baseline, and passed)
        assert key(key_fields(config(*overrides), 2)) != base, overrides
    sharded = config("data.split=sharded")
    assert key(key_fields(sharded, 2)) != key(key_fields(sharded, 4))  # the global batch grows with world_size


def test_shared_storage_baselines_are_never_reused(config):
    assert key_fields(config("weights.transfer=shared"), 2) is None


def test_store_then_lookup(tmp_path, config):
    fields = key_fields(config(), 2)
    assert lookup(tmp_path, fields) is None
    store(tmp_path, fields, [1.0, 0.5], tmp_path / "0")
    entry = lookup(tmp_path, fields)
    assert entry["standalone"] == [1.0, 0.5] and entry["job_dir"] == str(tmp_path / "0")
    assert lookup(tmp_path, key_fields(config("optimizer=sgd"), 2)) is None
