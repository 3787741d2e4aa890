"""One MindSpore rank, in PYNATIVE mode, following the report's reproducer.

Started by msrun (which also runs this file in its scheduler process up to
``init()``; nothing is written before ``init()``). Order, as in the report:
``set_context(mode=PYNATIVE_MODE)``, ``set_deterministic``, ``set_seed(seed)``,
``np.random.seed(seed)``, ``init()``, build the standalone net, build the distributed
net, copy the distributed net's initial weights into the standalone one
(``weights.transfer``; the report shares storage), parallelise, build the optimizers
(standalone first), train in ``order`` (the report: standalone first), each copy
after ``set_seed(seed)`` again (:func:`in_own_stream`: both draw alike). The step is
``sweep.train.mindspore_step.train``: ``value_and_grad(forward_fn, None,
optimizer.parameters)`` then ``optimizer(grads)``, its observers called at the
protocol's points (``sweep.train.observers``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from sweep import models
from sweep.config.enums import as_str
from sweep.engines import load_engine
from sweep.engines.base import StandaloneMindSpore
from sweep.layout import JobDir
from sweep.records import RankResult
from sweep.train import (copy_order, crosses_frameworks, phase_order, rank_samples, standalone_everywhere,
                         train_phases, write_rank_result)
from sweep.train import twin, versions
from sweep.train.traced import traced
from sweep.train.final_state import EndBuffers, final_record
from sweep.train.mindspore_step import train
from sweep.train.observers import Copy, Observer
from sweep.train.observers.dtypes import MindSporeDtypes
from sweep.train.observers.module_trace import MindSporeModuleTrace
from sweep.train.observers.optimizer_log import MindSporeOptimizerLog, optimizer_record
from sweep.train.observers.random_draws import MindSporeRandomDraws
from sweep.train.observers.reductions import MindSporeGradients, gradients_record, reduction_findings
from sweep.train.observers.replicas import MindSporeReplicaDigests, mindspore_shard_key
from sweep.train.observers.tensor_trace import MindSporeTensorTrace, mindspore_state
from sweep.train.schedules import lr_values
from sweep.train.trace_book import rerun_book


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


def weights_across(cfg: Any, job_dir: Path, ctx: Any, names: List[str], standalone: Any) -> Optional[Dict[str, Any]]:
    """``baseline.framework`` (the standalone copy in another framework), as torch's
    (``sweep.train.torch_rank.weights_across``): where the ranks train the distributed copy,
    rank 0 writes the standalone copy's initial parameters (the distributed copy's, full:
    ``weights.transfer`` gave them; BatchNorm's moving statistics included; float32 numpy,
    canonical names: ``sweep.models.convert.save``) to ``ranks/initial_weights.npz``, unless
    the job took a cached baseline; in the standalone-only process it sets the other
    framework's values into ``standalone``'s parameters by name and layout
    (``convert.from_canonical``: ``gamma`` from ``weight``, ...). Returns, there,
    ``{"framework", "file", "renamed"}`` (``RankResult.features["initial_weights"]``), else ``None``.

    Raises:
        FileNotFoundError: the file is missing (the ranks did not write it).
        ValueError: a tensor with no counterpart, or of another shape (``sweep.models.convert``).
    """
    from mindspore import Tensor

    from sweep.models import convert

    if not crosses_frameworks(cfg):
        return None
    paths = JobDir(job_dir)
    params = {p.name: p for p in standalone.get_parameters()}
    if "distributed" in names:
        if ctx.rank == 0 and not paths.standalone_result.exists():
            convert.save(paths.initial_weights, {n: p.asnumpy().copy() for n, p in params.items()}, "mindspore")
        return None
    state, source, source_names = convert.load(paths.initial_weights)
    values, renamed = convert.from_canonical(state, {n: tuple(p.shape) for n, p in params.items()}, "mindspore",
                                             source, source_names)
    for name, value in values.items():
        params[name].set_data(Tensor(np.ascontiguousarray(value, dtype=np.float32)))
    return {"framework": source, "file": str(paths.initial_weights), "renamed": renamed}


def local_params(net: Any) -> List[np.ndarray]:
    """This rank's parameter values as numpy copies (``asnumpy()`` is a live view)."""
    return [p.asnumpy().copy() for p in net.trainable_params()]


def probe_loss(copy: Copy, pair: Any, cfg: Any) -> Optional[str]:
    """The standalone copy's loss on the first step's rows ``pair`` (numpy ``(inputs, targets)``)
    from its initial weights, forward only: in inference mode (``set_train(False)``: no dropout
    draw, no moving statistic moved), outside ``value_and_grad``; ``float.hex`` of it, bit for bit
    (as ``sweep.train.torch_rank.probe_loss``, read by ``sweep.analysis.envelope.twin_unlike``);
    every parameter the forward assigned is put back (:func:`restore_parameters`). ``None`` under
    ``baseline.precision=policy`` (the standalone copy runs the engine)."""
    from mindspore import Tensor, nn

    if as_str(cfg.baseline.precision) == "policy":
        return None
    net, was = copy.model, bool(getattr(copy.model, "training", False))
    kept = {p.name: p.asnumpy().copy() for p in net.get_parameters()}
    try:
        net.set_train(False)
        loss = nn.MSELoss()(net(Tensor(pair[0])), Tensor(pair[1]))
    finally:
        net.set_train(was)
        restore_parameters(net, kept)
    return float(np.asarray(loss.asnumpy(), np.float64)).hex()


def restore_parameters(net: Any, kept: Dict[str, np.ndarray]) -> List[str]:
    """Put back into ``net``'s parameters the values ``kept`` (numpy copies by name, taken before a
    forward outside training: :func:`probe_loss`) where they differ now: ``set_train(False)`` stops
    BatchNorm's moving statistics, not a ``construct`` that assigns a parameter itself (``ops.assign``
    of a running mean kept by hand). Returns the names put back (a value holding a NaN too)."""
    from mindspore import Tensor

    back = []
    for param in net.get_parameters():
        value = kept.get(param.name)
        if value is not None and not np.array_equal(param.asnumpy(), value):
            param.set_data(Tensor(value))
            back.append(param.name)
    return back


def probed(cfg: Any, launch: Tuple[Path, str, bool], ctx: RankContext, standalone: Copy, pair: Any) -> Dict[str, Any]:
    """``{"probe": probe_loss(...)}`` on a rank that records it (``sweep.train.twin.probed``;
    ``launch``: ``(job_dir, phase, apart)``), else ``{}``: ``RankResult.initial``'s part."""
    job_dir, phase, apart = launch
    if not twin.probed(cfg, job_dir, phase, apart, ctx.rank, ctx.world):
        return {}
    return {"probe": probe_loss(standalone, pair, cfg)}


def initial_check(standalone: Any, distributed: Any, rank: int, noise_floor: float,
                  frozen: List[str]) -> Dict[str, Any]:
    """Both copies' parameters and buffers (``requires_grad=False`` parameters: BatchNorm's
    moving statistics) before any step, by name (``sweep.train.observers.tensor_trace
    .mindspore_state``; a sharding engine's local shards against the matching slice of the
    standalone tensor, ``sweep.analysis.trace.to_shards``). Returns ``{"first":
    sweep.analysis.trace.first_difference's dict (kind ``initial`` or ``initial_buffer``) or
    None, "missing": sweep.analysis.trace.missing_names's list}``, as torch's
    ``sweep.train.torch_rank.initial_check``."""
    from sweep.analysis.trace import Search, first_difference, missing_names, to_shards

    def state(net: Any) -> List[Dict[str, Any]]:
        return [{"initial": mindspore_state(net, "weight", frozen), "initial_buffer": mindspore_state(net, "buffer",
                                                                                                       frozen)}]

    theirs = state(distributed)
    ours = to_shards(state(standalone), theirs, rank)
    return {"first": first_difference(ours, theirs, Search(noise_floor)), "missing": missing_names(ours, theirs)}


def copy_observers(cfg: Any, name: str, copy: Copy, frozen: List[str], rank: int = 0, world: int = 1,
                   full_shapes: Optional[Dict[str, Any]] = None, book: Any = None) -> Dict[str, Observer]:
    """The observers of one copy's training (``sweep.train.observers``), by role: random
    draws, the optimizer as it ran, the dtypes that ran, the gradients as they ran (norms before
    and after the reduction, the op that ran: ``reductions.py``), the replica digests (the
    distributed copy), and in a tracing rerun
    (``compare.trace_until`` set) the tensor trace and the module trace
    (``compare.module_trace``: Cell hooks, PYNATIVE mode), recording into ``book`` (the rerun's
    ``sweep.train.trace_book.TraceBook``)."""
    from sweep.analysis.collectives import dim_groups

    until = cfg.compare.get("trace_until")
    found: Dict[str, Observer] = {"draws": MindSporeRandomDraws(), "optimizer": MindSporeOptimizerLog(),
                                  "dtypes": MindSporeDtypes()}
    distributed = name == "distributed"
    shape = [int(n) for n in cfg.mesh.mesh_shape]
    groups = dim_groups(shape, list(cfg.mesh.mesh_dim_names), rank) if int(np.prod(shape)) == world else {}
    found["grads"] = MindSporeGradients(distributed, until=0 if until is None else -1, rank=rank,
                                        world=world if distributed else 1, groups=groups,
                                        max_norm=cfg.train.clip_grad_norm, clears=copy.clear_grads,
                                        full_shapes=full_shapes)
    if name == "distributed":
        found["digests"] = MindSporeReplicaDigests()
    if until is not None:
        found["trace"] = MindSporeTensorTrace(until, max(until, int(cfg.compare.get("onset_until") or -1)), frozen,
                                              book.sink(name) if book is not None else None)
        if cfg.compare.get("module_trace", True):
            found["modules"] = MindSporeModuleTrace(copy.model, until, found["trace"])
    return found


def twin_observers(cfg: Any, copy: Copy, frozen: List[str], book: Any = None) -> Dict[str, Observer]:
    """The twin's observers, as torch's (``sweep.train.torch_rank.twin_observers``): in a
    tracing rerun the tensor trace (into ``book``'s sink ``twin``) and the module trace, none
    otherwise."""
    until = cfg.compare.get("trace_until")
    if until is None:
        return {}
    found: Dict[str, Observer] = {"trace": MindSporeTensorTrace(until, max(until, int(cfg.compare.get("onset_until")
                                                                                     or -1)), frozen,
                                                                book.sink("twin") if book is not None else None)}
    if cfg.compare.get("module_trace", True):
        found["modules"] = MindSporeModuleTrace(copy.model, until, found["trace"])
    return found


def replica_record(cfg: Any, ctx: RankContext, net: Any, full_shapes: Dict[str, Any],
                   digests: List[str]) -> Dict[str, Any]:
    """``RankResult.replica``, as torch's (``sweep.train.torch_rank.replica_record``): which
    shards this rank holds (``sweep.train.observers.replicas.mindspore_shard_key``), where
    it sits on the job's mesh (rank ``r`` at its row-major coordinates) and the digest of its
    local weights after each step."""
    from sweep.train.observers.replicas import mindspore_tensor_keys

    shape = [int(n) for n in cfg.mesh.mesh_shape]
    replica: Dict[str, Any] = {"key": mindspore_shard_key(net, full_shapes, ctx.rank), "coords": None,
                               "mesh_dims": None, "tensors": mindspore_tensor_keys(net, full_shapes, ctx.rank),
                               "digests": digests}
    if ctx.distributed and int(np.prod(shape)) == ctx.world:
        replica.update(coords=[int(c) for c in np.unravel_index(ctx.rank, shape)],
                       mesh_dims=[str(d) for d in cfg.mesh.mesh_dim_names])
    return replica



def in_own_stream(seed: int, fn: Any) -> Any:
    """``fn()`` in one copy's random stream: ``mindspore.set_seed(seed)`` (the global seed,
    numpy's, the operators' seed counters), ``mindspore.manual_seed(seed)`` (the default
    generator ``mint``'s random ops and ``ops.dropout_ext`` draw from, where this MindSpore
    has one) and ``np.random.seed(seed)`` first; numpy's state and the default generator's
    restored after, so both copies draw alike whichever trains first and the next job in a
    reused process starts where this one did (as ``sweep.train.torch_rank.copy_random_stream``).
    An ``nn.Dropout`` Cell's kernel seeds are fixed when it is built: :func:`build_nets`
    builds both copies' random ops from the same seeds."""
    import mindspore as ms

    numpy_state = np.random.get_state()
    generator = ms.get_rng_state() if hasattr(ms, "get_rng_state") else None
    try:
        ms.set_seed(seed)
        if generator is not None:
            ms.manual_seed(seed)
        np.random.seed(seed)
        return fn()
    finally:
        np.random.set_state(numpy_state)
        if generator is not None:
            ms.set_rng_state(generator)


def build_nets(cfg: Any) -> Tuple[Any, Any]:
    """``(standalone, distributed)``: the job's net built twice, in the report's order of
    RNG use (the caller's ``set_seed(seed)``, then the standalone net, then the distributed
    one: their weights are numpy's first and second draws, ``Initializer``'s
    ``_numpy_seed``), except that MindSpore's operator seed counters restart before the
    second build (``set_seed(seed)``, numpy's state kept): a random op's seeds are fixed
    when its Cell is built (``nn.Dropout``: ``_get_graph_seed`` advances a counter per
    build), so without it two nets built after one ``set_seed`` draw different masks."""
    import mindspore as ms

    standalone = models.build(cfg, "mindspore")
    numpy_state = np.random.get_state()
    ms.set_seed(int(cfg.seed))  # the op seed counters restart; numpy's draws go on below
    np.random.set_state(numpy_state)
    return standalone, models.build(cfg, "mindspore")


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


def ledger_record(engine: Any, rank: int, world: int, gradients: Any = None, cfg: Any = None) -> Dict[str, Any]:
    """``RankResult.collectives`` of a MindSpore rank: the calls the engine saw at step 0
    (``engine.ledger``; hyper-parallel's platform collectives) folded per op, dtype and
    group (``sweep.analysis.collectives.ledger_summary``), the engine's contract
    (``engine.expected_collectives()``) and the notes where the calls depart from it
    (``ledger_notes``), or, with no contract, why (``engine.collectives_unchecked``); and the
    notes on the gradients as they were reduced (``gradients``: the copy's ``MindSporeGradients``,
    ``sweep.train.observers.reductions.reduction_findings``: judged from the values, so a
    reduction inside a compiled graph is judged too)."""
    from sweep.analysis.collectives import ledger_notes, ledger_summary

    from sweep.engines.base import expected_for

    expected = expected_for(engine, cfg)  # the job's config, whatever the engine swapped in
    known = {}
    if cfg is not None:
        shape = [int(n) for n in cfg.mesh.mesh_shape]
        known = {"world_size": float(world), "grad_accum_steps": float(cfg.train.grad_accum_steps),
                 "the replicate degree": float(shape[0]) if len(shape) == 2 else None}
    ran = reduction_findings(gradients, engine.ledger, expected, rank, world, known,
                             unseen=engine.collectives_unchecked)
    return {"expected": expected, "calls": ledger_summary(engine.ledger, rank, world, expected),
            "divide_factors": None, "notes": ledger_notes(engine.ledger, expected, rank, world) + ran,
            "unchecked": engine.collectives_unchecked if expected is None else None}


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


def nudge(net: Any, dtype: str, sign_seed: int) -> Dict[str, int]:
    """Move every parameter of ``net`` by one unit in the last place of ``dtype`` with random
    signs (``sweep.analysis.envelope.perturb``; one ``numpy.random.default_rng(sign_seed)`` drawn
    parameter by parameter in name order), as torch's ``sweep.train.torch_rank.nudge``: the
    standalone copy's twin. Returns ``{"parameters", "elements"}`` nudged."""
    from mindspore import Tensor

    from sweep.analysis.envelope import nudged

    rng = np.random.default_rng(sign_seed)
    count = {"parameters": 0, "elements": 0}
    for param in sorted(net.get_parameters(), key=lambda p: p.name):
        values = param.asnumpy()
        values = values if values.dtype == np.float32 else values.astype(np.float64)  # (as torch's)
        moved = nudged(values, dtype, rng)
        param.set_data(Tensor(moved.astype(param.asnumpy().dtype)))
        count["parameters"] += 1
        count["elements"] += int(values.size)
    return count


def build_twin(cfg: Any, standalone: Any, lr: Optional[List[float]]) -> Tuple[Copy, Dict[str, Any]]:
    """The standalone copy's twin (``sweep.train.twin``): the job's net built again with the
    operator seed counters restarted (``set_seed(seed)``, numpy's state kept: its random ops
    draw as the standalone copy's, :func:`build_nets`), the standalone copy's initial
    parameters copied in (independent storage), prepared alike (:func:`prepare_cells`), its
    parameters nudged (:func:`nudge`), with the standalone engine and its own optimizer.
    Returns ``(copy, {"dtype", "seed", "nudged"})``."""
    import mindspore as ms
    from mindspore import Tensor

    from sweep.train import twin

    numpy_state = np.random.get_state()
    ms.set_seed(int(cfg.seed))
    net = models.build(cfg, "mindspore")
    np.random.set_state(numpy_state)
    values = {p.name: p for p in standalone.get_parameters()}
    for param in net.get_parameters():
        param.set_data(Tensor(values[param.name].asnumpy().copy()))
    prepare_cells(cfg, net)
    dtype, sign_seed = twin.perturbation_dtype(cfg), twin.seed(cfg)
    nudged = nudge(net, dtype, sign_seed)
    optimizer = build_optimizer(cfg.optimizer, net.trainable_params(), lr)
    return (Copy(model=net, engine=StandaloneMindSpore(cfg, device=cfg.device, world_size=1), optimizer=optimizer,
                 clear_grads=False, grad_api=cfg.framework.grad_api), {"dtype": dtype, "seed": sign_seed,
                                                                      "nudged": nudged})


def build_copies(cfg: Any, job_dir: Path, ctx: RankContext, names: List[str], with_twin: bool = False
                 ) -> Tuple[Copy, Copy, Dict[str, Any], Optional[Tuple[Copy, Dict[str, Any]]]]:
    """Both copies of the job's net on this rank, in the report's order (module docstring):
    built, the initial weights transferred (``weights.transfer``; with ``baseline.framework``
    also written by rank 0, or taken from the other framework's: :func:`weights_across`), prepared alike
    (:func:`prepare_cells`), the distributed one parallelised if it trains here, each with
    its optimizer (a ``train.lr_scheduler``'s per-step list as MindSpore's dynamic lr).
    With ``with_twin``, also the standalone copy's twin (:func:`build_twin`). Returns
    ``(standalone, distributed, applied, twin)``: ``applied`` is the features record, ``twin``
    ``(copy, its perturbation)`` or ``None``."""
    standalone, distributed = build_nets(cfg)
    ckpt = JobDir(job_dir).checkpoint("standalone" if not ctx.distributed else f"rank_{ctx.rank}", ".ckpt")
    copy_weights(standalone, distributed, cfg.weights.transfer, ckpt)
    across = weights_across(cfg, job_dir, ctx, names, standalone)
    applied = prepare_cells(cfg, standalone)
    prepare_cells(cfg, distributed)
    alone = StandaloneMindSpore(cfg, device=cfg.device, world_size=1)
    # the job's engine may have no MindSpore implementation where only a standalone copy of
    # another framework's job trains here (baseline.framework)
    engine = load_engine(cfg, "mindspore", device=cfg.device, world_size=ctx.world) \
        if "distributed" in names or not crosses_frameworks(cfg) else alone
    if across is not None:
        applied["initial_weights"] = across
    if "distributed" in names:
        distributed = engine.parallelize(distributed)
    lr = lr_values(cfg) if as_str(cfg.train.lr_scheduler) != "none" else None  # the per-step list MindSpore takes
    opt_standalone = build_optimizer(cfg.optimizer, standalone.trainable_params(), lr)
    opt_distributed = build_optimizer(cfg.optimizer, distributed.trainable_params(), lr)
    applied = dict(applied, activation_offload=False, compile=None, init="eager",
                   lr_scheduler=as_str(cfg.train.lr_scheduler), lr={"schedule": lr} if lr else None)
    grad_api = cfg.framework.grad_api
    twin_built = build_twin(cfg, standalone, lr) if with_twin else None
    return (Copy(model=standalone, engine=alone, optimizer=opt_standalone, clear_grads=False, grad_api=grad_api),
            Copy(model=distributed, engine=engine, optimizer=opt_distributed, clear_grads=bool(cfg.zero_grad),
                 grad_api=grad_api), applied, twin_built)


def run_job(cfg: Any, job_dir: Path | str, ctx: RankContext, phase: str = "both") -> None:
    """Train this process's copies for one job and write its result file (see
    ``sweep.train``); seeds are (re)set here, so a reused process gives the same losses."""
    t0 = time.perf_counter()
    import mindspore as ms

    ms.set_seed(cfg.seed)
    np.random.seed(cfg.seed)
    rank, world = ctx.rank, ctx.world
    job_dir = Path(job_dir)
    names = phase_order(copy_order(cfg), phase, job_dir, rank, standalone_everywhere(cfg))
    apart = copy_order(cfg) == "separate"
    standalone, distributed, applied, twin_built = build_copies(
        cfg, job_dir, ctx, names, with_twin=twin.built_here(cfg, job_dir, phase, apart))
    global_np, local_np = rank_samples(cfg, rank)
    twin_seen: Dict[str, Observer] = {}
    twin_record = None
    twin_trains = twin_built is not None and twin.trains(cfg, job_dir, phase, apart, rank, world)
    here, frozen = "distributed" in names, list(applied.get("frozen") or [])
    book = rerun_book(cfg, job_dir, rank, names, shard_rank=rank, twin_traced=twin_trains,
                      shard_shapes=lambda: {p.name: tuple(p.shape) for p in distributed.model.get_parameters()}
                      if here else {})
    if twin_trains:
        # first, in its own random stream: the other copies draw as without it
        twin_copy, made = twin_built
        twin_seen = twin_observers(cfg, twin_copy, frozen, book)
        began = time.perf_counter()
        twin_losses = in_own_stream(int(cfg.seed), lambda: train(twin_copy, global_np, cfg.train, twin_seen.values()))
        twin_record = twin.record(twin_losses, made["dtype"], made["seed"], made["nudged"],
                                  time.perf_counter() - began,
                                  final_record(["twin"], {"twin": lambda: mindspore_state(twin_copy.model, "buffer",
                                                                                          frozen)}))
        twin_copy = made = None  # its net and optimizer go before the other copies train
        twin.release()
    twin_built = None
    copies, samples = {"standalone": standalone, "distributed": distributed}, {"standalone": global_np,
                                                                               "distributed": local_np}
    initial = dict(initial_check(standalone.model, distributed.model, rank, float(cfg.compare.noise_floor), frozen),
                   **probed(cfg, (job_dir, phase, apart), ctx, standalone, global_np[0])) if here else None
    full_shapes = {p.name: tuple(p.shape) for p in standalone.model.get_parameters()}
    ends = EndBuffers(names, {n: partial(mindspore_state, c.model, "buffer", frozen) for n, c in copies.items()})
    seen = {name: copy_observers(cfg, name, copies[name], frozen, rank, world, full_shapes, book) for name in names}

    def runner(name: str) -> Any:
        return lambda: in_own_stream(int(cfg.seed), lambda: train(copies[name], samples[name], cfg.train,
                                                                  seen[name].values()))

    losses, moved, seconds = train_phases(
        names, train={name: runner(name) for name in names},
        snapshot={"standalone": lambda: local_params(standalone.model),
                  "distributed": lambda: local_params(distributed.model)},
    )
    engine = distributed.engine
    info = dict(engine.info()) if "distributed" in names else {}
    result = RankResult(
        rank=rank, world_size=world, framework="mindspore",
        versions={"mindspore": ms.__version__, **versions.ran(engine), **info.pop("versions", {})},
        standalone=losses.get("standalone"), distributed=losses.get("distributed"), moved=moved,
        dtypes_observed=seen["distributed"]["dtypes"].observed if "distributed" in seen else {},
        dtypes_observed_standalone=seen["standalone"]["dtypes"].observed if "standalone" in seen else {},
        zero_grad_effective=bool(cfg.zero_grad) and hasattr(distributed.model, "zero_grad"),
        engine_notes=list(info.get("notes") or engine.notes), engine=info,
        collectives=ledger_record(engine, rank, world, seen["distributed"].get("grads"), cfg)
        if "distributed" in names else None, features=applied,
        reductions={name: gradients_record(obs.get("grads")) for name, obs in seen.items()},
        random_draws={name: obs["draws"].drew for name, obs in seen.items()}, initial=initial,
        final=ends.record(),
        optimizer=optimizer_record(cfg, {name: obs["optimizer"].groups for name, obs in seen.items()},
                                   {name: obs["optimizer"] for name, obs in seen.items()}),
        replica=replica_record(cfg, ctx, distributed.model, full_shapes, seen["distributed"]["digests"].digests)
        if "distributed" in seen else None,
    )
    result.twin = twin_record
    traced(cfg, seen, result, twin_seen, book)
    if crosses_frameworks(cfg):  # the other copy traces in the other framework's process: hand this one over
        from sweep.train import trace_files

        trace_files.save(job_dir, f"rank_{rank}" if "distributed" in names else "standalone", "mindspore", seen)
        trace_files.save_twin(job_dir, "mindspore", twin_seen)
    write_rank_result(job_dir, phase, result, time.perf_counter() - t0 - sum(seconds.values()), seconds)
