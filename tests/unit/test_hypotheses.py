"""The report's other hypotheses as factors (issue 26), the parts that need no ranks: the
lr schedules, the command-line shorthand, frozen and tied parameters, the selective
checkpoint policy, and the checks that refuse before launch what an engine or a framework
does not run."""

import math

import pytest

from sweep.config.schema import ConfigError, baseline_fields, check_fields, to_container
from sweep.config.shorthands import expand
from sweep.run.checks import check
from sweep.train.schedules import lr_factor


def test_lr_schedules_warm_up_linearly_and_decay_by_a_cosine():
    assert [lr_factor(t, "none", 0, 10) for t in range(3)] == [1.0, 1.0, 1.0]
    assert [lr_factor(t, "linear_warmup", 4, 10) for t in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    cosine = [lr_factor(t, "cosine", 2, 10) for t in range(10)]
    assert cosine[:3] == [0.5, 1.0, 1.0]
    assert cosine[6] == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))
    assert all(a >= b for a, b in zip(cosine[2:], cosine[3:]))  # decays after the warmup
    with pytest.raises(ValueError, match="allowed: none, linear_warmup, cosine"):
        lr_factor(0, "step", 0, 10)


def test_compile_true_on_the_command_line_is_compile_enabled():
    assert expand(["-m", "compile=false,true", "compile.backend=aot_eager", "+compile=true", "steps=3"]) == [
        "-m", "compile.enabled=false,true", "compile.backend=aot_eager", "+compile.enabled=true", "steps=3"]


def test_frozen_and_tied_parameters_are_applied_by_name():
    torch = pytest.importorskip("torch")
    from sweep.train.params import freeze, tie

    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    assert freeze(model, ["0.*"]) == ["0.weight", "0.bias"]
    assert [p.requires_grad for p in model.parameters()] == [False, False, True, True]
    with pytest.raises(ValueError, match="matches no parameter"):
        freeze(model, ["layer9.*"])
    assert tie(model, [["0.weight", "1.weight"]]) == [["0.weight", "1.weight"]]
    assert model[1].weight is model[0].weight and len(list(model.parameters())) == 3
    with pytest.raises(ValueError, match="differ in shape"):
        tie(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 3)), [["0.weight", "1.weight"]])
    # a model that ties in its own code (an embedding and its head) is recorded as tied too (it read [])
    from sweep.train.params import tied_names

    embed, head = torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5, bias=False)
    head.weight = embed.weight
    lm = torch.nn.ModuleDict({"wte": embed, "head": head})
    assert tied_names(lm) == [["wte.weight", "head.weight"]]
    assert tied_names(model, [["0.weight", "1.weight"]]) == [["0.weight", "1.weight"]]  # once, as configured


def test_activation_checkpointing_wraps_the_layers_and_changes_no_number():
    torch = pytest.importorskip("torch")
    from omegaconf import OmegaConf

    from sweep.train.activations import apply_checkpointing

    def build():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))

    x = torch.randn(5, 4)
    plain = build()
    plain(x).square().sum().backward()
    for mode in ("full", "selective"):
        model = build()
        cfg = OmegaConf.create({"mode": mode, "preserve_rng_state": True, "save_ops": ["aten.addmm.default"],
                                "recompute_ops": ["aten.tanh.default"]})
        record = apply_checkpointing(model, cfg)
        assert record["wrapped"] == ["0", "2"]  # the children with parameters
        assert type(model[0]).__name__ == "CheckpointWrapper"
        model(x).square().sum().backward()
        grads = [p.grad for p in model.parameters()]
        assert all(torch.equal(a, p.grad) for a, p in zip(grads, plain.parameters())), mode


def test_features_an_engine_does_not_run_are_refused_before_launch_in_one_line(compose_cfg):
    cases = {
        ("engine=data_parallel", "reshard_after_forward=2", "mesh=dp4"): "reshard_after_forward=2: engine=data_parallel",
        ("engine=data_parallel", "offload_policy=cpu"): "offload_policy=cpu: engine=data_parallel",
        ("engine=data_parallel", "model.init=meta"): "model.init=meta: engine=data_parallel",
        ("reshard_after_forward=2",): "reshard_after_forward=2: an int must divide the shard dim (dp=2)",
        ("reshard_after_forward=3", "mesh=dp4"): "an int must divide the shard dim",
        ("mesh.mesh_shape=[2,2,1]", "mesh.mesh_dim_names=[a,b,c]"): "fully_shard takes a 1-D mesh (FSDP) or a 2-D",
        ("model.init=meta", "weights.transfer=shared"): "no storage to share",
        ("model.init=meta", "order=separate"): "no distributed copy to take its initial weights from",
        ("framework=mindspore", "engine=data_parallel", "activation_checkpoint.mode=selective"):
            "activation_checkpoint.mode=selective: sweep's MindSpore step does not run it",
        ("framework=mindspore", "engine=data_parallel", "compile.enabled=true"): "compile.enabled=true",
    }
    for overrides, message in cases.items():
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
            check(compose_cfg(list(overrides)))
        assert "\n" not in str(info.value), overrides
    for overrides in (["reshard_after_forward=2", "mesh=dp4"], ["offload_policy=cpu"], ["model.init=meta"],
                      ["activation_checkpoint.mode=selective", "model=transformer"], ["compile.enabled=true"]):
        check(compose_cfg(overrides))  # FSDP2 runs them


def test_a_meta_init_makes_the_baseline_depend_on_the_sharding(compose_cfg):
    eager = baseline_fields(to_container(compose_cfg([])))
    meta = baseline_fields(to_container(compose_cfg(["model.init=meta"])))
    assert "mesh.mesh_shape" not in eager and "mesh.mesh_shape" in meta and "wrap" in meta
    assert check_fields(compose_cfg(["activation_checkpoint.mode=full"])) == 2


def test_the_checkpoint_preset_is_the_report_with_recompute_on(compose_cfg):
    cfg = compose_cfg(["experiment=seed_checkpoint", "engine=data_parallel", "device=cpu"])
    issue = compose_cfg(["experiment=seed_issue", "engine=data_parallel", "device=cpu"])
    assert cfg.activation_checkpoint.mode.value == "full" and issue.activation_checkpoint.mode.value == "none"
    assert {k: v for k, v in to_container(cfg).items() if k != "activation_checkpoint"} == \
        {k: v for k, v in to_container(issue).items() if k != "activation_checkpoint"}
