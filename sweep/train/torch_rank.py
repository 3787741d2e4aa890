"""One PyTorch rank: standalone and distributed training of the job's model (``sweep.models``).

Started by torchrun (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` in the environment).
Order of RNG use, as in the report: seed, build the standalone model, build the
distributed model, copy the distributed model's initial weights into the standalone
one (``weights.transfer``), then parallelise the distributed one (and, with
``baseline.precision=policy``, the standalone one: :func:`standalone_engine`) and train
the copies in ``order``. Each copy trains in a random stream of its own, seeded alike
(:func:`copy_random_stream`): a forward that draws random numbers (dropout) draws the
same ones in both copies, whichever trains first and whether or not the standalone one
trains here at all (a cached baseline). The standalone copy always clears its
gradients; the distributed copy does so only with ``zero_grad=true``.

Before training, both copies' weights and buffers are compared by canonical name
(:func:`initial_check`); while training, the distributed copy's local weights are
digested per step (``RankResult.replica``), so the job can hold replicas against each
other (``sweep.run.job``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from sweep import models
from sweep.config.enums import as_str
from sweep.config.sections.compare import TWIN_ROWS_FROM
from sweep.engines import load_engine
from sweep.engines.base import StandaloneTorch, TorchEngine
from sweep.layout import JobDir
from sweep.records import RankResult
from sweep.train import (
    copy_order,
    crosses_frameworks,
    launch_order,
    phase_order,
    rank_samples,
    redirect_output,
    standalone_everywhere,
    train_phases,
    write_rank_result,
)
from sweep.train import twin, versions
from sweep.train.traced import traced
from sweep.train.final_state import EndBuffers, final_record
from sweep.train.copies import compile_model, features_record, prepare
from sweep.train.observers import Copy, Observer
from sweep.train.observers.dtypes import TorchDtypes, override_targets
from sweep.train.observers.ledger import CollectiveLedger
from sweep.train.observers.lr_log import LearningRates
from sweep.train.observers.forward_writes import ForwardWrites
from sweep.train.observers.module_trace import ModuleTrace
from sweep.train.observers.offload import ActivationOffload
from sweep.train.observers.optimizer_log import OptimizerLog, optimizer_record
from sweep.train.observers.random_draws import RandomDraws
from sweep.train.observers.reductions import TorchGradients, gradients_record, reduction_findings
from sweep.train.observers.replicas import ReplicaDigests
from sweep.train.observers.single_device import SingleDevice
from sweep.train.observers.tensor_trace import TorchTensorTrace
from sweep.train.schedules import torch_scheduler
from sweep.train.torch_step import train
from sweep.train.torch_tensors import (gather_rows, host_copy, named_state, record_tensors, shard_key, shard_layout,
                                       shard_slices)
from sweep.train.trace_book import rerun_book


def initial_weights(standalone: Any, state: Dict[str, Any], how: str, path: Path) -> None:
    """Give ``standalone`` the distributed copy's initial weights ``state`` (full tensors,
    ``sweep.train.model_init.full_state``; ``model.init=meta``), per ``weights.transfer``:
    ``independent`` loads a copy, ``checkpoint`` round-trips it through ``torch.save``
    at ``path`` (``shared`` is refused before launch: sharded storage cannot be shared)."""
    import torch

    if as_str(how) == "checkpoint":
        torch.save(state, path)
        state = torch.load(path, weights_only=True)
    standalone.load_state_dict({k: v.to(next(standalone.parameters()).device) for k, v in state.items()})


def weights_across(cfg: Any, job_dir: Path, ctx: Any, names: List[str], standalone: Any) -> Dict[str, Any] | None:
    """``baseline.framework`` (the standalone copy in another framework): where the ranks
    train the distributed copy, rank 0 writes the standalone copy's initial weights (the
    distributed copy's, full: ``weights.transfer`` or ``model.init=meta`` gave them; float32
    numpy, canonical names: ``sweep.models.convert.save``) to ``ranks/initial_weights.npz``,
    unless the job took a cached baseline; in the standalone-only process it loads the other
    framework's file into ``standalone`` by name and layout (``convert.from_canonical``; its
    ``num_batches_tracked`` stays 0). Returns, there, ``{"framework", "file", "renamed"}``
    (``RankResult.features["initial_weights"]``); else ``None``, as without
    ``baseline.framework``.

    Raises:
        FileNotFoundError: the file is missing (the ranks did not write it).
        ValueError: a tensor with no counterpart, or of another shape (``sweep.models.convert``).
    """
    import torch

    from sweep.models import convert

    if not crosses_frameworks(cfg):
        return None
    paths = JobDir(job_dir)
    if "distributed" in names:
        if ctx.rank == 0 and not paths.standalone_result.exists():
            state = {k: host_copy(v) if v.is_floating_point() else v.detach().cpu().clone().numpy()
                     for k, v in standalone.state_dict().items()}
            convert.save(paths.initial_weights, state, "torch")
        return None
    state, source, source_names = convert.load(paths.initial_weights)
    own = standalone.state_dict()
    values, renamed = convert.from_canonical(state, {k: tuple(v.shape) for k, v in own.items()}, "torch", source,
                                             source_names)
    standalone.load_state_dict({k: torch.from_numpy(values[k]).to(dtype=v.dtype, device=v.device) if k in values
                                else v for k, v in own.items()})
    return {"framework": source, "file": str(paths.initial_weights), "renamed": renamed}


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
    copy_unsaved_buffers(dst, src, everyone=how == "shared")


def copy_unsaved_buffers(dst: Any, src: Any, everyone: bool = False) -> List[str]:
    """Copy into ``dst``'s buffers the values of ``src``'s of the same name that no
    ``state_dict`` carries (``register_buffer(..., persistent=False)``: a random projection,
    a mask drawn at construction), every buffer with ``everyone`` (``weights.transfer=shared``
    shares parameters only). In one training run there is one model, so its buffers are the
    same in both copies: without this a buffer drawn at random would differ from step 0, a
    difference of this tool's making. Returns the names copied (dst's, in ``named_buffers``
    order)."""
    import torch

    saved = set(dst.state_dict()) if not everyone else set()
    theirs = dict(src.named_buffers())
    copied = []
    with torch.no_grad():
        for name, buf in dst.named_buffers():
            other = theirs.get(name)
            if name in saved or other is None or other.shape != buf.shape or other is buf:
                continue
            buf.copy_(other.to(device=buf.device, dtype=buf.dtype))
            copied.append(name)
    return copied


def local_params(model: Any) -> List[np.ndarray]:
    """This rank's parameter and buffer values as float32 numpy arrays copied out of live
    storage (``sweep.train.torch_tensors.host_copy``; a DTensor gives its local shard), in
    ``named_parameters`` then ``named_buffers`` order."""
    return [host_copy(t) for kind in ("weight", "buffer") for t in named_state(model, kind, gather=False).values()]


@contextlib.contextmanager
def copy_random_stream(seed: int, device: Any) -> Iterator[None]:
    """While entered, the random stream of one copy's training: torch's CPU generator and
    ``device``'s (``torch.random.fork_rng``: CUDA, NPU, ...), and numpy's global one, all
    seeded with ``seed``; on exit every generator is back where it was, so the other copy
    (and the next job in a reused process) starts from the same state whatever this one
    drew. Whether the training drew (dropout) is the ``RandomDraws`` observer's
    (``sweep.train.observers.random_draws``)."""
    import torch

    accelerator = device.type != "cpu"
    with torch.random.fork_rng(devices=[device] if accelerator else [],
                               device_type=device.type if accelerator else "cuda"):
        numpy_state = np.random.get_state()
        try:
            torch.manual_seed(seed)
            np.random.seed(seed)
            yield
        finally:
            np.random.set_state(numpy_state)


def probe_loss(copy: Copy, pair: Any, cfg: Any) -> Optional[str]:
    """The standalone copy's loss on the first step's rows ``pair`` (``(inputs, targets)`` on the
    device) from its initial weights, forward only: in eval mode (no dropout draw, no running
    statistic moved), without gradients, the CPU random stream forked, and every parameter and
    buffer the forward wrote itself put back (:func:`held_state`); ``float.hex`` of it, bit for
    bit. Every rank computes the same number from the same weights, data and code, unless the model
    computes otherwise there (``sweep.analysis.envelope.twin_unlike``). ``None`` where a forward
    outside training would change what trains: ``compile.enabled`` (another graph compiled) or
    ``baseline.precision=policy`` (a ``fully_shard`` model, whose forward gathers)."""
    import torch

    from sweep.train.torch_step import loss_function

    if cfg.compile.enabled or as_str(cfg.baseline.precision) == "policy":
        return None
    x, y = pair
    if copy.input_dtype is not None and x.is_floating_point():
        x = x.to(copy.input_dtype)
    model, was = copy.model, copy.model.training
    kept = held_state(model)
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            model.eval()
            loss = loss_function(str(cfg.train.loss))(model(x), y)
    finally:
        model.train(was)
        restore_state(model, kept)
    return float(loss.detach().float().cpu()).hex()


def held_state(model: Any) -> Dict[str, Any]:
    """A clone of every parameter and buffer of ``model`` (persistent or not), by ``p:``/``b:`` and
    name: what a forward outside training must leave as it found (:func:`restore_state`). Eval
    mode stops BatchNorm's statistics, not a forward's own writes: a running mean kept by hand,
    ``nn.Embedding(max_norm=...)`` renorming the rows it looks up. One more copy of the model's
    tensors, before training (below a training step's peak)."""
    import torch

    with torch.no_grad():
        return {**{f"p:{n}": p.detach().clone() for n, p in model.named_parameters()},
                **{f"b:{n}": b.detach().clone() for n, b in model.named_buffers()}}


def restore_state(model: Any, kept: Dict[str, Any]) -> List[str]:
    """Put back into ``model`` the values of :func:`held_state`'s ``kept`` that differ from them now
    (``torch.equal``: a tensor holding a NaN is put back too, unchanged); returns the names put back."""
    import torch

    now = {**{f"p:{n}": p for n, p in model.named_parameters()}, **{f"b:{n}": b for n, b in model.named_buffers()}}
    back = []
    with torch.no_grad():
        for key, value in kept.items():
            tensor = now.get(key)
            if tensor is not None and tensor.shape == value.shape and not torch.equal(tensor, value):
                tensor.copy_(value)
                back.append(key[2:])
    return back


def initial_record(cfg: Any, ctx: RankContext, standalone: Copy, distributed: Copy, probe: Any) -> Dict[str, Any]:
    """``RankResult.initial``: :func:`initial_check` of the copies, and where ``probe`` (the first
    step's ``(inputs, targets)``) is given, ``"probe"``: :func:`probe_loss` of the standalone copy
    (``sweep.train.twin.probed``: does the twin's rank compute the model as rank 0 does?)."""
    found = initial_check(standalone.model, distributed.model, float(cfg.compare.noise_floor), ctx.device)
    return dict(found, probe=probe_loss(standalone, probe, cfg)) if probe is not None else found


def initial_check(standalone: Any, distributed: Any, noise_floor: float, device: Any = "cpu") -> Dict[str, Any]:
    """Both copies' weights and buffers before any step, compared by canonical name
    (full tensors: a sharded ``DTensor`` is gathered, a collective every rank makes here).
    Returns ``{"first": sweep.analysis.trace.first_difference's dict (kind ``initial`` or
    ``initial_buffer``) or None, "missing": sweep.analysis.trace.missing_names's list}``."""
    from sweep.analysis.trace import Search, first_difference, missing_names

    if initial_equal(standalone, distributed, device):  # what the gathers below would find: nothing
        return {"first": None, "missing": []}
    ours = [{"initial": record_tensors(standalone, "weight"), "initial_buffer": record_tensors(standalone, "buffer")}]
    theirs = [{"initial": record_tensors(distributed, "weight"),
               "initial_buffer": record_tensors(distributed, "buffer")}]
    return {"first": first_difference(ours, theirs, Search(noise_floor)), "missing": missing_names(ours, theirs)}


def initial_equal(standalone: Any, distributed: Any, device: Any = "cpu") -> bool:
    """Whether, on every rank, the distributed copy's weights and buffers equal the standalone
    copy's (``torch.equal``: the same shape and values; a tensor cast to another dtype whose
    values it holds exactly is equal, as in the gathers' float32 comparison: the dtype
    observer names the cast), each dim-0 shard FSDP2 placed on
    this rank against the same rows of the standalone tensor (``shard_slices``), any other
    tensor whole, and both copies name the same tensors: one all-reduce of a flag where a
    process group is up (every rank calls it here, the same tensors on each; on ``device``, the
    rank's: NCCL and HCCL reduce on the accelerator), no gathers.
    False sends :func:`initial_check` to its full comparison (a ``DTensor`` placed otherwise,
    a name on one side only, a value that differs: the gathers then say where and by how
    much). The gathers took 1.6 s of a passing 42.6M-parameter job's CPU (mesh dp2)."""
    import torch
    import torch.distributed as dist

    from sweep.train.torch_tensors import local_part

    slices = shard_slices(distributed)
    equal = True
    for kind in ("weight", "buffer"):
        ours, theirs = named_state(standalone, kind, gather=False), named_state(distributed, kind, gather=False)
        if set(ours) != set(theirs) or any(hasattr(t, "full_tensor") and n not in slices for n, t in theirs.items()):
            equal = False
            break
        for name, mine in theirs.items():
            whole = local_part(ours[name])
            if name in slices:
                whole = whole[slices[name]["offset"]:slices[name]["offset"] + slices[name]["rows"]]
            if not torch.equal(local_part(mine).detach(), whole.detach()):
                equal = False
                break
        if not equal:
            break
    if dist.is_available() and dist.is_initialized():
        flag = torch.tensor([int(equal)], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        equal = bool(flag.item())
    return equal


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


def standalone_engine(cfg: Any, ctx: RankContext, trains: bool, policy: Optional[bool] = None) -> TorchEngine:
    """The standalone copy's engine, per ``baseline.precision`` (or ``policy``, where given:
    the twin's, :func:`build_twin`): ``float32`` (the default): ``StandaloneTorch``, a plain
    module; ``policy``: ``StandaloneFSDP2``, the job's ``fully_shard`` calls on a one-rank
    mesh (``sweep.engines.torch_fsdp2``), which its ``parallelize`` makes collectively: every
    rank calls it, when ``trains`` (the standalone copy trains in this process: the same on
    every rank of a job). In the standalone-only process of ``order=separate`` (no process
    group) that mesh needs a default group: one of one rank is initialised here (in-process
    ``HashStore``; ``close_rank`` destroys it)."""
    if policy is None:
        policy = as_str((cfg.get("baseline") or {}).get("precision", "float32")) == "policy"
    if not policy:
        return StandaloneTorch(cfg, device=ctx.device, world_size=1)
    import torch.distributed as dist

    from sweep.engines.torch_fsdp2 import StandaloneFSDP2

    if trains and not dist.is_initialized():
        dist.init_process_group(backend=cfg.framework.device_map[as_str(cfg.device)], store=dist.HashStore(),
                                rank=0, world_size=1)
    return StandaloneFSDP2(cfg, device=ctx.device, world_size=1)


def close_rank(ctx: RankContext, exit_process: bool = True) -> None:
    """Destroy the process group (also the one-rank group of a standalone-only process,
    :func:`standalone_engine`) and leave with ``os._exit(0)``: gloo ranks can SIGABRT at
    interpreter shutdown otherwise ("terminate called without an active exception").
    ``exit_process=False``
    returns instead (a forked rank, see ``sweep.launch.fork_launch``)."""
    import torch.distributed as dist

    if ctx.distributed or dist.is_initialized():
        dist.destroy_process_group()
    if not exit_process:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def nudge(model: Any, dtype: str, sign_seed: int) -> Dict[str, int]:
    """Move every floating parameter of ``model`` by one unit in the last place of ``dtype``
    with random signs, in place (``sweep.analysis.envelope.perturb``; one
    ``numpy.random.default_rng(sign_seed)`` drawn parameter by parameter in name order): the
    standalone copy's twin (``sweep.train.twin``). ``model``: a plain module, or one
    parallelised on a one-rank mesh (the twin's ``StandaloneFSDP2``: each parameter's local
    shard is the whole tensor) and not yet compiled or trained. Returns ``{"parameters",
    "elements"}`` nudged."""
    import torch

    from sweep.analysis.envelope import nudged
    from sweep.train.torch_tensors import local_part

    rng = np.random.default_rng(sign_seed)
    count = {"parameters": 0, "elements": 0}
    with torch.no_grad():
        for _, param in sorted(model.named_parameters(), key=lambda item: item[0]):
            if not param.is_floating_point():
                continue
            local = local_part(param)
            # float32 stays float32 (perturb computes those in float32: the same numbers, faster); a
            # DTensor's shard is copied out (numpy on its live storage would pin it)
            wide = torch.float32 if local.dtype == torch.float32 else torch.float64
            values = local.detach().to("cpu", wide, copy=local is not param).numpy()
            moved = nudged(values, dtype, rng)
            local.copy_(torch.from_numpy(moved).to(dtype=local.dtype, device=local.device))
            count["parameters"] += 1
            count["elements"] += int(values.size)
    return count


def build_twin(cfg: Any, ctx: RankContext, standalone: Any, trains: bool = True) -> Tuple[Copy, Dict[str, Any]]:
    """The standalone copy's twin (``sweep.train.twin``): a deep copy of the standalone model
    as built, its initial weights transferred and prepared (so before ``parallelize``), its
    parameters nudged (:func:`nudge`), then given an engine of its own that computes in the
    lowest precision either copy computes in: where the job's ``mp_policy`` sets a dtype
    (``sweep.analysis.rounding.policy_lowers``), that policy on a one-rank mesh
    (``StandaloneFSDP2``, FSDP2's own mixed precision: every cast and every bf16 operation
    rounds as a correct engine's would; collective to build), whatever the job's engine and
    ``baseline.precision``; else the standalone copy's. Then compile, optimizer and lr
    scheduler. A rank that builds it only because its engine is made collectively (``trains``
    false: another rank trains it, ``sweep.train.twin.trains``) leaves it un-nudged: a pass over
    every weight (0.9 s a rank at 42.6M parameters) on the standalone copy's rank, before it trains.
    The rank that trains it nudges it later too (``nudged`` ``None`` here; :func:`nudge_twin`),
    after the initial check's gathers: the other ranks would wait for the nudge there.
    Returns ``(copy, {"dtype", "seed", "nudged", "engine"})``."""
    import copy as copying

    import torch

    from sweep.analysis.rounding import policy_lowers
    from sweep.train import twin

    model = copying.deepcopy(standalone)
    dtype, sign_seed = twin.perturbation_dtype(cfg), twin.seed(cfg)
    nudged = None if trains else {"parameters": 0, "elements": 0}
    under_policy = policy_lowers(twin.plain(cfg))
    engine = standalone_engine(cfg, ctx, True, policy=under_policy or None)
    model = compile_model(cfg, engine.parallelize(model))
    optimizer = build_optimizer(cfg.optimizer, model.parameters())
    return (Copy(model=model, engine=engine, optimizer=optimizer, scheduler=torch_scheduler(optimizer, cfg),
                 clear_grads=True, input_dtype=getattr(torch, as_str(cfg.model.init_dtype))),
            {"dtype": dtype, "seed": sign_seed, "nudged": nudged,
             "engine": "mp_policy on one rank (FSDP2)" if under_policy or type(engine).__name__ == "StandaloneFSDP2"
             else "the standalone copy's"})


def nudge_twin(built: Tuple[Copy, Dict[str, Any]]) -> Tuple[Copy, Dict[str, Any]]:
    """The twin :func:`build_twin` made for this rank to train, nudged now (:func:`nudge`, in
    place; its parameters are the same objects its optimizer holds, and compiling wraps them
    without copying) and its perturbation counted in ``made["nudged"]``."""
    copy, made = built
    if made["nudged"] is None:
        made["nudged"] = nudge(copy.model, made["dtype"], made["seed"])
    return copy, made


def train_twin(cfg: Any, built: Tuple[Copy, Dict[str, Any]], book: Any, samples: List[Any],
               device: Any) -> Tuple[Dict[str, Observer], Any]:
    """Train the standalone copy's twin (``sweep.train.twin``) that :func:`build_copies` built:
    nudged (:func:`nudge_twin`), observed (:func:`twin_observers`, into ``book``), trained on
    ``samples`` (the standalone copy's, on ``device``) in its own random stream, so that the other
    copies draw as without it, then let go of (its traces stay on its observers). Returns
    ``(its observers, its record for the rank result)``."""
    twin_copy, made = nudge_twin(built)
    seen = twin_observers(cfg, twin_copy, book)
    began = time.perf_counter()
    with copy_random_stream(int(cfg.seed), device):
        losses = train(twin_copy, samples, cfg.train, seen.values())
    record = twin.record(losses, made["dtype"], made["seed"], made["nudged"], time.perf_counter() - began,
                         final_record(["twin"], {"twin": lambda: record_tensors(twin_copy.model, "buffer")}),
                         made["engine"])
    twin_copy = made = built = None  # its model and optimizer go before the other copies train
    twin.release()
    return seen, record


def build_copies(cfg: Any, job_dir: Path, ctx: RankContext, names: List[str], with_twin: bool = False,
                 twin_trains: bool = True) -> Tuple[Copy, Copy, Dict[str, Any], Optional[Tuple[Copy, Dict[str, Any]]]]:
    """Both copies of the job's model on this rank, in the report's order of RNG use
    (module docstring): built, the initial weights transferred (``weights.transfer``),
    prepared alike (``sweep.train.copies.prepare``), parallelised (the distributed copy
    if it trains here; the standalone one per ``baseline.precision``), compiled, each with
    its optimizer and lr scheduler. With ``baseline.framework``, rank 0 writes the initial
    weights, or the standalone-only process takes the other framework's (:func:`weights_across`).
    With ``with_twin``, also the standalone copy's twin (:func:`build_twin`), from the
    standalone model as it is before ``parallelize`` (nudged where ``twin_trains``). Returns ``(standalone, distributed,
    applied, twin)``: ``applied`` is what ``prepare`` did (``features_record``'s input), ``twin``
    ``(copy, its perturbation)`` or ``None``."""
    import torch

    device = ctx.device
    meta = as_str(cfg.model.init) == "meta"
    standalone = models.build(cfg, "torch").to(device)
    if meta:  # built without storage; sharded, then materialised (sweep.train.model_init)
        with torch.device("meta"):
            distributed = models.build(cfg, "torch")
    else:
        distributed = models.build(cfg, "torch").to(device)
    ckpt = JobDir(job_dir).checkpoint(f"rank_{ctx.rank}" if ctx.distributed else "standalone", ".pt")
    if not meta:
        copy_weights(standalone, distributed, cfg.weights.transfer, ckpt)
    applied = prepare(cfg, standalone)
    prepare(cfg, distributed)
    alone = standalone_engine(cfg, ctx, "standalone" in names)
    # the job's engine may have no torch implementation where only a standalone copy of
    # another framework's job trains here (baseline.framework)
    engine = load_engine(cfg, "torch", device=device, world_size=ctx.world) \
        if "distributed" in names or not crosses_frameworks(cfg) else alone
    if "distributed" in names:
        distributed = engine.parallelize(distributed)
    if meta:
        from sweep.train.model_init import full_state, materialize

        materialize(distributed, device, int(cfg.seed))
        initial_weights(standalone, full_state(distributed), cfg.weights.transfer, ckpt)
        copy_unsaved_buffers(standalone, distributed)
    across = weights_across(cfg, job_dir, ctx, names, standalone)
    if across is not None:
        applied["initial_weights"] = across
    twin = build_twin(cfg, ctx, standalone, twin_trains) if with_twin else None
    if "standalone" in names:
        standalone = alone.parallelize(standalone)
    input_dtype = getattr(torch, as_str(cfg.model.init_dtype))
    copies = []
    for model, eng, clear in ((standalone, alone, True), (distributed, engine, bool(cfg.zero_grad))):
        model = compile_model(cfg, model)
        optimizer = build_optimizer(cfg.optimizer, model.parameters())
        copies.append(Copy(model=model, engine=eng, optimizer=optimizer, scheduler=torch_scheduler(optimizer, cfg),
                           clear_grads=clear, input_dtype=input_dtype))
    return copies[0], copies[1], applied, twin


def copy_observers(cfg: Any, name: str, copy: Copy, device: Any, rank: int = 0, world: int = 1,
                   book: Any = None) -> Dict[str, Observer]:
    """The observers of one copy's training (``sweep.train.observers``), by role, in the
    order the step calls them: random draws, the collective ledger (kept for the
    distributed copy only, step 0 for the standalone one's dtypes), the dtypes, the gradients
    as they ran (``reductions.py``: norms before and after the reduction, the op that ran), the tensor
    trace and the module trace (a tracing rerun: ``compare.trace_until`` set;
    ``compare.module_trace``), the replica digests (distributed copy), the optimizer as it
    ran, the lrs (with a scheduler) and activation offload (``activation_offload``). ``book``: the
    tracing rerun's ``sweep.train.trace_book.TraceBook``, which the tensor trace records into."""
    until = cfg.compare.get("trace_until")
    until_step = until if until is not None else -1
    weights_step = max(until_step, int(cfg.compare.get("onset_until") or -1))  # weights only past until_step
    distributed = name == "distributed"
    found: Dict[str, Observer] = {"draws": RandomDraws(device)}
    if name == "standalone":  # the model's own forward: does it change its parameters in place?
        found["writes"] = ForwardWrites()
    if not distributed:  # trains as on one device: no process group in its steps (collectives counted)
        found["alone"] = SingleDevice()
    found["ledger"] = CollectiveLedger(copy.engine, until=max(until_step, 0), keep=distributed)
    targets = (lambda model: override_targets(model, cfg)) if cfg.mp_policy.get("overrides") else None
    found["dtypes"] = TorchDtypes(found["ledger"], targets=targets)
    found["grads"] = TorchGradients(distributed, until=0 if until is None else -1, rank=rank,
                                    world=world if distributed else 1, groups=_mesh_groups(cfg, rank, world),
                                    max_norm=cfg.train.clip_grad_norm, clears=copy.clear_grads,
                                    ledger=found["ledger"])
    if until is not None:
        found["trace"] = TorchTensorTrace(until_step, weights_step, book.sink(name) if book is not None else None,
                                          grads_read=bool(cfg.compare.get("grads_read", False)))
        if cfg.compare.get("module_trace", True):  # the tracing rerun: inside the model too
            found["modules"] = ModuleTrace(copy.model, until_step, found["trace"])
    if distributed:
        found["digests"] = ReplicaDigests(world)
    found["optimizer"] = OptimizerLog()
    found["lrs"] = LearningRates()  # with a scheduler or without: an engine may move the lr itself
    if cfg.activation_offload:
        found["offload"] = ActivationOffload()
    return found


def _traced_slices(model: Any, twin_traced: bool, twin_rows_from: int) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """The tracing rerun's slices by copy (``sweep.train.trace_book.TraceBook``): the
    distributed copy's dim-0 shards (``sweep.train.torch_tensors.shard_slices`` of ``model``),
    and the same rows of the twin where it is traced here and the parameters so sharded hold at
    least ``twin_rows_from`` elements (``compare.twin_rows_from``). The twin trains whole on
    every rank of the rerun; each rank then compares only those rows of it with the standalone
    copy's, and the shard group merges them (its envelope's figures are the whole tensors', bit
    for bit: maxima over the shards, sums in shard order, as the full capture takes them), and
    the standalone copy spools only those rows. Else every rank compares the whole twin."""
    from sweep.analysis.trace import canonical_name

    shards = shard_slices(model)
    sliced = sum(int(p.numel()) for n, p in model.named_parameters() if canonical_name(n) in shards)
    by_rows = twin_traced and bool(shards) and sliced >= int(twin_rows_from)
    return {"distributed": shards, **({"twin": shards} if by_rows else {})}


def twin_observers(cfg: Any, copy: Copy, book: Any = None) -> Dict[str, Observer]:
    """The twin's observers: as the standalone copy's, one device's view
    (``sweep.train.observers.single_device``); in a tracing rerun (``compare.trace_until`` set)
    the tensor trace (into ``book``'s sink ``twin``, as the other copies') and the module trace,
    as the other copies' (their differences from the standalone copy's are the envelope of each
    traced tensor and module)."""
    until = cfg.compare.get("trace_until")
    found: Dict[str, Observer] = {"alone": SingleDevice()}  # as the standalone copy: one device
    if until is None:
        return found
    weights_step = max(int(until), int(cfg.compare.get("onset_until") or -1))
    found["trace"] = TorchTensorTrace(int(until), weights_step, book.sink("twin") if book is not None else None,
                                      grads_read=bool(cfg.compare.get("grads_read", False)))
    if cfg.compare.get("module_trace", True):
        found["modules"] = ModuleTrace(copy.model, int(until), found["trace"])
    return found


def own_tensors(pairs: List[Any], device: Any) -> List[Any]:
    """numpy ``(inputs, targets)`` pairs as tensors on ``device``, each a copy of its own:
    ``from_numpy`` shares the array and on CPU ``.to`` copies nothing, so a forward that changes
    its input in place (``x.mul_(0.5)``) would change the data of every other copy given them."""
    import torch

    return [(torch.from_numpy(x).to(device, copy=True), torch.from_numpy(y).to(device, copy=True)) for x, y in pairs]


def run_job(cfg: Any, job_dir: Path | str, ctx: RankContext, phase: str = "both") -> None:
    """Train this process's copies for one job and write its result file (see
    ``sweep.train``). Everything a job's numbers depend on is (re)set here, so a job
    gives the same losses in a fresh process and in a reused one."""
    import torch

    t0 = time.perf_counter()
    job_dir = Path(job_dir)
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    if cfg.deterministic or torch.are_deterministic_algorithms_enabled():
        torch.use_deterministic_algorithms(bool(cfg.deterministic))
    names = phase_order(copy_order(cfg), phase, job_dir, ctx.rank, standalone_everywhere(cfg))
    apart = copy_order(cfg) == "separate"
    twin_trains = twin.trains(cfg, job_dir, phase, apart, ctx.rank, ctx.world)
    # built as every rank of the launch builds them (a policy standalone copy's mesh is collective)
    standalone, distributed, applied, twin_built = build_copies(
        cfg, job_dir, ctx, launch_order(copy_order(cfg), phase, job_dir),
        with_twin=twin.built_here(cfg, job_dir, phase, apart), twin_trains=twin_trains)
    global_np, local_np = rank_samples(cfg, ctx.rank)

    def to_device(pairs: List[Any]) -> List[Any]:
        return own_tensors(pairs, ctx.device)

    twin_trains = twin_built is not None and twin_trains
    here = "distributed" in names
    # in a tracing rerun the twin trains right after a standalone copy that trains first here: it
    # compares with that copy's spool and spools nothing (``rerun_book``'s ``twin_after``)
    twin_after = "standalone" if twin_trains and here and names[0] == "standalone" and \
        cfg.compare.get("trace_until") is not None else None
    book = rerun_book(cfg, job_dir, ctx.rank, names, lambda: shard_layout(distributed.model) if here else {},
                      slices=lambda: _traced_slices(distributed.model, twin_trains,
                                                    cfg.compare.get("twin_rows_from", TWIN_ROWS_FROM))
                      if here else {"distributed": {}},
                      gather=gather_rows(ctx.device), twin_traced=twin_trains, twin_after=twin_after)
    # before the twin trains: its gathers are collectives, and the twin's rank would hold the others
    # at them while it trains (the standalone copy trains on rank 0 meanwhile, not after it)
    probe = to_device(global_np[:1])[0] if twin.probed(cfg, job_dir, phase, apart, ctx.rank, ctx.world) else None
    initial = initial_record(cfg, ctx, standalone, distributed, probe) if here else None
    twin_done: List[Any] = [{}, None]  # the twin's observers and record, once it has trained
    pending, twin_built = ([twin_built] if twin_trains else []), None

    def twin_phase() -> None:
        if pending:
            twin_done[:] = train_twin(cfg, pending.pop(), book, to_device(global_np), ctx.device)

    if twin_after is None:
        twin_phase()
    copies = {"standalone": standalone, "distributed": distributed}
    samples = {"standalone": global_np, "distributed": local_np}
    ends = EndBuffers(names, {name: partial(record_tensors, copy.model, "buffer") for name, copy in copies.items()})
    seen = {name: copy_observers(cfg, name, copies[name], ctx.device, ctx.rank, ctx.world, book) for name in names}

    def runner(name: str) -> Any:
        def run() -> List[float]:
            with copy_random_stream(int(cfg.seed), ctx.device):
                losses = train(copies[name], to_device(samples[name]), cfg.train, seen[name].values())
            if name == "standalone" and names[-1] != name:
                release_training_state(copies[name])
            if name == twin_after:
                twin_phase()
            return losses
        return run

    losses, moved, seconds = train_phases(
        names, train={name: runner(name) for name in names},
        snapshot={"standalone": lambda: local_params(standalone.model),
                  "distributed": lambda: local_params(distributed.model)},
    )
    twin_seen, result_twin = twin_done
    result = rank_result(cfg, ctx, distributed, seen, losses, moved, applied, twin_seen, book)
    result.twin = result_twin
    if crosses_frameworks(cfg):  # the other copy traces in the other framework's process: hand this one over
        from sweep.train import trace_files

        trace_files.save(job_dir, f"rank_{ctx.rank}" if "distributed" in names else "standalone", "torch", seen)
        trace_files.save_twin(job_dir, "torch", twin_seen)
    result.initial = initial
    result.final = ends.record()
    write_rank_result(job_dir, phase, result, time.perf_counter() - t0 - sum(seconds.values()), seconds)


def release_training_state(copy: Copy) -> None:
    """Let go of a copy's gradients and optimizer state once it has trained and another copy
    trains after it (the standalone copy, ``order=standalone_first``): three more float32 tensors
    of each parameter's size under Adam, otherwise held beside the distributed copy at its peak.
    Its weights and buffers stay (read after: the ``moved`` check, the end buffers); what its
    observers recorded stays on them."""
    state = getattr(copy.optimizer, "state", None)  # (torch.optim's: a dict of tensors per parameter)
    if hasattr(state, "clear"):
        state.clear()
    for param in copy.model.parameters():
        param.grad = None
    from sweep.train.heap import give_back

    give_back()


def rank_result(cfg: Any, ctx: RankContext, distributed: Copy, seen: Dict[str, Dict[str, Observer]],
                losses: Dict[str, List[float]], moved: Dict[str, float], applied: Dict[str, Any],
                twin_seen: Optional[Dict[str, Observer]] = None, book: Any = None) -> RankResult:
    """This rank's ``RankResult`` from the copies' losses and what their observers
    recorded (``seen``: :func:`copy_observers` per copy that trained here; ``twin_seen``: the
    twin's, :func:`twin_observers`; ``book``: the tracing rerun's)."""
    import torch

    engine, here = distributed.engine, "distributed" in seen
    dist_seen = seen.get("distributed", {})
    info = dict(engine.info()) if here else {}
    lrs = {name: obs["lrs"].lrs for name, obs in seen.items() if "lrs" in obs and obs["lrs"].lrs}
    result = RankResult(
        rank=ctx.rank, world_size=ctx.world, framework="torch",
        versions={"torch": torch.__version__, **versions.ran(engine), **info.pop("versions", {})},
        standalone=losses.get("standalone"), distributed=losses.get("distributed"), moved=moved,
        dtypes_observed=dist_seen["dtypes"].observed if here else {},
        dtypes_observed_standalone=seen["standalone"]["dtypes"].observed if "standalone" in seen else {},
        zero_grad_effective=bool(cfg.zero_grad), engine_notes=list(info.get("notes") or engine.notes), engine=info,
        random_draws={name: obs["draws"].drew for name, obs in seen.items()},
        replica=replica_record(cfg, ctx, distributed.model, dist_seen["digests"].digests) if here else None,
        collectives=collectives_record(engine, dist_seen["ledger"].entries, ctx.rank, ctx.world, dist_seen.get("grads"),
                                       cfg, distributed.model) if here else None,
        reductions={name: gradients_record(obs.get("grads")) for name, obs in seen.items()},
        optimizer=optimizer_record(cfg, {name: obs["optimizer"].groups for name, obs in seen.items()},
                                   {name: obs["optimizer"] for name, obs in seen.items()}),
        features=dict(features_record(cfg, applied), lr=lrs or None,
                      **({"forward_writes": writes} if (writes := _forward_writes(seen)) else {}),
                      **({"stray_collectives": stray} if (stray := _stray(seen, twin_seen)) else {})),
    )
    traced(cfg, seen, result, twin_seen or {}, book)
    return result


def _stray(seen: Dict[str, Dict[str, Observer]], twin_seen: Optional[Dict[str, Observer]]) -> Dict[str, Any]:
    """``{copy: {op: calls}}``: the ``torch.distributed`` collectives the standalone copy or the
    twin called in its steps though it trains as on one device
    (``sweep.train.observers.single_device``); ``{}``: none."""
    observers = {name: obs.get("alone") for name, obs in seen.items()}
    observers["twin"] = (twin_seen or {}).get("alone")
    return {name: dict(o.called) for name, o in observers.items() if o is not None and o.called}


def _forward_writes(seen: Dict[str, Dict[str, Observer]]) -> Optional[List[str]]:
    """The parameters the standalone copy's first forward changed in place, where it trained
    here (``sweep.train.observers.forward_writes``); ``None`` where none or not read."""
    observer = seen.get("standalone", {}).get("writes")
    return list(observer.changed) if observer is not None and observer.changed else None


def replica_record(cfg: Any, ctx: RankContext, model: Any, digests: List[str]) -> Dict[str, Any]:
    """``RankResult.replica``: which shards this rank holds (``shard_key``; per tensor,
    ``tensors``: ``sweep.train.observers.replicas.torch_tensor_keys``), where it sits on the job's
    mesh (``init_device_mesh`` puts rank ``r`` at its row-major coordinates), and the digest of
    each tensor's local part after each step (``ReplicaDigests``)."""
    from sweep.train.observers.replicas import torch_tensor_keys

    shape = [int(n) for n in cfg.mesh.mesh_shape]
    replica = dict(shard_key(model), tensors=torch_tensor_keys(model), digests=digests)
    if ctx.distributed and int(np.prod(shape)) == ctx.world:
        replica.update(coords=[int(c) for c in np.unravel_index(ctx.rank, shape)],
                       mesh_dims=[str(d) for d in cfg.mesh.mesh_dim_names])
    return replica



def _mesh_groups(cfg: Any, rank: int, world: int) -> Dict[str, List[int]]:
    """This rank's group along each dim of the job's mesh (``sweep.analysis.collectives.dim_groups``),
    ``{}`` where the mesh is not the job's ranks."""
    from sweep.analysis.collectives import dim_groups

    shape = [int(n) for n in cfg.mesh.mesh_shape]
    return dim_groups(shape, list(cfg.mesh.mesh_dim_names), rank) if int(np.prod(shape)) == world else {}


def collectives_record(engine: TorchEngine, ledger: List[Dict[str, Any]], rank: int, world: int,
                       gradients: Any = None, cfg: Any = None, model: Any = None) -> Dict[str, Any]:
    """``RankResult.collectives``: the ledger folded per step
    (``sweep.analysis.collectives.ledger_summary``), the engine's expected contract or
    why it has none, FSDP2's divide factors of the first reduction, and the notes where
    the ledger departs from the contract (``ledger_notes``) and where the gradients' reduction
    as it ran does (``gradients``: the copy's ``TorchGradients``;
    ``sweep.train.observers.reductions.reduction_findings``)."""
    from sweep.analysis.collectives import ledger_notes, ledger_summary

    from sweep.engines.base import expected_for

    expected = expected_for(engine, cfg)  # the job's config, whatever the engine swapped in
    divide = [e for e in ledger if e["op"] == "divide_factors"]
    known = {}
    if cfg is not None:
        shape = [int(n) for n in cfg.mesh.mesh_shape]
        known = {"world_size": float(world), "grad_accum_steps": float(cfg.train.grad_accum_steps),
                 "the replicate degree": float(shape[0]) if len(shape) == 2 else None}
    ran = reduction_findings(gradients, ledger, expected, rank, world, known,
                             engine.carried_params(model) if model is not None else None,
                             engine.collectives_unchecked)
    out: Dict[str, Any] = {"expected": expected, "calls": ledger_summary(ledger, rank, world, expected),
                           "divide_factors": divide[0] if divide else None,
                           "notes": ledger_notes(ledger, expected, rank, world) + ran}
    if expected is None:
        out["unchecked"] = engine.collectives_unchecked
    return out


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
