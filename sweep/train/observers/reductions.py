"""The gradients as they ran: before the reduction, after it, and as the optimizer read them
(``RankResult.reductions``), for ``sweep.analysis.reductions``.

Per step, each copy records every parameter's gradient norm at three points (``norms``):

* ``pre``: this rank's local gradient, before any reduction (the engine's
  ``grad_capture``: hooks on the parameters for a plain module or DDP, FSDP2's
  ``foreach_reduce`` input, hyper-parallel's post-backward or gradient hooks; on MindSpore
  with data parallel, the step's ``local_grads``); the standalone copy reduces nothing, so
  its ``pre`` is its gradient;
* ``reduced``: after the reduction (``after_backward``), the full gradient's norm: a sharded
  engine's local shards are combined over the ranks (one all-reduce of the squares, each
  divided by the number of ranks holding the element), where any parameter is sharded: one
  collective for every step at once, after the last step (``end``);
* ``read``: as the optimizer's step read them (torch: ``Optimizer.register_step_pre_hook``;
  MindSpore: a forward pre-hook on the optimizer Cell, whose input is the gradients), so
  clipping, unscaling, or code in the engine's ``optimizer_step`` that touches the gradients
  (logging) is inside it.

On the steps it watches (step 0 of a job's run; none in its tracing rerun, whose findings
are the tensors and modules: the job reads the op that ran from its own run) the distributed
copy also gathers every rank's local gradients (outside the step's spans: the ledger does not
see it; on torch by all-to-all, each rank sent only the rows it holds after the reduction,
elsewhere by all-gather) and holds each reduced gradient against them
(``sweep.analysis.reductions.classify``: the mean over the ranks, or the op that ran
instead), ``found``. And at the start of each step after the first it reads the gradient
buffers the copy keeps (``held``: torch's ``param.grad``; an engine's own accumulation
buffers on MindSpore): a buffer that still holds the previous step's gradient where the copy
clears them means ``zero_grad`` had no effect.

It only looks: norms and copies are read out of live storage, hooks return ``None``, and its
collectives run outside the spans on copies, so the losses are the same bit for bit.
"""

from __future__ import annotations

import math
from typing import Any, ContextManager, Dict, List, Optional, Tuple

import numpy as np

from sweep.analysis.reductions import CHECK_ELEMENTS
from sweep.train.observers.base import Observer, Step


class _Gradients(Observer):
    """What both frameworks' observers share (module docstring). ``distributed``: this is
    the distributed copy (it reduces, and gathers on the watched steps); ``until``: the last
    step watched for the op that ran (-1: none); ``rank``/``world``; ``groups``: this
    rank's mesh-dim groups (``sweep.analysis.collectives.dim_groups``, ``{}`` where the mesh
    is not the job's ranks); ``max_norm``: ``train.clip_grad_norm`` (for the candidate that
    clips before the reduction); ``clears``: the step clears this copy's gradients."""

    def __init__(self, distributed: bool, until: int = 0, rank: int = 0, world: int = 1,
                 groups: Optional[Dict[str, List[int]]] = None, max_norm: Optional[float] = None,
                 clears: bool = True) -> None:
        self.distributed, self.until = distributed, max(int(until), -1)
        self.rank, self.world, self.groups = int(rank), int(world), dict(groups or {})
        self.max_norm = None if max_norm is None else float(max_norm)
        self.clears = clears
        self.norms: Dict[str, Any] = {"params": [], "pre": [], "reduced": [], "read": []}
        self.found: Dict[int, Dict[str, Dict[str, Any]]] = {}
        self.sizes: Dict[str, int] = {}
        self.graded: Optional[set] = None  # parameters that had a gradient in some step (None: every one)
        self.ungraded: Dict[int, set] = {}  # per step, the parameters without a gradient in it (where any)
        self.held: Optional[Dict[str, Any]] = None  # the first step whose buffers held the last step's gradients
        self._capture: Any = None
        self._pre: Dict[str, float] = {}
        self._reduced: Dict[str, float] = {}
        self._read: Optional[Dict[str, float]] = None
        self._holders: Dict[str, float] = {}
        self._squares: List[Any] = []  # per step: (reduced, read) squared norms of this rank's part

    def gathers(self, step: Step) -> bool:
        return self.distributed and self.world > 1 and step.index <= self.until

    def span(self, step: Step, name: str) -> Optional[ContextManager[Any]]:
        if name != "grads" or not self.distributed:
            return None
        self._capture = step.copy.engine.grad_capture(step.copy.model)
        if self._capture is not None and hasattr(self._capture, "values"):
            self._capture.values = self.gathers(step)  # else the norms alone (FSDP2: no copy of each gradient)
        return self._capture

    def _row(self, values: Dict[str, float]) -> List[float]:
        # a parameter without a gradient at that point contributes none: norm 0
        return [float(values.get(n, 0.0)) for n in self.norms["params"]]

    def _combine(self, squares: List[Dict[str, float]]) -> List[Dict[str, float]]:
        """The full gradients' squared norms from this rank's shards' (``squares``, one dict a
        point): summed over the ranks and divided by how many ranks hold each element, where
        some parameter is sharded (a collective every rank makes); else as they are."""
        names = self.norms["params"]
        if not (self.distributed and self.world > 1 and any(h < self.world for h in self._holders.values())):
            return squares
        flat = np.array([[part.get(n, 0.0) / self._holders.get(n, 1.0) for n in names] for part in squares],
                        np.float64)
        total = self.all_reduce(flat)
        return [{n: float(total[i, j]) for j, n in enumerate(names)} for i in range(len(squares))]

    def after_step(self, step: Step) -> None:
        read = self._read if self._read is not None else self._reduced
        self.norms["pre"].append([math.sqrt(max(v, 0.0)) for v in self._row(self._pre)])
        self._squares.append((self._reduced, read))  # combined over the ranks once, at the end
        self._read = None

    def end(self, steps: int) -> None:
        """The reduced and read norms of every step, from this rank's squares: where some
        parameter is sharded, one collective over every step at once (:meth:`_combine`), not one a
        step (it would cost each step a round trip; every rank trains the same steps, so every
        rank makes it alike)."""
        if not self._squares:
            return
        combined = self._combine([part for pair in self._squares for part in pair])
        for i in range(len(self._squares)):
            for key, values in (("reduced", combined[2 * i]), ("read", combined[2 * i + 1])):
                self.norms[key].append([math.sqrt(max(v, 0.0)) for v in self._row(values)])
        self._squares = []

    def note_held(self, step: Step, held: Optional[Dict[str, float]]) -> None:
        """At the start of step ``step.index`` (>= 1): ``held``, the norm of each gradient
        buffer the copy keeps, by parameter; a non-zero one where the copy clears its
        gradients is recorded once (:attr:`held`)."""
        if held is None or self.held is not None or step.index == 0 or not self.clears:
            return
        stale = {n: v for n, v in held.items() if v > 0.0}
        if stale:
            self.held = {"step": step.index, "norms": stale}

    def all_reduce(self, values: np.ndarray) -> np.ndarray:
        """The element-wise sum over every rank of ``values`` (float64)."""
        raise NotImplementedError

    def all_gather(self, values: np.ndarray) -> np.ndarray:
        """Every rank's ``values`` (1-D float64, the same length on every rank), stacked: ``(world, n)``."""
        raise NotImplementedError

    def check(self, step: Step, local: Dict[str, np.ndarray], reduced: Dict[str, np.ndarray],
              index: Dict[str, Tuple[int, Optional[int]]]) -> None:
        """The op that ran for each parameter of a watched step (``sweep.analysis.reductions
        .classify``) into :attr:`found`: ``local`` this rank's gradients before the reduction
        (full tensors), ``reduced`` after it (full, or this rank's dim-0 shard: ``index``, name ->
        ``(shard index, number of shards)``).

        One pass over the parameters in chunks (the same on every rank: full shapes), so a rank
        holds every rank's copy of one chunk at a time, never of the whole model. Each
        parameter is measured against the candidates as it passes, on the rows this rank holds
        after the reduction (``measure``: nothing relative to a scale), and decided once the
        step's largest mean is known (``decide``). With ``max_norm`` each rank's clipping
        coefficient comes first, from the ranks' own norms (one all-gather of a number each).
        Then each large gradient is read on every row but only some columns
        (``sweep.analysis.reductions.sampled``, about ``CHECK_ELEMENTS`` of each): the ops it
        decides are the whole tensor's, and the check read every element of a 42.6M-parameter
        model's gradients before (4 s of a passing job's 43 s of CPU, mesh dp2, 8 steps)."""
        from sweep.analysis.reductions import (candidates, clip_coefficients, decide, match_rel, measure, sampled,
                                               shard_rows)

        names = sorted(local)  # the same on every rank (the collectives below are made by all alike)
        if not names:
            return
        clip = None
        if self.max_norm is not None:
            mine = sum(float(np.dot(flat, flat)) for flat in (np.asarray(local[n], np.float64).ravel() for n in names))
            clip = clip_coefficients(np.sqrt(self.all_gather(np.array([mine]))[:, 0]), self.max_norm)
        self.sizes.update({n: int(np.asarray(local[n]).size) for n in names})
        local, reduced = sampled(local, reduced, self.check_elements)  # every row, some columns of a large one
        tol = match_rel(self.reduce_dtype)
        owns: Dict[str, float] = {}
        measured: Dict[str, Any] = {}
        table = self._rows_table(names, local, reduced, index)
        for chunk in self._gathered(names, local, table):
            for n, stacked in chunk.items():
                mean = stacked.mean(axis=0)  # (over this rank's rows only, where only those came)
                owns[n] = float(np.max(np.abs(mean))) if mean.size else 0.0
                if n not in reduced:  # a local gradient, and none after the reduction
                    continue
                after = np.asarray(reduced[n], np.float64)
                rows = shard_rows(stacked.shape[1:], after.shape, *index.get(n, (0, None))) \
                    if after.shape != stacked.shape[1:] else None
                if rows is not None:
                    stacked = stacked[:, rows]  # the candidates on this rank's rows only
                # (a scale from some rows only is at most the whole tensor's: ``measure`` then
                # measures the multiples where the whole one would, and more; ``decide`` reads them
                # at the whole tensor's scale below)
                measured[n] = measure(candidates(stacked, self.rank, self.groups, clip), after, tol, owns[n],
                                      *index.get(n, (0, None)))
        if table is not None and any(all(n in held for held in table) for n in names):
            # each exchanged parameter's max|mean| over the whole tensor: the largest over the ranks' rows (the
            # same test on every rank: the rows table is every rank's)
            most = self.all_gather(np.array([owns[n] for n in names], np.float64)).max(axis=0)
            owns = {n: float(most[i]) for i, n in enumerate(names)}
        largest = max(owns.values())
        out = {}
        for n in names:
            if n not in reduced:
                out[n] = {"op": "lost", "factor": None, "residual": None}
            elif measured[n] is None:
                out[n] = {"op": "unknown", "factor": None, "residual": None}
            else:
                out[n] = decide(measured[n], owns[n] if owns[n] >= 1e-3 * largest else largest, tol)
        self.found[step.index] = out

    check_elements = CHECK_ELEMENTS  # of each gradient, about as many as the check reads
    GATHER_CHUNK = 1 << 22  # elements a rank gathers at once (float64: 32 MiB of its own, x world gathered)
    exchanges = False  # whether :meth:`all_to_all` is there (torch's); else every chunk is gathered whole

    def _rows_table(self, names: List[str], local: Dict[str, np.ndarray], reduced: Dict[str, np.ndarray],
                    index: Dict[str, Tuple[int, Optional[int]]]) -> Optional[List[Dict[str, Tuple[int, int]]]]:
        """Every rank's dim-0 rows of each parameter after the reduction (``[{name: (start,
        stop)}]`` by rank; a parameter a rank holds no split of is left out of its dict), from
        one all-gather of a pair of numbers per parameter; ``None`` without :attr:`exchanges`."""
        from sweep.analysis.reductions import shard_rows

        if not self.exchanges:
            return None
        mine = np.full((len(names), 2), -1.0)
        for i, n in enumerate(names):
            if n in reduced:
                rows = shard_rows(np.shape(local[n]), np.shape(reduced[n]), *index.get(n, (0, None)))
                if rows is not None and np.ndim(local[n]):
                    mine[i] = (rows.start, rows.stop)
        table = self.all_gather(mine.ravel()).reshape(self.world, len(names), 2)
        return [{n: (int(table[r, i, 0]), int(table[r, i, 1])) for i, n in enumerate(names) if table[r, i, 0] >= 0}
                for r in range(self.world)]

    def _gathered(self, names: List[str], local: Dict[str, np.ndarray],
                  rows: Optional[List[Dict[str, Tuple[int, int]]]] = None) -> Any:
        """Every rank's ``local`` gradients of ``names``, a chunk of parameters at a time (one
        collective each, at most :data:`GATHER_CHUNK` elements of this rank's, a larger
        parameter alone): ``{name: (world, *shape) float64}`` per chunk. The parameters of a
        chunk whose every rank's rows are known (``rows``, :meth:`_rows_table`) travel by
        all-to-all instead (the rest of the chunk by its all-gather): each rank is sent only
        the rows of every rank's gradient it holds after the reduction (``(world, its rows,
        *shape[1:])``: a world-th of the bytes of an all-gather, at two ranks half)."""
        chunk: List[str] = []
        size = 0
        for n in [*names, None]:
            elements = int(np.asarray(local[n]).size) if n is not None else 0
            if chunk and (n is None or size + elements > self.GATHER_CHUNK):
                swap = [m for m in chunk if rows is not None and all(m in held for held in rows)]
                rest = [m for m in chunk if m not in swap]
                yield {**(self._exchanged(swap, local, rows) if swap else {}),
                       **(self._whole(rest, local) if rest else {})}
                chunk, size = [], 0
            if n is not None:
                chunk.append(n)
                size += elements

    def _whole(self, chunk: List[str], local: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """One chunk gathered whole: ``{name: (world, *shape)}``."""
        flat = np.concatenate([np.asarray(local[m], np.float64).ravel() for m in chunk])
        return self._split(self.all_gather(flat), {m: tuple(np.shape(local[m])) for m in chunk})

    def _exchanged(self, chunk: List[str], local: Dict[str, np.ndarray],
                   rows: List[Dict[str, Tuple[int, int]]]) -> Dict[str, np.ndarray]:
        """One chunk by all-to-all: every rank's rows of it that this rank holds, ``{name:
        (world, its rows, *shape[1:])}``; each rank sends rank ``r`` its own rows ``rows[r]``."""
        # (cut, then widened: each rank's rows once, not the whole tensor once per rank)
        parts = [np.concatenate([np.asarray(np.asarray(local[m])[held[m][0]:held[m][1]], np.float64).ravel()
                                 for m in chunk]) for held in rows]
        mine = rows[self.rank]
        return self._split(self.all_to_all(parts),
                           {m: (mine[m][1] - mine[m][0],) + tuple(np.shape(local[m])[1:]) for m in chunk})

    def _split(self, received: np.ndarray, shapes: Dict[str, Tuple[int, ...]]) -> Dict[str, np.ndarray]:
        """``received`` (``(world, n)``: each rank's tensors of ``shapes``, flat, in its order) as
        ``{name: (world, *shape)}`` views."""
        stacked, start = {}, 0
        for m, shape in shapes.items():
            count = int(np.prod(shape, dtype=np.int64))
            stacked[m] = received[:, start:start + count].reshape((self.world,) + shape)
            start += count
        return stacked

    def all_to_all(self, parts: List[np.ndarray]) -> np.ndarray:
        """Send ``parts[r]`` (1-D float64) to rank ``r``; returns what every rank sent this one,
        stacked ``(world, n)`` (every rank sends this one alike many). Only where :attr:`exchanges`."""
        raise NotImplementedError

    reduce_dtype: Optional[str] = None  # the dtype the gradients were reduced in, where the ledger saw it


class TorchGradients(_Gradients):
    """A torch copy's gradients as they ran (module docstring)."""

    def __init__(self, *args: Any, ledger: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ledger = ledger  # the copy's CollectiveLedger: the dtype its reductions ran in
        self._hooked: Any = None
        self._named: Any = None

    def _params(self, model: Any) -> List[Any]:
        """``[(canonical name, parameter)]`` of ``model``'s trainable parameters, named once per
        model (the engines keep their parameter objects across steps)."""
        from sweep.analysis.trace import canonical_name

        if self._named is None or self._named[0] is not model:
            self._named = (model, [(canonical_name(n), p) for n, p in model.named_parameters() if p.requires_grad])
        return self._named[1]

    def begin_step(self, step: Step) -> None:
        optimizer = step.copy.optimizer
        if self._hooked is not optimizer and hasattr(optimizer, "register_step_pre_hook"):
            model = step.copy.model
            optimizer.register_step_pre_hook(lambda opt, args, kwargs: self._on_read(model))
            self._hooked = optimizer
        self._stale = False
        if step.index > 0:
            held = {n: _norm_sq(p.grad) ** 0.5 for n, p in self._params(step.copy.model) if p.grad is not None}
            self._stale = any(v > 0 for v in held.values())
            self.note_held(step, held)

    def _on_read(self, model: Any) -> None:
        if self._read is None:  # the first optimizer.step() of the training step
            self._read = {n: _norm_sq(p.grad) for n, p in self._params(model) if p.grad is not None}

    def after_backward(self, step: Step) -> None:
        from sweep.train.torch_tensors import host_copy

        params = self._params(step.copy.model)
        if not self.norms["params"]:
            self.norms["params"] = [n for n, _ in params]
            self._holders = {n: _holders(p, self.world) for n, p in params}
        self._reduced = {n: _norm_sq(p.grad) for n, p in params if p.grad is not None}
        self.graded = set(self._reduced) | (self.graded or set())  # a parameter no loss reads has none
        if len(self._reduced) < len(params):  # one the loss reads from a later step on has none before it
            self.ungraded[step.index] = {n for n, _ in params if n not in self._reduced}
        captured = getattr(self._capture, "grads", None) if self._capture is not None else None
        if captured:
            from sweep.analysis.trace import canonical_name

            captured = {canonical_name(n): g for n, g in captured.items()}
        if captured and step.scaler is not None:  # captured before unscale_: as the loss scale left them
            scale = float(step.scaler.get_scale()) or 1.0
            captured = {n: g / scale for n, g in captured.items()}
        squares = getattr(self._capture, "squares", None) if self._capture is not None and not captured else None
        if captured:
            self._pre = {n: _norm_sq(captured[n]) if n in captured else self._reduced.get(n, float("nan"))
                         for n, _ in params}
        elif squares:
            from sweep.analysis.trace import canonical_name

            factor = 1.0 / (float(step.scaler.get_scale()) or 1.0) ** 2 if step.scaler is not None else 1.0
            squares = {canonical_name(n): v * factor for n, v in squares.items()}
            self._pre = {n: squares[n] if n in squares else self._reduced.get(n, float("nan")) for n, _ in params}
        else:
            self._pre = dict(self._reduced)
        if not self.gathers(step) or not captured or getattr(self, "_stale", False):
            return  # (gradients held over from the last step add to this one's: not one reduction's result)
        if self.ledger is not None and self.ledger.current is not None:
            dtypes = [e.get("dtype") for e in self.ledger.current.entries
                      if str(e.get("op", "")).startswith(("reduce_scatter", "all_reduce")) and e.get("dtype")]
            self.reduce_dtype = dtypes[0] if dtypes else None
        # after the reduction: this rank's dim-0 shard where the gradient is one (held against the
        # same rows of every candidate: no gather), else the full gradient (gathered where it is
        # sharded otherwise); the gathers follow the parameters' order, alike on every rank
        reduced: Dict[str, np.ndarray] = {}
        index: Dict[str, Tuple[int, Optional[int]]] = {}
        for n, p in params:
            grad = p.grad
            if grad is None:
                continue
            shard = _dim0_shard(grad)
            if n in captured and shard is not None:
                reduced[n], index[n] = host_copy(grad), shard
            else:
                reduced[n] = host_copy(grad.full_tensor() if hasattr(grad, "full_tensor") else grad)
        # every parameter the engine's reduction received, and those it never did (their gradient is local)
        local = {n: captured[n].numpy() if n in captured else reduced[n] for n, _ in params
                 if n in captured or n in reduced}
        self.check(step, local, reduced, index)

    def all_gather(self, values: np.ndarray) -> np.ndarray:
        import torch
        import torch.distributed as dist

        device = self._device()
        mine = torch.from_numpy(np.ascontiguousarray(values, np.float64)).to(device)
        out = torch.empty(self.world * mine.numel(), dtype=torch.float64, device=device)
        dist.all_gather_into_tensor(out, mine)
        return out.cpu().numpy().reshape(self.world, -1)

    exchanges = True  # torch.distributed's all_to_all_single (gloo, NCCL, HCCL)

    def all_to_all(self, parts: List[np.ndarray]) -> np.ndarray:
        import torch
        import torch.distributed as dist

        device = self._device()
        sizes = [int(p.size) for p in parts]
        mine = sizes[self.rank]
        send = torch.from_numpy(np.concatenate([np.ascontiguousarray(p, np.float64).ravel() for p in parts])).to(device)
        out = torch.empty(self.world * mine, dtype=torch.float64, device=device)
        dist.all_to_all_single(out, send, output_split_sizes=[mine] * self.world, input_split_sizes=sizes)
        return out.cpu().numpy().reshape(self.world, mine)

    def all_reduce(self, values: np.ndarray) -> np.ndarray:
        import torch
        import torch.distributed as dist

        tensor = torch.from_numpy(np.ascontiguousarray(values, np.float64)).to(self._device())
        dist.all_reduce(tensor)
        return tensor.cpu().numpy()

    def _device(self) -> Any:
        import torch
        import torch.distributed as dist

        backend = str(dist.get_backend()).lower()
        if backend in ("gloo", "mpi"):
            return torch.device("cpu")
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None and accelerator.is_available():
            return accelerator.current_accelerator()
        return torch.device("cpu")


def _norm_sq(tensor: Any) -> float:
    """The squared norm of ``tensor``'s local part (a ``DTensor``'s shard): accumulated in
    float32 (a float64 tensor's in float64), then squared in Python's float64. float32 is about
    10x faster than float64 here (3 ms against 35 ms per 4.7M elements on one CPU core, where a
    float64 norm converts every element first) and its rounding, about 1e-7 relative, is far
    below the 1e-4 at which two copies' norms are called apart (``NORM_REL``); a norm that
    overflows float32 (elements beyond about 1e19) is taken again in float64. A bfloat16 or
    float16 gradient is accumulated in float32, not its own dtype. ``torch.linalg.vector_norm``
    reads the tensor, it writes nothing."""
    from sweep.engines.collectives import squared_norm
    from sweep.train.torch_tensors import local_part

    # a gradient needs no detach (it takes none); a DTensor's detach would cost a dispatch a call
    return squared_norm(local_part(tensor))


def _dim0_shard(tensor: Any) -> Optional[Tuple[int, int]]:
    """``(index, shards)``: this rank's shard of ``tensor`` where it is a ``DTensor`` cut on dim 0
    over one mesh dim (``Shard(0)``, every other placement ``Replicate``: FSDP2, HSDP): its
    coordinate on that mesh dim and the dim's size (the rows are ``torch.chunk``'s,
    ``sweep.analysis.reductions.shard_rows``: the size settles which split); ``None`` for
    anything else (a plain tensor, another placement, another library's type)."""
    mesh = getattr(tensor, "device_mesh", None)
    placements = getattr(tensor, "placements", None)
    if not placements or not hasattr(mesh, "get_local_rank"):
        return None
    names = [type(p).__name__ for p in placements]
    cut = [i for i, name in enumerate(names) if name.startswith("Shard")]
    if len(cut) != 1 or any(name != "Replicate" for i, name in enumerate(names) if i != cut[0]) \
            or int(getattr(placements[cut[0]], "dim", -1)) != 0:
        return None
    return int(mesh.get_local_rank(mesh_dim=cut[0])), int(mesh.size(cut[0]))


def _holders(param: Any, world: int) -> float:
    """How many ranks hold each element of ``param``: the world over the product of the
    mesh sizes of its ``Shard`` placements (a plain tensor: every rank)."""
    mesh = getattr(param, "device_mesh", None)
    shards = 1
    for dim, placement in enumerate(getattr(param, "placements", None) or ()):
        if type(placement).__name__.startswith("Shard") and mesh is not None:
            shards *= int(mesh.size(dim))
    return float(max(world // max(shards, 1), 1))


class MindSporeGradients(_Gradients):
    """A MindSpore copy's gradients as they ran (module docstring): ``pre`` from the engine's
    ``grad_capture`` (hyper-parallel's hooks) or the step's ``local_grads``, ``reduced`` from
    its ``grads`` after ``reduce_grads`` (a sharding engine's local shards), ``read`` from a
    forward pre-hook on the optimizer Cell. ``full_shapes``: each parameter's full shape (the
    standalone net's), to place a shard."""

    def __init__(self, *args: Any, full_shapes: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.full_shapes = dict(full_shapes or {})
        self._hooked: Any = None
        self._names: List[str] = []

    def begin_step(self, step: Step) -> None:
        optimizer = step.copy.optimizer
        self._names = [p.name for p in optimizer.parameters]
        if self._hooked is not optimizer and hasattr(optimizer, "register_forward_pre_hook"):
            optimizer.register_forward_pre_hook(self._on_read)
            self._hooked = optimizer
        self._stale = False
        if step.index > 0:
            held = step.copy.engine.held_grads(step.copy.model)
            self._stale = bool(held) and any(v > 0 for v in held.values())
            self.note_held(step, held)

    def _on_read(self, cell: Any, inputs: Any) -> None:
        grads = inputs[0] if inputs and isinstance(inputs[0], (tuple, list)) else inputs
        if self._read is None and grads is not None and len(grads) == len(self._names):
            self._read = {n: _ms_sq(g) for n, g in zip(self._names, grads)}
        return None

    def after_backward(self, step: Step) -> None:
        names = self._names
        if not self.norms["params"]:
            self.norms["params"] = list(names)
            self._holders = {n: float(self.world) / self._shards(n, g) for n, g in zip(names, step.grads)}
        reduced = {n: np.asarray(g.asnumpy(), np.float64) for n, g in zip(names, step.grads)}
        self._reduced = {n: float(np.sum(v ** 2)) for n, v in reduced.items()}
        captured = getattr(self._capture, "grads", None) if self._capture is not None else None
        local = dict(captured) if captured else {n: np.asarray(g.asnumpy(), np.float64)
                                                  for n, g in zip(names, step.local_grads)}
        if not self.distributed:
            local = reduced
        self._pre = {n: float(np.sum(np.asarray(v, np.float64) ** 2)) for n, v in local.items()}
        if self.gathers(step) and not self._stale:
            self.reduce_dtype = str(step.grads[0].dtype).lower() if step.grads else None
            index = {n: (self.rank % self._shards(n, g), self._shards(n, g)) for n, g in zip(names, step.grads)}
            self.check(step, local, reduced, index)

    def _shards(self, name: str, grad: Any) -> int:
        full = tuple(self.full_shapes.get(name) or grad.shape)
        local = tuple(grad.shape)
        if local == full or not local or not local[0]:
            return 1
        return max(int(full[0]) // int(local[0]), 1)

    def after_step(self, step: Step) -> None:
        super().after_step(step)

    def all_reduce(self, values: np.ndarray) -> np.ndarray:
        from mindspore import Tensor, ops

        shape = values.shape
        out = ops.AllReduce()(Tensor(np.ascontiguousarray(values, np.float32).reshape(-1)))
        return np.asarray(out.asnumpy(), np.float64).reshape(shape)

    def all_gather(self, values: np.ndarray) -> np.ndarray:
        # an all-reduce of a zero buffer holding this rank's values in its row (MindSpore has no
        # all-gather of sub-groups on CPU; every element is one rank's value plus zeros: exact)
        buffer = np.zeros((self.world, values.size), np.float64)
        buffer[self.rank] = values
        return self.all_reduce(buffer)


def _ms_sq(grad: Any) -> float:
    return float(np.sum(np.asarray(grad.asnumpy(), np.float64) ** 2))


def gradients_record(observer: Optional[_Gradients]) -> Optional[Dict[str, Any]]:
    """``RankResult.reductions`` of one copy: its per-step ``norms``, and, for the distributed
    copy, ``found`` (step -> parameter -> the op that ran), ``sizes`` (elements per parameter)
    and ``held`` (the first step whose gradient buffers still held the last step's, or ``None``);
    ``None`` without an observer. Where the engine reduced gradients again in its clipping or
    optimizer step (by hand, ``sweep.analysis.reductions.later_reductions``), ``norms["reduced"]`` is left empty: those
    norms were taken after the backward, before that reduction, and ``read`` holds the result
    (``norms["by_hand"]``: ``True``)."""
    if observer is None:
        return None
    from sweep.analysis.reductions import later_reductions

    norms = observer.norms
    if later_reductions(getattr(getattr(observer, "ledger", None), "entries", None) or []):
        norms = dict(norms, reduced=[], by_hand=True)  # read before the engine's own reductions: not them
    return {"norms": norms, "found": {str(k): v for k, v in observer.found.items()},
            "sizes": observer.sizes, "held": observer.held}


def reduction_findings(observer: Optional[_Gradients], ledger: List[Dict[str, Any]], expected: Optional[Dict[str, Any]],
                       rank: int, world: int, known: Dict[str, Optional[float]],
                       carried: Optional[List[str]] = None, unseen: Optional[str] = None) -> List[Any]:
    """The distributed copy's notes on its gradient reductions as they ran, for
    ``RankResult.collectives["notes"]``: what each gradient became against the mean over the
    ranks (``sweep.analysis.reductions.reduction_notes``; not a gradient the engine reduced
    again in its optimizer step, by hand: the check saw it before that; nor a step whose
    micro-batches each reduced theirs, ``synced_micro_batches``), the calls that carried each one
    against the groups the mesh says it must cross (``coverage_notes``), clipping that read the
    gradients before the engine reduced them by hand (``clip_order_notes``), and parameters an
    engine's reducer leaves out of its list (``carried``: DDP's); ``unseen``: why the engine's
    calls are out of the ledger's sight (``collectives_unchecked``)."""
    from sweep.analysis.collectives import dim_groups, synced_micro_batches
    from sweep.analysis.reductions import Carriers, clip_order_notes, coverage_notes, later_reductions, reduction_notes

    if observer is None or world <= 1:
        return []
    groups = dict(observer.groups)
    if not groups and expected and int(np.prod(expected["mesh_shape"])) == world:
        groups = dim_groups(expected["mesh_shape"], expected["mesh_dim_names"], rank)
    from sweep.analysis.trace import canonical_name

    ledger = [dict(e, params=[canonical_name(n) for n in e["params"]]) if e.get("params") else e for e in ledger]
    calls = [e for e in ledger if e.get("params") is not None]
    # a gradient the engine reduced again in its clipping or optimizer step (by hand): the check held
    # it as the backward's reduction left it, not as it ended; the calls judge it (all of the step's
    # where a call names none)
    later = later_reductions(ledger)

    synced = synced_micro_batches(ledger, expected)  # each micro-batch reduced: not one reduction to hold

    def judged(step: Any, name: str) -> bool:
        names = later.get(int(step), set())
        return names is not None and name not in names and int(step) not in synced

    found = {step: {n: v for n, v in per.items() if judged(step, n)} for step, per in observer.found.items()}
    notes = reduction_notes(found, known, Carriers(groups, world, calls, unseen), observer.sizes)
    params = observer.norms["params"]
    sizes = observer.sizes or {}
    graded = [n for n in params if observer.graded is None or n in observer.graded]  # no reduction owed the rest
    owed = lambda step: [n for n in graded if n not in observer.ungraded.get(step, ())]  # noqa: E731
    notes += coverage_notes(ledger, expected, owed, sizes, rank, world)
    notes += clip_order_notes(ledger, observer.max_norm, groups, world, len(graded))
    if carried is not None:
        carried = [canonical_name(n) for n in carried]
        left = [n for n in params if n not in carried]
        if left:
            from sweep.records import note

            notes.append(note("N145", parameters=left))
    return notes
