"""The training step and its observers (sweep.train.observers): a planted observer is called
at every named point of both frameworks' steps without editing the step, and observers only
look (the same losses bit for bit with every observer as with none)."""

import numpy as np
import pytest

from sweep.train.observers import POINTS, SPANS, Copy, Observer


class Planted(Observer):
    """Records every point and span it is called at: ``(point, step index, micro)``."""

    def __init__(self):
        self.calls = []

    def begin_step(self, step):
        self.calls.append(("begin_step", step.index, None))

    def span(self, step, name):
        self.calls.append((f"span:{name}", step.index, step.micro if name in ("micro", "forward") else None))
        return None

    def after_forward(self, step, output):
        assert output is not None
        self.calls.append(("after_forward", step.index, step.micro))

    def after_backward(self, step):
        self.calls.append(("after_backward", step.index, None))

    def before_optimizer(self, step):
        self.calls.append(("before_optimizer", step.index, None))

    def after_update(self, step):
        self.calls.append(("after_update", step.index, None))

    def after_step(self, step):
        self.calls.append(("after_step", step.index, None))

    def end(self, steps):
        self.calls.append(("end", steps, None))


def expected_calls(steps, accum):
    """The points of the protocol's docstring, in order, for ``steps`` steps of ``accum``
    micro-batches."""
    calls = []
    for i in range(steps):
        calls += [("begin_step", i, None), ("span:grads", i, None)]
        for j in range(accum):
            calls += [("span:micro", i, j), ("span:forward", i, j), ("after_forward", i, j)]
        calls += [("after_backward", i, None), ("span:clip", i, None), ("before_optimizer", i, None),
                  ("span:update", i, None), ("after_update", i, None),
                  ("after_step", i, None)]
    return calls + [("end", steps, None)]


def _torch_copy(cfg):
    import torch

    from sweep import models
    from sweep.engines.base import StandaloneTorch
    from sweep.train.torch_rank import build_optimizer
    from sweep.train.schedules import torch_scheduler

    torch.manual_seed(int(cfg.seed))
    model = models.build(cfg, "torch")
    optimizer = build_optimizer(cfg.optimizer, model.parameters())
    return Copy(model=model, engine=StandaloneTorch(cfg, device=torch.device("cpu"), world_size=1),
                optimizer=optimizer, scheduler=torch_scheduler(optimizer, cfg), input_dtype=torch.float32)


def _torch_samples(cfg):
    import torch

    from sweep.train import rank_samples

    return [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in rank_samples(cfg, 0)[0]]


def test_a_planted_observer_is_called_at_every_point_of_the_torch_step(compose_cfg):
    pytest.importorskip("torch")
    from sweep.train.torch_step import train

    cfg = compose_cfg(["steps=3", "train.grad_accum_steps=2", "train.batch_size=2"])
    planted = Planted()
    losses = train(_torch_copy(cfg), _torch_samples(cfg), cfg.train, [planted])
    assert len(losses) == 3
    assert planted.calls == expected_calls(3, 2)
    assert {c[0] for c in planted.calls} == set(POINTS) | {f"span:{s}" for s in SPANS}


def test_every_torch_observer_only_looks(compose_cfg):
    torch = pytest.importorskip("torch")
    from sweep.train.observers.dtypes import TorchDtypes
    from sweep.train.observers.forward_writes import ForwardWrites
    from sweep.train.observers.ledger import CollectiveLedger
    from sweep.train.observers.lr_log import LearningRates
    from sweep.train.observers.module_trace import ModuleTrace
    from sweep.train.observers.offload import ActivationOffload
    from sweep.train.observers.optimizer_log import OptimizerLog
    from sweep.train.observers.random_draws import RandomDraws
    from sweep.train.observers.reductions import TorchGradients
    from sweep.train.observers.replicas import ReplicaDigests
    from sweep.train.observers.tensor_trace import TorchTensorTrace
    from sweep.train.torch_step import train

    cfg = compose_cfg(["steps=4", "model=mlp_norm", "train.grad_accum_steps=2", "train.batch_size=4",
                       "train.clip_grad_norm=0.5", "train.lr_scheduler=cosine", "train.warmup_steps=2"])
    plain = train(_torch_copy(cfg), _torch_samples(cfg), cfg.train)
    copy = _torch_copy(cfg)
    ledger = CollectiveLedger(copy.engine, until=1)
    trace = TorchTensorTrace(until=1, weights_until=2)
    found = {"draws": RandomDraws(torch.device("cpu")), "ledger": ledger, "dtypes": TorchDtypes(ledger),
             "trace": trace, "modules": ModuleTrace(copy.model, 1, trace), "digests": ReplicaDigests(),
             "optimizer": OptimizerLog(), "lrs": LearningRates(), "offload": ActivationOffload(),
             "grads": TorchGradients(False, max_norm=0.5, ledger=ledger), "writes": ForwardWrites()}
    watched = train(copy, _torch_samples(cfg), cfg.train, found.values())
    found["modules"].remove()
    assert watched == plain  # bit for bit
    observed = found["dtypes"].observed
    assert {k: observed[k] for k in ("param_forward", "output", "grad", "reduce", "master", "optimizer_state",
                                     "master_lower")} == {
        "param_forward": "float32", "output": "float32", "grad": "float32", "reduce": None, "master": "float32",
        "optimizer_state": "float32", "master_lower": None}
    # per module, in execution order, and per parameter (issue 51)
    assert [m["module"] for m in observed["modules"]] == ["layer0", "norm0", "layer1", "norm1", "(model)"]
    assert all(m["output"] == m["grad_output"] == "float32" for m in observed["modules"])
    assert set(observed["grads"].values()) == {"float32"} and len(observed["grads"]) == 8
    norms = found["grads"].norms
    assert len(norms["reduced"]) == 4 and norms["pre"] == norms["reduced"]  # one copy reduces nothing
    assert all(sum(x * x for x in row) ** 0.5 <= 0.5 + 1e-6 for row in norms["read"])  # as clipped
    assert any(sum(x * x for x in row) ** 0.5 > 0.5 for row in norms["reduced"])
    assert found["grads"].held is None  # the copy clears its gradients every step
    assert found["draws"].drew is False
    assert found["writes"].changed == []  # (norm0's running statistics are buffers, not parameters)
    assert [sorted(e) for e in trace.entries] == [
        ["buffer", "grad", "initial", "initial_buffer", "order", "weight"], ["buffer", "grad", "order", "weight"],
        ["buffer", "weight"]]
    assert len(found["modules"].steps) == 2 and found["modules"].steps[0]["forward"]
    digests = found["digests"].digests  # one {tensor: digest} a step, parameters and buffers
    assert len(digests) == 4 and len({d["layer0.weight"] for d in digests}) == 4
    assert "buffer:norm1.running_mean" in digests[0] and "buffer:norm1.num_batches_tracked" not in digests[0]
    assert found["optimizer"].groups[0]["group"] == 0 and "betas" in found["optimizer"].groups[0]
    assert len(found["lrs"].lrs) == 4 and found["lrs"].lrs[0] < found["lrs"].lrs[1]  # the warmup
    assert ledger.entries == []  # one process issues no collectives


def test_a_planted_observer_is_called_at_every_point_of_the_mindspore_step(compose_cfg):
    pytest.importorskip("mindspore")
    import mindspore as ms

    from sweep import models
    from sweep.engines.base import StandaloneMindSpore
    from sweep.train import rank_samples
    from sweep.train.mindspore_rank import build_optimizer
    from sweep.train.mindspore_step import train
    from sweep.train.observers.dtypes import MindSporeDtypes
    from sweep.train.observers.tensor_trace import MindSporeTensorTrace

    cfg = compose_cfg(["framework=mindspore", "engine=data_parallel", "steps=3", "train.grad_accum_steps=2",
                       "train.batch_size=2"])
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    samples = rank_samples(cfg, 0)[0]

    def run(observers):
        ms.set_seed(int(cfg.seed))
        net = models.build(cfg, "mindspore")
        copy = Copy(model=net, engine=StandaloneMindSpore(cfg, device="cpu", world_size=1),
                    optimizer=build_optimizer(cfg.optimizer, net.trainable_params()), clear_grads=False)
        return train(copy, samples, cfg.train, observers)

    planted, dtypes, trace = Planted(), MindSporeDtypes(), MindSporeTensorTrace(until=1, weights_until=2)
    plain = run([])
    watched = run([planted, dtypes, trace])
    assert watched == plain  # bit for bit
    assert planted.calls == expected_calls(3, 2)
    assert dtypes.observed["param_forward"] == "float32" and dtypes.observed["grad"] == "float32"
    assert [sorted(e) for e in trace.entries] == [["buffer", "grad", "initial", "initial_buffer", "weight"],
                                                  ["buffer", "grad", "weight"], ["buffer", "weight"]]
    assert all(np.isfinite(v).all() for v in trace.entries[0]["grad"].values())


def test_the_steps_read_in_a_screen():
    """Issue 35's shape: each framework's ``train`` takes at most 8 parameters and no
    function in ``sweep/train/`` is over 80 lines (a new observation is an observer, not a
    parameter and an ``if`` in the loop)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "sweep" / "train"
    long = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.end_lineno - node.lineno + 1 > 80:
                    long.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
                if node.name == "train" and path.name in ("torch_step.py", "mindspore_step.py"):
                    args = node.args
                    assert len(args.posonlyargs + args.args + args.kwonlyargs) <= 8, path
    assert long == []


def test_the_lr_recorded_is_the_one_the_optimizer_step_read():
    """An engine that moves the lr inside its optimizer_step, after ``optimizer.step()``
    (a scheduler stepped twice from step 2), changes what step 3 reads, not step 2: the
    record says so (it read the lr after the update before, and named step 2)."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from sweep.train.observers.lr_log import LearningRates

    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    log = LearningRates()
    step = SimpleNamespace(copy=SimpleNamespace(optimizer=optimizer))
    for k in range(5):
        weight.grad = torch.ones(2)
        log.before_optimizer(step)
        optimizer.step()
        if k >= 2:  # the fault: the engine moves the lr after the update
            optimizer.param_groups[0]["lr"] *= 0.5
        log.after_update(step)
    assert log.lrs == [1.0, 1.0, 1.0, 0.5, 0.25]
    log_skip = LearningRates()  # a step whose optimizer.step() never ran: the lr before it
    other = torch.optim.SGD([weight], lr=0.1)
    log_skip.before_optimizer(SimpleNamespace(copy=SimpleNamespace(optimizer=other)))
    log_skip.after_update(step)
    assert log_skip.lrs == [0.1]


def test_the_optimizer_as_step_0_ran_is_read_inside_its_step_not_after_the_engine_moved_it():
    """A new user's engine steps the scheduler again after ``optimizer.step()``: the groups
    step 0 ran with are read inside that step (it said "lr ran 0.004, configured 0.002" from the
    lr after the update); a group changed before ``step()`` (a parameter taken out) shows."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from sweep.train.observers.optimizer_log import OptimizerLog

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.002)
    log = OptimizerLog()
    step = SimpleNamespace(index=0, scaler=None, copy=SimpleNamespace(optimizer=optimizer, model=model))
    model(torch.ones(1, 2)).sum().backward()
    log.before_optimizer(step)
    optimizer.param_groups[0]["params"] = optimizer.param_groups[0]["params"][:1]  # the bias left out
    optimizer.step()
    optimizer.param_groups[0]["lr"] = 0.004  # moved after the update
    log.after_update(step)
    assert log.groups[0]["lr"] == 0.002 and log.groups[0]["params"] == 1 and sorted(log.decay) == ["weight"]
    optimizer.step()  # the hook is gone after step 0
    assert log.groups[0]["lr"] == 0.002 and len(log.groups) == 1


def test_a_mindspore_weight_decay_set_after_build_is_recorded_as_it_runs():
    """MindSpore decides at build whether its step applies weight decay: a value set on the
    optimizer afterwards is held but never applied, so the record says 0 (a tester's
    engine that set it on the distributed copy's optimizer read as 'ran' with 0.01)."""
    pytest.importorskip("mindspore")
    import mindspore as ms
    from mindspore import Tensor, nn

    from sweep.train.observers.optimizer_log import mindspore_optimizer_ran

    net = nn.Dense(3, 2)
    late = nn.Adam(net.trainable_params(), learning_rate=1e-3)
    late.weight_decay = Tensor(0.01, ms.float32)
    assert mindspore_optimizer_ran(late, 1e-3)[0]["weight_decay"] == 0.0
    built = nn.Adam(net.trainable_params(), learning_rate=1e-3, weight_decay=0.01)
    assert mindspore_optimizer_ran(built, 1e-3)[0]["weight_decay"] == pytest.approx(0.01)


def test_a_forward_that_changes_its_parameters_in_place_is_seen():
    """``nn.Embedding(max_norm=...)`` renorms the rows it looks up, in the forward: the observer
    names that weight, read before step 0 and after its first forward (``N192``)."""
    torch = pytest.importorskip("torch")
    from sweep.train.observers.base import Step
    from sweep.train.observers.forward_writes import ForwardWrites
    from tests.helpers.own_models import renorm_embedding

    torch.manual_seed(0)
    model = renorm_embedding(framework="torch", vocab_size=8)
    copy = Copy(model=model, engine=None, optimizer=None)
    writes = ForwardWrites()
    writes.begin_step(Step(index=0, copy=copy))
    writes.after_forward(Step(index=0, copy=copy), model(torch.tensor([[1, 2, 3]])))
    assert writes.changed == ["emb.weight"]
    writes.after_forward(Step(index=1, copy=copy), None)  # read once: the first forward of step 0
    assert writes.changed == ["emb.weight"]
    # a parameter the forward leaves registered in another dtype (FSDP2's unsharded bf16 copy under a
    # policy, reshard_after_forward=false: a new user's false N192) is the engine's view, not a write
    plain = torch.nn.Linear(2, 2)
    other = Copy(model=plain, engine=None, optimizer=None)
    viewed = ForwardWrites()
    viewed.begin_step(Step(index=0, copy=other))
    plain.weight = torch.nn.Parameter(plain.weight.detach().to(torch.bfloat16))
    viewed.after_forward(Step(index=0, copy=other), None)
    assert viewed.changed == []
