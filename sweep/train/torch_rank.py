"""One PyTorch rank: standalone then distributed training of the seed's MLP.

Started by torchrun (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` in the environment).
Order of RNG use, as in the report: seed, build the standalone model, build the
distributed model, copy the distributed model's initial weights into the standalone
one (``weights.transfer``), then parallelise the distributed one and train the copies
in ``order``. The standalone copy always clears its gradients; the distributed
copy does so only with ``zero_grad=true``.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from sweep.engines import load_engine
from sweep.layout import JobDir
from sweep.records import RankResult
from sweep.train import phase_order, rank_samples, redirect_output, train_phases, write_rank_result


def build_mlp(model_cfg: Any) -> Any:
    """Dense(in, hidden) -> ReLU -> Dense(hidden, out); weights ~ N(0, init_std^2), biases 0.

    Parameter names (``layer0.weight``, ...) match the MindSpore model's.
    """
    import torch
    from torch import nn

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer0 = nn.Linear(model_cfg.in_size, model_cfg.hidden_size)
            self.layer1 = nn.Linear(model_cfg.hidden_size, model_cfg.out_size)
            for layer in (self.layer0, self.layer1):
                nn.init.normal_(layer.weight, mean=0.0, std=model_cfg.init_std)
                nn.init.zeros_(layer.bias)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer1(torch.relu(self.layer0(x)))

    return MLP()


def build_optimizer(opt_cfg: Any, params: Any) -> Any:
    """``torch.optim.Adam``/``AdamW``/``SGD`` with the config's hyperparameters.

    Raises:
        ValueError: unknown optimizer name.
    """
    import torch

    name = opt_cfg.name
    if name in ("adam", "adamw"):
        cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
        return cls(params, lr=opt_cfg.lr, betas=tuple(opt_cfg.betas), eps=opt_cfg.eps, weight_decay=opt_cfg.weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=opt_cfg.lr, momentum=opt_cfg.momentum, weight_decay=opt_cfg.weight_decay)
    raise ValueError(f"optimizer.name={name!r}; allowed: adam, adamw, sgd")


def copy_weights(dst: Any, src: Any, how: str, path: Path) -> None:
    """Give ``dst`` the initial weights of ``src`` (same architecture, not yet parallelised).

    ``how``: ``shared`` assigns ``dst_param.data = src_param.data`` (shared storage,
    torch's equivalent of MindSpore's ``set_data(param)``); ``independent`` copies the
    values (``load_state_dict``); ``checkpoint`` saves ``src.state_dict()`` to ``path``
    with ``torch.save`` and loads it back into ``dst``.

    Raises:
        ValueError: unknown ``how``.
    """
    import torch

    if how == "shared":
        src_params = dict(src.named_parameters())
        for name, param in dst.named_parameters():
            param.data = src_params[name].data
    elif how == "independent":
        dst.load_state_dict(src.state_dict())
    elif how == "checkpoint":
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(src.state_dict(), path)
        dst.load_state_dict(torch.load(path, weights_only=True))
    else:
        raise ValueError(f"weights.transfer={how!r}; allowed: shared, independent, checkpoint")


def local_params(model: Any) -> List[np.ndarray]:
    """This rank's parameter values as numpy copies (a DTensor gives its local shard)."""
    out = []
    for param in model.parameters():
        data = param.detach()
        data = data.to_local() if hasattr(data, "to_local") else data
        out.append(data.float().cpu().numpy().copy())
    return out


class _ObserveReduce:
    """While entered, record the dtype of the first tensor torch.distributed reduces
    (``reduce_scatter_single``/``reduce_scatter_tensor``: FSDP2's gradient reduction,
    torch 2.13's ``_fsdp_collectives`` calls the former; ``all_reduce``: HSDP's
    replicate dim, hyper-parallel) into ``observed["reduce"]``. It only looks: the call
    goes through unchanged. DDP reduces in C++ (its buckets), out of sight: unknown."""

    # name -> (position, keyword) of the tensor being reduced
    WATCHED = {"reduce_scatter_tensor": (1, "input"), "reduce_scatter_single": (1, "input"),
               "all_reduce": (0, "tensor")}

    def __init__(self, observed: Dict[str, str]) -> None:
        self.observed = observed
        self.saved: Dict[str, Any] = {}

    def _watch(self, original: Any, position: int, keyword: str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tensor = kwargs.get(keyword, args[position] if len(args) > position else None)
            if tensor is not None and hasattr(tensor, "dtype"):
                self.observed.setdefault("reduce", _dtype(tensor))
            return original(*args, **kwargs)

        return wrapper

    def __enter__(self) -> "_ObserveReduce":
        import torch.distributed as dist

        for name, (position, keyword) in self.WATCHED.items():
            if not hasattr(dist, name):
                continue
            self.saved[name] = getattr(dist, name)
            setattr(dist, name, self._watch(self.saved[name], position, keyword))
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch.distributed as dist

        for name, original in self.saved.items():
            setattr(dist, name, original)


def record_tensors(model: Any, kind: str) -> Dict[str, np.ndarray]:
    """Every parameter's gradient (``kind="grad"``) or value (``"weight"``) as a full numpy
    array: a sharded ``DTensor`` is gathered (``full_tensor()``, a collective every rank
    makes at the same point), DDP's ``module.`` prefix is dropped from the names."""
    out = {}
    for name, param in model.named_parameters():
        tensor = param.grad if kind == "grad" else param.detach()
        if tensor is None:
            continue
        if hasattr(tensor, "full_tensor"):
            tensor = tensor.full_tensor()
        out[name[len("module."):] if name.startswith("module.") else name] = \
            tensor.detach().float().cpu().numpy().copy()
    return out


def train(
    model: Any,
    samples: List[Any],
    step: Callable[[], None],
    zero_grad: Optional[Callable[[], None]],
    observed: Optional[Dict[str, str]] = None,
    optimizer: Any = None,
    trace: Optional[List[Dict[str, Dict[str, np.ndarray]]]] = None,
    trace_until: int = -1,
) -> List[float]:
    """Train one pass over ``samples``: forward, MSE loss, ``backward()``, ``step()``,
    then ``zero_grad()`` unless it is ``None``. Returns the loss of every step (float).

    If ``observed`` is a dict, step 0 fills it with the dtypes that actually ran:
    ``param_forward`` (``layer0.weight`` seen by its forward), ``output`` (the model
    output), ``reduce`` (the gradients torch.distributed reduced, :class:`_ObserveReduce`),
    ``grad`` (the gradient the optimizer reads), ``master`` (this rank's stored parameter:
    the master weights) and, given the ``optimizer``, ``optimizer_state`` (its first state
    tensor after the step, e.g. Adam's ``exp_avg``; none for plain SGD).

    If ``trace`` is a list, each step up to ``trace_until`` appends ``{"grad": ...,
    "weight": ...}`` (:func:`record_tensors`): the gradients after the backward (and its
    reduction), the weights after the step (``sweep.trace``).
    """
    import contextlib

    import torch.nn.functional as F

    handle = None
    if observed is not None:
        layer0 = _find_layer0(model)

        def record_param_dtype(module: Any, args: Any) -> None:  # a pre-hook's return value replaces the input
            observed.setdefault("param_forward", _dtype(module.weight))

        handle = layer0.register_forward_pre_hook(record_param_dtype)
    losses = []
    for i, (x, y) in enumerate(samples):
        traced = trace is not None and i <= trace_until
        watch = _ObserveReduce(observed) if handle is not None else contextlib.nullcontext()
        with watch:
            out = model(x)
            loss = F.mse_loss(out, y)
            loss.backward()
        if handle is not None:
            handle.remove()
            observed["output"] = _dtype(out)
            observed["grad"] = _dtype(next(model.parameters()).grad)
        if traced:
            trace.append({"grad": record_tensors(model, "grad")})
        step()
        if traced:
            trace[-1]["weight"] = record_tensors(model, "weight")
        if handle is not None:
            handle = None
            observed["master"] = _dtype(next(model.parameters()).detach())
            state = [v for s in (optimizer.state.values() if optimizer is not None else []) for v in s.values()
                     if hasattr(v, "dtype") and getattr(v, "dim", lambda: 0)() > 0]
            observed["optimizer_state"] = _dtype(state[0]) if state else None
        if zero_grad is not None:
            zero_grad()
        losses.append(float(loss.item()))
    return losses


def _find_layer0(model: Any) -> Any:
    return model.module.layer0 if hasattr(model, "module") else model.layer0


def _dtype(tensor: Any) -> Optional[str]:
    if tensor is None:
        return None
    tensor = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return str(tensor.dtype).replace("torch.", "")


@dataclass
class RankContext:
    """This process's place in the job: ``rank`` of ``world``, its ``torch.device``, and
    whether a process group was initialised (not in the standalone-only process)."""

    rank: int
    world: int
    device: Any
    distributed: bool


def init_rank(cfg: Any, distributed: bool = True) -> RankContext:
    """Select the device and, if ``distributed``, ``init_process_group`` with the
    backend ``framework.device_map`` gives ``cfg.device`` (gloo on CPU). Reads
    torchrun's ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``."""
    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", 0)) if distributed else 0
    world = int(os.environ.get("WORLD_SIZE", 1)) if distributed else 1
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    device_name = cfg.device
    if device_name == "npu":
        import torch_npu  # noqa: F401  (registers the npu device and hccl)
    if device_name == "cpu":
        device = torch.device("cpu")
    else:
        device = torch.device(device_name, local_rank)
        getattr(torch, device_name).set_device(device)
    if distributed:
        dist.init_process_group(backend=cfg.framework.device_map[device_name])
    return RankContext(rank=rank, world=world, device=device, distributed=distributed)


def close_rank(ctx: RankContext, exit_process: bool = True) -> None:
    """Destroy the process group and leave with ``os._exit(0)``: gloo ranks can SIGABRT at
    interpreter shutdown otherwise ("terminate called without an active exception").
    ``exit_process=False``
    returns instead (a forked rank, see ``sweep.train.fork_launch``)."""
    import torch.distributed as dist

    if ctx.distributed:
        dist.destroy_process_group()
    if not exit_process:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_job(cfg: Any, job_dir: Path | str, ctx: RankContext, phase: str = "both") -> None:
    """Train this process's copies for one job and write its result file (see
    ``sweep.train``). Everything a job's numbers depend on is (re)set here, so a job
    gives the same losses in a fresh process and in a reused one."""
    import torch

    t0 = time.perf_counter()
    job_dir = Path(job_dir)
    rank, world, device = ctx.rank, ctx.world, ctx.device
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    if cfg.deterministic or torch.are_deterministic_algorithms_enabled():
        torch.use_deterministic_algorithms(bool(cfg.deterministic))
    standalone = build_mlp(cfg.model).to(device)
    distributed = build_mlp(cfg.model).to(device)
    ckpt = JobDir(job_dir).checkpoint(f"rank_{rank}" if ctx.distributed else "standalone", ".pt")
    copy_weights(standalone, distributed, cfg.weights.transfer, ckpt)
    names = phase_order(cfg.order, phase, job_dir)
    engine = load_engine(cfg, "torch", device=device, world_size=world)
    if "distributed" in names:
        distributed = engine.parallelize(distributed)
    opt_standalone = build_optimizer(cfg.optimizer, standalone.parameters())
    opt_distributed = build_optimizer(cfg.optimizer, distributed.parameters())
    global_np, local_np = rank_samples(cfg, rank)

    def to_device(pairs: List[Any]) -> List[Any]:
        return [(torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)) for x, y in pairs]

    observed: Dict[str, str] = {}
    until = cfg.compare.get("trace_until")
    traces: Dict[str, list] = {"standalone": [], "distributed": []} if until is not None else {}
    losses, moved, seconds = train_phases(
        names,
        train={
            "standalone": lambda: train(standalone, to_device(global_np), opt_standalone.step,
                                        opt_standalone.zero_grad, trace=traces.get("standalone"),
                                        trace_until=until if until is not None else -1),
            "distributed": lambda: train(distributed, to_device(local_np),
                                         lambda: engine.optimizer_step(opt_distributed),
                                         opt_distributed.zero_grad if cfg.zero_grad else None, observed,
                                         optimizer=opt_distributed, trace=traces.get("distributed"),
                                         trace_until=until if until is not None else -1),
        },
        snapshot={"standalone": lambda: local_params(standalone), "distributed": lambda: local_params(distributed)},
    )
    info = dict(engine.info()) if "distributed" in names else {}
    result = RankResult(
        rank=rank, world_size=world, framework="torch", versions={"torch": torch.__version__, **info.pop("versions", {})},
        standalone=losses.get("standalone"), distributed=losses.get("distributed"), moved=moved,
        dtypes_observed=observed, zero_grad_effective=bool(cfg.zero_grad),
        engine_notes=list(info.get("notes") or engine.notes), engine=info,
    )
    if traces.get("standalone") and traces.get("distributed"):
        from sweep.trace import first_difference

        found = first_difference(traces["standalone"], traces["distributed"], float(cfg.compare.noise_floor))
        result.first_tensor = found or {"description": f"no tensor differs in steps 0-{until}"}
    write_rank_result(job_dir, phase, result, time.perf_counter() - t0 - sum(seconds.values()), seconds)


def run_rank(cfg: Any, job_dir: str, phase: str = "both") -> None:
    """One job in a fresh process: ``init_rank``, ``run_job``, ``close_rank``.

    ``phase="standalone"``: the standalone-only process of ``order=separate`` (no
    process group; rank 0 of 1).
    """
    distributed = phase != "standalone"
    if distributed:
        redirect_output(Path(job_dir), int(os.environ.get("RANK", 0)))
    ctx = init_rank(cfg, distributed)
    try:
        run_job(cfg, job_dir, ctx, phase)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    close_rank(ctx)
