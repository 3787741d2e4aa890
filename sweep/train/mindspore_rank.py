"""One MindSpore rank, in PYNATIVE mode, following the report's reproducer.

Started by msrun (which also runs this file in its scheduler process up to
``init()``; nothing is written before ``init()``). Order, as in the report:
``set_context(mode=PYNATIVE_MODE)``, ``set_deterministic``, ``set_seed(seed)``,
``np.random.seed(seed)``, ``init()``, build the standalone net, build the distributed
net, copy the distributed net's initial weights into the standalone one
(``weights.transfer``; the report shares storage), parallelise, build the optimizers
(standalone first), train in ``order`` (the report: standalone first), each copy
after ``set_seed(seed)`` again (:func:`in_own_stream`: both draw alike). A step is
``value_and_grad(forward_fn, None, optimizer.parameters)`` then ``optimizer(grads)``.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from sweep import models
from sweep.config.enums import as_str
from sweep.engines import load_engine
from sweep.engines.base import StandaloneMindSpore
from sweep.layout import JobDir
from sweep.records import RankResult
from sweep.train.schedules import lr_values
from sweep.train import (
    micro_batches,
    phase_order,
    rank_samples,
    train_phases,
    write_rank_result,
)


def build_optimizer(opt_cfg: Any, params: Any, lr: Optional[List[float]] = None) -> Any:
    """``nn.Adam`` / ``nn.AdamWeightDecay`` / ``nn.SGD`` with the config's hyperparameters;
    ``lr``: a per-step list (a ``train.lr_scheduler``, ``sweep.train.schedules.lr_values``:
    MindSpore's dynamic learning rate, entry ``t`` at step ``t``) instead of ``optimizer.lr``.

    Raises:
        ValueError: unknown optimizer name.
    """
    from mindspore import nn

    name = opt_cfg.name
    rate = lr if lr is not None else opt_cfg.lr
    beta1, beta2 = (float(b) for b in opt_cfg.betas)
    if name == "adam":
        return nn.Adam(params, learning_rate=rate, beta1=beta1, beta2=beta2, eps=opt_cfg.eps,
                       weight_decay=opt_cfg.weight_decay)
    if name == "adamw":
        return nn.AdamWeightDecay(params, learning_rate=rate, beta1=beta1, beta2=beta2, eps=opt_cfg.eps,
                                  weight_decay=opt_cfg.weight_decay)
    if name == "sgd":
        return nn.SGD(params, learning_rate=rate, momentum=opt_cfg.momentum, weight_decay=opt_cfg.weight_decay)
    raise ValueError(f"optimizer.name={name!r}; allowed: adam, adamw, sgd")


def copy_weights(dst: Any, src: Any, how: str, path: Path) -> None:
    """Give ``dst`` the initial weights of ``src`` (same-named parameters).

    ``how``: ``shared`` is the report's ``dst_param.set_data(src_param)``: the two
    parameters then share storage (the same ``data_ptr``), so training one moves
    the other; ``independent`` sets a copy of the values
    (``set_data(Tensor(src_param.asnumpy().copy()))``); ``checkpoint`` saves ``src``
    with ``mindspore.save_checkpoint`` to ``path`` and loads it into ``dst`` with
    ``load_checkpoint`` + ``load_param_into_net``.

    Raises:
        ValueError: unknown ``how``.
    """
    import mindspore as ms
    from mindspore import Tensor

    src_params = src.parameters_dict()
    if how == "shared":
        for name, param in dst.parameters_dict().items():
            param.set_data(src_params[name])
    elif how == "independent":
        for name, param in dst.parameters_dict().items():
            param.set_data(Tensor(src_params[name].asnumpy().copy()))
    elif how == "checkpoint":
        path.parent.mkdir(parents=True, exist_ok=True)
        ms.save_checkpoint(src, str(path))
        ms.load_param_into_net(dst, ms.load_checkpoint(str(path)), strict_load=True)
    else:
        raise ValueError(f"weights.transfer={how!r}; allowed: shared, independent, checkpoint")


def local_params(net: Any) -> List[np.ndarray]:
    """This rank's parameter values as numpy copies (``asnumpy()`` is a live view)."""
    return [p.asnumpy().copy() for p in net.trainable_params()]


def _weights(optimizer: Any) -> Dict[str, np.ndarray]:
    """The optimizer's parameters by name, as float32 numpy arrays (a trace's weights)."""
    return {p.name: p.asnumpy().astype(np.float32) for p in optimizer.parameters}


def train(
    net: Any,
    optimizer: Any,
    samples: List[Any],
    engine: Any,
    train_cfg: Any,
    *,
    grad_api: str = "value_and_grad",
    zero_grad: bool = False,
    observed: Optional[Dict[str, str]] = None,
    trace: Optional[List[Dict[str, Dict[str, np.ndarray]]]] = None,
    trace_until: int = -1,
    weights_until: int = -1,
) -> List[float]:
    """The report's ``train_step`` over ``samples``, with the ``train`` section's step
    (as ``sweep.train.torch_step``): per micro-batch (``grad_accum_steps`` equal row
    slices) ``value_and_grad`` of ``MSE / grad_accum_steps`` w.r.t.
    ``optimizer.parameters``, the gradients summed; then ``engine.reduce_grads`` (the
    data-parallel all-reduce: once per step, so the inner micro-steps never sync),
    ``engine.clip_grad_norm`` if ``clip_grad_norm`` is set, ``engine.optimizer_step``;
    with ``zero_grad`` also ``net.zero_grad()`` where the net has one (hyper-parallel's
    ``fully_shard`` adds it; a plain Cell's functional gradients need no clearing).

    ``observed`` (a dict) receives at step 0 the dtypes that ran: ``param_forward``
    (``layer0.weight`` during forward), ``output``, ``reduce`` (the gradient reduction's,
    from ``engine.observe_reduce``), ``grad`` (first gradient), ``master``
    (the stored parameter after the step) and ``optimizer_state`` (Adam's ``moment1``,
    SGD's ``moments``; none for plain SGD).

    If ``trace`` is a list, each step up to ``max(trace_until, weights_until)`` appends
    ``{"grad": ..., "weight": ...}``: this rank's gradients after the engine's reduction
    (up to ``trace_until`` only) and its weights after the step (step 0's entry also
    ``"initial"``, the weights before it), by parameter name, as float numpy arrays (a
    sharding engine's local shards; ``sweep.analysis.trace.to_shards`` matches them to the standalone tensors).

    Raises:
        NotImplementedError: ``grad_api="backward"`` on a MindSpore without ``Tensor.backward``.
    """
    import mindspore as ms
    from mindspore import Tensor, nn

    if grad_api != "value_and_grad":
        if not hasattr(Tensor, "backward"):
            raise NotImplementedError(
                f"framework.grad_api={grad_api}: MindSpore {ms.__version__} has no Tensor.backward; "
                "use framework.grad_api=value_and_grad"
            )
        raise NotImplementedError(f"framework.grad_api={grad_api} is not wired for MindSpore yet")
    loss_fn = nn.MSELoss()
    accum = int(train_cfg.grad_accum_steps)
    clip = train_cfg.clip_grad_norm

    def forward_fn(inputs: Any, labels: Any) -> Any:
        out = net(inputs)
        if observed is not None and "output" not in observed:
            first = next(p for p in net.trainable_params() if p.name.endswith("weight"))
            observed["param_forward"] = str(first.dtype).lower()
            observed["output"] = str(out.dtype).lower()
        loss = loss_fn(out, labels)
        return loss if accum == 1 else loss / accum

    net.set_train(True)  # a Cell starts in inference mode (BatchNorm would use its running statistics)
    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters)
    clear = getattr(net, "zero_grad", None) if zero_grad else None
    param_names = [p.name for p in optimizer.parameters]
    losses = []
    for i, (x, y) in enumerate(samples):
        traced = trace is not None and i <= max(trace_until, weights_until)
        if traced:
            trace.append({"initial": _weights(optimizer)} if i == 0 else {})
        step_loss, grads = 0.0, None
        watch = engine.observe_reduce(observed) if observed is not None and i == 0 else contextlib.nullcontext()
        with watch:
            for xm, ym in micro_batches(x, y, accum):
                loss, micro = grad_fn(Tensor(xm), Tensor(ym))
                grads = micro if grads is None else tuple(g + m for g, m in zip(grads, micro))
                step_loss += float(loss.asnumpy())
            if observed is not None and "grad" not in observed:
                observed["grad"] = str(grads[0].dtype).lower()
            grads = engine.reduce_grads(optimizer, grads)
        if traced and i <= trace_until:
            trace[-1]["grad"] = {n: g.asnumpy().astype(np.float32) for n, g in zip(param_names, grads)}
        if clip is not None:
            grads = engine.clip_grad_norm(grads, float(clip))
        engine.optimizer_step(optimizer, grads)
        if traced:
            trace[-1]["weight"] = _weights(optimizer)
        if observed is not None and "master" not in observed:
            observed["master"] = str(net.trainable_params()[0].dtype).lower()
            moments = getattr(optimizer, "moment1", None) or getattr(optimizer, "moments", None)
            observed["optimizer_state"] = str(moments[0].dtype).lower() if moments else None
        if clear is not None:
            clear()
        losses.append(step_loss)
    return losses


def in_own_stream(seed: int, fn: Any) -> Any:
    """``fn()`` in one copy's random stream: ``mindspore.set_seed(seed)`` (which also
    restarts the operators' seeds, e.g. ``Dropout``'s) and ``np.random.seed(seed)``
    first, numpy's global state restored after, so both copies draw alike whichever
    trains first (as ``sweep.train.torch_rank.copy_random_stream``)."""
    import mindspore as ms

    numpy_state = np.random.get_state()
    try:
        ms.set_seed(seed)
        np.random.seed(seed)
        return fn()
    finally:
        np.random.set_state(numpy_state)


@dataclass
class RankContext:
    """This process's place in the job: ``rank`` of ``world``; ``distributed`` is false
    in the standalone-only process (no ``init()``)."""

    rank: int
    world: int
    distributed: bool


def init_rank(cfg: Any, distributed: bool = True) -> RankContext:
    """``set_context(mode=PYNATIVE_MODE, device_target=...)``, on CPU the kernels' thread
    count (:func:`cpu_threads`), ``set_deterministic`` (it may be called once per process,
    so a reused process keeps its first setting: jobs are grouped by ``deterministic``),
    then ``init()`` if ``distributed``."""
    import mindspore as ms
    from mindspore.communication import get_group_size, get_rank, init

    ms.set_context(mode=ms.PYNATIVE_MODE, device_target=cfg.framework.device_map[cfg.device])
    if as_str(cfg.device) == "cpu":
        cpu_threads(int(cfg.execution.omp_num_threads))
    if cfg.deterministic:
        ms.set_deterministic(True)
    if not distributed:
        return RankContext(rank=0, world=1, distributed=False)
    init()
    return RankContext(rank=get_rank(), world=get_group_size(), distributed=True)


def cpu_threads(n: int) -> None:
    """Run MindSpore's CPU kernels on ``n`` threads (``execution.omp_num_threads``, the
    number a torch rank gets through ``OMP_NUM_THREADS``, which MindSpore's own thread pool
    does not read): ``mindspore.device_context.cpu.op_tuning.threads_num`` where this
    MindSpore has it (2.10 does), else the older ``set_context(runtime_num_threads=n)``.
    With its default pool, 4 workers on 2 cores wait on each other's threads: 200 steps of
    experiment=seed_issue took 23 s here, 17 s with one thread each, with the same losses
    bit for bit."""
    import mindspore as ms

    try:
        from mindspore.device_context.cpu.op_tuning import threads_num
    except ImportError:
        ms.set_context(runtime_num_threads=n)
    else:
        threads_num(n)


def close_rank(ctx: RankContext, exit_process: bool = True) -> None:
    """Nothing to tear down: msrun ends the workers when the script returns."""


def run_rank(cfg: Any, job_dir: str, phase: str = "both") -> None:
    """One job in a fresh process (msrun worker, or the standalone-only process of
    ``order=separate``): ``init_rank`` then ``run_job``."""
    ctx = init_rank(cfg, phase != "standalone")
    run_job(cfg, job_dir, ctx, phase)


def ledger_record(engine: Any, rank: int, world: int) -> Dict[str, Any]:
    """``RankResult.collectives`` of a MindSpore rank: the calls the engine saw at step 0
    (``engine.ledger``; hyper-parallel's platform collectives) folded per op, dtype and
    group (``sweep.analysis.collectives.ledger_summary``), no contract to check them
    against, and why (``engine.collectives_unchecked``)."""
    from sweep.analysis.collectives import ledger_summary

    return {"expected": None, "calls": ledger_summary(engine.ledger, rank, world, None), "divide_factors": None,
            "notes": [], "unchecked": engine.collectives_unchecked}


def prepare_cells(cfg: Any, net: Any) -> Dict[str, Any]:
    """What both MindSpore copies get alike before sharding: ``model.frozen`` (matching
    parameters get ``requires_grad=False``, so ``trainable_params()`` leaves them out) and
    ``activation_checkpoint.mode=full`` (``Cell.recompute()`` on each cell of
    ``sweep.engines.wrapping.layer_names``'s rule: the ``layers`` entries, else each direct
    child with parameters). Returns ``{"frozen": [names], "tied": [], "activation_checkpoint":
    {"mode", "wrapped", "preserve_rng_state"}}`` (``sweep.train.copies.prepare``'s shape).

    Raises:
        ValueError: a ``model.frozen`` pattern that matches no parameter.
    """
    import fnmatch

    names = [p.name for p in net.get_parameters()]
    frozen: List[str] = []
    for pattern in list(cfg.model.get("frozen") or []):
        hits = [n for n in names if fnmatch.fnmatchcase(n, str(pattern))]
        if not hits:
            raise ValueError(f"model.frozen: {pattern!r} matches no parameter; the model's: {', '.join(names)}")
        frozen += [h for h in hits if h not in frozen]
    for param in net.get_parameters():
        if param.name in frozen:
            param.requires_grad = False
    mode = as_str(cfg.activation_checkpoint.mode)
    ac: Dict[str, Any] = {"mode": mode, "wrapped": [],
                          "preserve_rng_state": bool(cfg.activation_checkpoint.preserve_rng_state)}
    if mode == "full":
        cells = dict(net.name_cells())
        layers = cells.get("layers")
        targets = [(f"layers.{i}", c) for i, c in enumerate(layers.cell_list)] if hasattr(layers, "cell_list") else \
            [(n, c) for n, c in cells.items() if list(c.get_parameters())]
        for name, cell in targets:
            cell.recompute()
            ac["wrapped"].append(name)
        ac["mechanism"] = "MindSpore Cell.recompute()"
    return {"tied": [], "frozen": frozen, "activation_checkpoint": ac}


def run_job(cfg: Any, job_dir: Path | str, ctx: RankContext, phase: str = "both") -> None:
    """Train this process's copies for one job and write its result file (see
    ``sweep.train``); seeds are (re)set here, so a reused process gives the same losses."""
    t0 = time.perf_counter()
    import mindspore as ms

    ms.set_seed(cfg.seed)
    np.random.seed(cfg.seed)
    rank, world, distributed_phase = ctx.rank, ctx.world, ctx.distributed
    job_dir = Path(job_dir)
    standalone = models.build(cfg, "mindspore")
    distributed = models.build(cfg, "mindspore")
    ckpt = JobDir(job_dir).checkpoint("standalone" if not distributed_phase else f"rank_{rank}", ".ckpt")
    copy_weights(standalone, distributed, cfg.weights.transfer, ckpt)
    applied = prepare_cells(cfg, standalone)
    prepare_cells(cfg, distributed)
    names = phase_order(cfg.order, phase, job_dir)
    engine = load_engine(cfg, "mindspore", device=cfg.device, world_size=world)
    alone = StandaloneMindSpore(cfg, device=cfg.device, world_size=1)
    if "distributed" in names:
        distributed = engine.parallelize(distributed)
    global_np, local_np = rank_samples(cfg, rank)
    lr = lr_values(cfg) if as_str(cfg.train.lr_scheduler) != "none" else None  # the per-step list MindSpore takes
    opt_standalone = build_optimizer(cfg.optimizer, standalone.trainable_params(), lr)
    opt_distributed = build_optimizer(cfg.optimizer, distributed.trainable_params(), lr)
    zero_grad_effective = bool(cfg.zero_grad) and hasattr(distributed, "zero_grad")

    observed: Dict[str, str] = {}
    until = cfg.compare.get("trace_until")
    traces: Dict[str, list] = {"standalone": [], "distributed": []} if until is not None else {}
    until_step = until if until is not None else -1
    weights_step = max(until_step, int(cfg.compare.get("onset_until") or -1))  # weights only past until_step
    def own_stream(fn: Any) -> Any:
        return lambda: in_own_stream(int(cfg.seed), fn)

    losses, moved, seconds = train_phases(
        names,
        train={
            "standalone": own_stream(lambda: train(standalone, opt_standalone, global_np, alone, cfg.train,
                                                   grad_api=cfg.framework.grad_api, trace=traces.get("standalone"),
                                                   trace_until=until_step, weights_until=weights_step)),
            "distributed": own_stream(lambda: train(distributed, opt_distributed, local_np, engine, cfg.train,
                                                    grad_api=cfg.framework.grad_api, zero_grad=bool(cfg.zero_grad),
                                                    observed=observed, trace=traces.get("distributed"),
                                                    trace_until=until_step, weights_until=weights_step)),
        },
        snapshot={"standalone": lambda: local_params(standalone), "distributed": lambda: local_params(distributed)},
    )
    info = dict(engine.info()) if "distributed" in names else {}
    result = RankResult(
        rank=rank, world_size=world, framework="mindspore",
        versions={"mindspore": ms.__version__, **info.pop("versions", {})},
        standalone=losses.get("standalone"), distributed=losses.get("distributed"), moved=moved,
        dtypes_observed=observed, zero_grad_effective=zero_grad_effective,
        engine_notes=list(info.get("notes") or engine.notes), engine=info,
        collectives=ledger_record(engine, rank, world) if "distributed" in names else None,
        features=dict(applied, activation_offload=False, compile=None, init="eager",
                      lr_scheduler=as_str(cfg.train.lr_scheduler), lr={"schedule": lr} if lr else None),
    )
    if traces.get("standalone") and traces.get("distributed"):
        from sweep.analysis.trace import locate, to_shards

        result.first_tensor = locate(to_shards(traces["standalone"], traces["distributed"], rank),
                                     traces["distributed"], float(cfg.compare.noise_floor), weights_step)
    write_rank_result(job_dir, phase, result, time.perf_counter() - t0 - sum(seconds.values()), seconds)

