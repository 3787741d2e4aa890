"""The tracing rerun's record of its traced copies' tensors, by copy name, and their
comparison with the reference copy (the standalone one): a :class:`TraceBook` per rank,
one sink per traced copy (``sweep.train.observers.tensor_trace`` records into it).

Two ways, ``compare.trace_capture``:

- ``staged`` (the default): nothing a copy records is held. Each tensor, as the copy
  records it, gets a line in ``ranks/tensors_<rank>.jsonl`` (its digest, ``sweep.train.digests``,
  and small statistics: ``absmax``, ``mean``, ``norm``, ``nonfinite``), and the pair statistics the rules read
  (``sweep.analysis.pairs.pair_stats``) are computed the moment both copies' tensors are at
  hand: the copies train one after the other in this process, so the one that trains first
  streams its tensors to a scratch spool (``ranks/spool_<rank>/<copy>/<step>.bin``, deleted
  step by step as they are compared and at the end) and the later one reads each back as
  it reaches the same step. Equal digests (and equal ones the step before, for a weight's
  update) spare the read. A row per pair goes to ``ranks/pairs_<rank>.jsonl``; the decisive
  tensors, the first that differs and the first beyond its rounding envelope, are captured
  whole (both copies, ``ranks/capture_<rank>.npz``) as the comparison finds them. Memory: the
  tensors of one step of the later copy's update (its weights the step before) and a few
  captured tensors; disk: the earlier copy's traced tensors, for as long as the later one
  has not reached them.
- ``full``: every traced tensor of every copy held in memory until the end, then compared
  (``sweep.analysis.pairs.pair_trace``): memory grows with the parameters times the traced
  steps. The rules and their findings are the same (``tests/integration/test_staged_trace.py``).

Where a copy's parameters are sharded on dim 0 (torch FSDP2: ``slices``), the staged trace
gathers nothing: each rank compares its own shard with the same rows of the reference and
the shard group merges the shards' statistics (``sweep.analysis.pairs.merge_partials``, one
small all-gather per kind and step), so every rank of the group holds the statistics of the
whole tensors, as if it had gathered them, and reads, spools and compares only its share.

Copies are compared by name with the reference (``reference``, the standalone copy), any
number of them, whichever order they train in; :meth:`TraceBook.pairs` gives one copy's
:data:`~sweep.analysis.pairs.PairTrace` against the reference.

The reference's twin (``twin``, ``sweep.train.twin``: trained first, its weights nudged by one
unit in the last place) is one more copy: its pairs with the reference are the rounding
envelope (``sweep.analysis.trace.envelope_bounds_in``), compared as the reference records its
tensors (whole; cut to this rank's rows only where the distributed copy records shards that
the reference is cut to, ``shard_rank``), never captured. The capture of the first tensor
beyond its envelope reads the envelope as measured so far (:meth:`TraceBook.bound_now`,
pooled per kind as ``envelope_bounds_in`` pools it): the whole window's where the reference
trained before the compared copy (``order=standalone_first``, the default: the twin's pairs
are complete first), else up to the compared step, and the book's summary says where a
capture so taken lies within the whole window's envelope. The findings themselves
(``sweep.analysis.trace.locate_in``) read the whole window's envelope either way.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from sweep.analysis.pairs import (BLOCK, PairRow, PairTrace, equal_stats, merge_partials, pair_stats, pair_trace,
                                  partial_stats)
from sweep.analysis.trace import (KINDS, UNBOUNDED, Search, envelope_bound, first_difference_in, kind_envelope,
                                  to_shard, to_shards)
from sweep.train.digests import of_bytes

CAPTURES = ("staged", "full")
Key = Tuple[int, str, str]  # (step, kind, name)
HELD = 4  # beyond-rounding candidates held whole per kind and step, until the step's rows decide


class Entries:
    """A copy's trace held whole (``full``): :attr:`entries`, one dict a step, ``{kind:
    {name: float32 ndarray}}`` and ``"order"`` (``sweep.analysis.trace``'s ``Trace``)."""

    def __init__(self, book: Any = None) -> None:
        self.book = book
        self.entries: List[Dict[str, Any]] = []

    def begin_step(self, index: int) -> None:
        self.entries.append({})

    def record(self, kind: str, items: Iterable[Tuple[str, np.ndarray]]) -> None:
        """Record ``kind``'s tensors of the current step (``items``: ``(name, float32
        ndarray)``, read one at a time); the kind is recorded even with no tensor."""
        self.entries[-1][kind] = dict(items)

    def order(self, kind: str, names: Sequence[str]) -> None:
        """The order the step produced ``kind``'s tensors in (the gradients as autograd produced them)."""
        self.entries[-1].setdefault("order", {})[kind] = list(names)

    def end(self) -> None:
        """The copy's last step is recorded."""


def digest(values: np.ndarray) -> Tuple[str, Dict[str, Any]]:
    """``(digest of the float32 bytes, sweep.train.digests, {"absmax", "mean", "norm", "nonfinite"})`` of a float32
    array: the digest is equal exactly where the values are equal bit for bit; the
    statistics are float64 (``nonfinite``: how many elements are NaN or infinite)."""
    flat = np.ascontiguousarray(values, np.float32).reshape(-1)
    sha = of_bytes(memoryview(flat).cast("B") if flat.size else b"")
    if not flat.size:
        return sha, {"absmax": 0.0, "mean": 0.0, "norm": 0.0, "nonfinite": 0}
    absmax = float(np.maximum(flat.max(), -flat.min()))
    nonfinite = 0 if np.isfinite(absmax) else int(flat.size - np.count_nonzero(np.isfinite(flat)))
    total = squares = 0.0
    for start in range(0, flat.size, BLOCK):  # float64 a block at a time (sweep.analysis.pairs.BLOCK)
        wide = flat[start:start + BLOCK].astype(np.float64)
        total += float(wide.sum())
        squares += float(np.dot(wide, wide))
    return sha, {"absmax": absmax, "mean": total / flat.size, "norm": float(np.sqrt(squares)),
                 "nonfinite": nonfinite}


class Spool:
    """A copy's tensors streamed to scratch files, one a step (``DIR/<step>.bin``, float32
    bytes one after another), read back by key; :meth:`drop_before` deletes the steps no
    longer needed, :meth:`close` all of them. :attr:`written`: bytes written."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.index: Dict[Key, Tuple[int, int, Tuple[int, ...], int]] = {}  # (step, offset, shape, first row)
        self._open: Dict[int, Any] = {}
        self.written = 0

    def _path(self, step: int) -> Path:
        return self.dir / f"{step}.bin"

    def write(self, key: Key, values: np.ndarray, first_row: int = 0) -> None:
        """Append ``values`` under ``key``: a whole tensor, or its rows from ``first_row`` on."""
        step = key[0]
        handle = self._open.get(step)
        if handle is None:
            handle = self._open[step] = open(self._path(step), "ab")
        flat = np.ascontiguousarray(values, np.float32).reshape(-1)
        self.index[key] = (step, handle.tell(), tuple(values.shape), int(first_row))
        if flat.size:
            handle.write(memoryview(flat).cast("B"))
        self.written += flat.nbytes

    def read(self, key: Key, rows: Optional[Tuple[int, int]] = None) -> np.ndarray:
        """The tensor written under ``key``, or its rows ``[r0, r1)`` (of the whole tensor: a
        slice written from a later first row is read relative to it; only those bytes are read)."""
        step, offset, shape, first = self.index[key]
        if step in self._open:
            self._open[step].flush()
        if rows is not None and len(shape):
            per_row = int(np.prod(shape[1:], dtype=np.int64)) * 4
            r0, r1 = rows[0] - first, rows[1] - first
            offset, shape = offset + r0 * per_row, (r1 - r0,) + tuple(shape[1:])
        out = np.empty(shape, np.float32)
        if out.size:
            with open(self._path(step), "rb") as handle:
                handle.seek(offset)
                handle.readinto(memoryview(out.reshape(-1)).cast("B"))
        return out

    def covers(self, key: Key, rows: Tuple[int, int]) -> bool:
        """Whether ``key`` was written with rows ``[r0, r1)`` of the whole tensor in it."""
        found = self.index.get(key)
        return found is not None and bool(len(found[2])) and found[3] <= rows[0] and rows[1] <= found[3] + found[2][0]

    def shape(self, key: Key) -> Optional[Tuple[int, ...]]:
        found = self.index.get(key)
        return found[2] if found else None

    def finish(self) -> None:
        """The copy wrote its last tensor: close the files."""
        for handle in self._open.values():
            handle.close()
        self._open = {}

    def drop_before(self, step: int) -> None:
        """Delete the files of the steps before ``step``."""
        for path in self.dir.glob("*.bin"):
            if int(path.stem) < step:
                path.unlink(missing_ok=True)

    def close(self) -> None:
        self.finish()
        shutil.rmtree(self.dir, ignore_errors=True)


class TraceBook:
    """One rank's traced copies (module docstring).

    Args:
        names: the copies this process trains, in the order they train.
        capture: ``staged`` or ``full`` (:data:`CAPTURES`).
        directory: where the staged files go (the rerun's ``ranks/``); unused by ``full``.
        rank: this rank (file names; a shard's slice of the reference, ``shard_rank``).
        layout: parameter name -> its number of dim-0 shards in the distributed copy,
            whose tensors are gathered (torch: ``sweep.train.torch_tensors.shard_layout``).
        shard_rank: where a copy records its local shards and the reference full tensors
            (MindSpore's hyper-parallel): the rank whose slice of the reference is compared
            (``sweep.analysis.trace.to_shard``); ``None``: full tensors on both sides.
        noise_floor: ``compare.noise_floor`` (which difference the capture holds).
        reference: the copy every other is compared with.
        slices: per copy (not the reference), the parameters it holds as dim-0 shards and
            records as such (staged): ``{copy: {name: {"offset", "rows" (this rank's first row
            and row count), "total" (the whole tensor's rows), "shards", "index" (this shard's),
            "group" (the shard group, for ``gather``)}}}`` (torch:
            ``sweep.train.torch_tensors.shard_slices``).
        gather: ``gather(group, rows)``: every shard's ``rows`` (a float64 array, the same
            shape on every rank of ``group``), stacked in shard order: the collective that
            merges the shards' statistics.
        twin: the copy whose pairs with the reference are its rounding envelope (module
            docstring); compared whole, without ``layout``.
        envelope: ``(compare.envelope_margin, the twin's nudge dtype)``: how the envelope is
            read (``sweep.analysis.trace.envelope_bounds_in``) for the capture of the first
            tensor beyond it; ``None``: not measured (nothing is captured as beyond it).
        shard_shapes: with ``shard_rank``, the shape of each tensor the distributed copy
            records on this rank (its local shards, by name): the rows of the reference and of
            its twin that the envelope compares (``sweep.analysis.trace.to_shard``).

    Raises:
        ValueError: an unknown ``capture``.
    """

    def __init__(self, names: Sequence[str], capture: str = "staged", directory: Optional[Path] = None,
                 rank: int = 0, layout: Optional[Dict[str, int]] = None, shard_rank: Optional[int] = None,
                 noise_floor: float = 0.0, reference: str = "standalone",
                 slices: Optional[Dict[str, Dict[str, Dict[str, Any]]]] = None,
                 gather: Optional[Callable[[Any, np.ndarray], np.ndarray]] = None, twin: str = "twin",
                 envelope: Optional[Tuple[float, str]] = None,
                 shard_shapes: Optional[Dict[str, Sequence[int]]] = None) -> None:
        if capture not in CAPTURES:
            raise ValueError(f"compare.trace_capture={capture!r}; allowed: {', '.join(CAPTURES)}")
        if capture == "staged" and directory is None:
            raise ValueError("a staged trace needs a directory for its files")
        self.names, self.capture, self.rank = list(names), capture, int(rank)
        self.layout, self.shard_rank = dict(layout or {}), shard_rank
        self.noise_floor, self.reference = float(noise_floor), reference
        self.slices = {copy: dict(found) for copy, found in (slices or {}).items() if found and capture == "staged"}
        self.gather = gather
        self.twin, self.envelope = twin, envelope if twin in self.names else None
        self.shard_shapes = {name: tuple(shape) for name, shape in (shard_shapes or {}).items()}
        self.dir = Path(directory) if directory is not None else None
        self.sinks: Dict[str, Any] = {}
        self.rows: Dict[str, Dict[Key, PairRow]] = {}
        self.by_step: Dict[str, Dict[Tuple[int, str], Dict[str, PairRow]]] = {}  # rows by (step, kind)
        self.pooled: Dict[str, float] = {}  # the twin's largest relative difference per kind so far
        self.bounded: Dict[Tuple[int, str], frozenset] = {}  # the names the envelope bounds per (step, kind)
        self.beyond: Dict[str, Dict[str, Any]] = {}  # per copy: the first beyond the envelope, as captured
        self.captured: Dict[str, np.ndarray] = {}
        self.same_as: Dict[str, str] = {}  # a capture's name -> the name it is stored under (one tensor, two roles)
        self.spooled_bytes = 0
        self._streams: Dict[str, Any] = {}

    # --- the sinks -------------------------------------------------------------------------------

    def sink(self, name: str) -> Any:
        """The sink copy ``name``'s tensor trace records into."""
        sink = Entries(self) if self.capture == "full" else StagedSink(self, name)
        self.sinks[name] = sink
        return sink

    def partners(self, name: str) -> List[str]:
        """The copies ``name`` is compared with when it trains: those trained before it that
        pair with it (the reference and every other copy pair; two others do not)."""
        before = self.names[:self.names.index(name)] if name in self.names else []
        return [p for p in before if self.reference in (p, name) and p != name]

    def last_comparer(self, name: str) -> Optional[str]:
        """The last copy (in training order) compared with copy ``name``'s spool: the one whose
        progress lets its files go."""
        later = [c for c in self.names if name in self.partners(c)]
        return later[-1] if later else None

    def sliced(self, copy: str, name: str) -> Optional[Dict[str, Any]]:
        """Where copy ``copy`` records parameter ``name`` as this rank's dim-0 shard: its slice."""
        return self.slices.get(copy, {}).get(name)

    def spool_rows(self, name: str) -> Optional[Tuple[int, int]]:
        """The rows of the reference's tensor ``name`` its spool needs: the shard's rows where
        every copy that reads it holds this one shard of it; ``None``: the whole tensor."""
        readers = [c for c in self.names if c != self.reference and self.reference in self.partners(c)]
        found = [self.sliced(c, name) for c in readers]
        if not found or any(f is None for f in found):
            return None
        spans = {(f["offset"], f["offset"] + f["rows"]) for f in found}
        return spans.pop() if len(spans) == 1 else None

    def spooled(self, name: str) -> bool:
        """Whether copy ``name`` streams its tensors to a spool: a copy that trains after it pairs with it."""
        after = self.names[self.names.index(name) + 1:] if name in self.names else []
        return any(self.reference in (name, later) for later in after)

    def stream(self, what: str) -> Any:
        """The line writer of ``ranks/<what>_<rank>.jsonl`` (opened on first use)."""
        handle = self._streams.get(what)
        if handle is None:
            assert self.dir is not None
            self.dir.mkdir(parents=True, exist_ok=True)
            handle = self._streams[what] = open(self.dir / f"{what}_{self.rank}.jsonl", "w")
        return handle

    def add_row(self, other: str, key: Key, row: PairRow) -> None:
        self.rows.setdefault(other, {})[key] = row
        step, kind, name = key
        self.by_step.setdefault(other, {}).setdefault((step, kind), {})[name] = row
        self.stream("pairs").write(json.dumps({"copy": other, "step": step, "kind": kind, "name": name, **row}) + "\n")

    # --- the comparison --------------------------------------------------------------------------

    def pairs(self, other: str) -> PairTrace:
        """Copy ``other`` against the reference: the :data:`~sweep.analysis.pairs.PairTrace`
        of the steps both recorded (``[]`` where either was not traced here)."""
        if self.reference not in self.sinks or other not in self.sinks:
            return []
        ours, theirs = self.sinks[self.reference], self.sinks[other]
        if self.capture == "full":
            standalone, distributed = ours.entries, theirs.entries
            if other == self.twin:  # the envelope: cut to the distributed copy's shards where it records them
                sharded = self.sinks.get("distributed")
                if self.shard_rank is not None and sharded is not None:
                    standalone = to_shards(standalone, sharded.entries, self.shard_rank)
                    distributed = to_shards(distributed, sharded.entries, self.shard_rank)
                    return pair_trace(standalone, distributed)
                return pair_trace(standalone, distributed, self.layout)  # the staged sums' order: by shard
            if self.shard_rank is not None:
                standalone = to_shards(standalone, distributed, self.shard_rank)
            return pair_trace(standalone, distributed, self.layout)
        rows = self.rows.get(other, {})
        out: PairTrace = []
        for step in range(min(len(ours.names), len(theirs.names))):
            a, b = ours.names[step], theirs.names[step]
            entry: Dict[str, Any] = {"ours": a, "theirs": b, "order": ours.orders[step], "pairs": {}}
            for kind in KINDS:
                if kind in a or kind in b:
                    shared = sorted(set(a.get(kind, [])) & set(b.get(kind, [])))
                    entry["pairs"][kind] = {n: rows[(step, kind, n)] for n in shared if (step, kind, n) in rows}
            out.append(entry)
        return out

    def measure(self, step: int, kind: str) -> None:
        """The twin's rows of ``step``'s ``kind`` are complete: pool them into the envelope
        measured so far (``sweep.analysis.trace.kind_envelope``, as ``envelope_bounds_in``
        pools: the largest per kind)."""
        rows = self.by_step.get(self.twin, {}).get((step, kind)) or {}
        if kind in UNBOUNDED or not rows:
            return
        largest, names = kind_envelope(rows)
        self.pooled[kind] = max(self.pooled.get(kind, 0.0), largest)
        self.bounded[(step, kind)] = frozenset(names)

    def bound_now(self, step: int, kind: str, name: str) -> Optional[float]:
        """The relative bound of tensor ``(step, kind, name)`` under the envelope measured so
        far (``sweep.analysis.trace.envelope_bound`` of the pooled largest); ``None``: no bound
        (the initial kinds, a tensor the twin's pairs do not bound, or not yet measured)."""
        if self.envelope is None or name not in self.bounded.get((step, kind), ()):
            return None
        margin, dtype = self.envelope
        return envelope_bound(self.pooled[kind], margin, dtype)

    def close(self) -> Dict[str, Any]:
        """Close the streams, delete the spools, write the captured tensors
        (``ranks/capture_<rank>.npz``). Returns what the staged trace wrote: ``{"capture",
        "spooled_bytes", "captured": [array names]}``, ``"same_as"`` (``{beyond name: first
        name}``: the first differing tensor is also the first beyond its envelope, stored once,
        under ``first``) and, where a tensor captured as the first
        beyond the envelope measured so far lies within the whole window's envelope,
        ``"notes"`` saying so (``{"capture": "full"}`` for ``full``)."""
        for handle in self._streams.values():
            handle.close()
        self._streams = {}
        for sink in self.sinks.values():
            if isinstance(sink, StagedSink):
                sink.close()
        if self.dir is not None:
            shutil.rmtree(self.dir / f"spool_{self.rank}", ignore_errors=True)
        if self.capture == "full":
            return {"capture": "full"}
        if self.captured and self.dir is not None:
            np.savez(self.dir / f"capture_{self.rank}.npz", **self.captured)
        out = {"capture": "staged", "spooled_bytes": self.spooled_bytes, "captured": sorted(self.captured)}
        if self.same_as:
            out["same_as"] = dict(sorted(self.same_as.items()))
        notes = []
        for copy, found in self.beyond.items():
            bound = self.bound_now(found["step"], found["kind"], found["name"])
            if bound is not None and not found["rel_diff"] > bound:
                notes.append(f"{copy}: {found['kind']} {found['name']} at step {found['step']} was captured as the "
                             f"first beyond the rounding envelope measured up to its step (rel {found['rel_diff']:.3g}"
                             f"); it lies within the whole window's envelope ({bound:.3g}), so "
                             "capture_<rank>.npz may not hold the first beyond it (the report's finding reads the "
                             "whole window's)")
        return dict(out, notes=notes) if notes else out


class StagedSink:
    """One copy's sink in a staged :class:`TraceBook` (its module docstring): per tensor its
    digest and statistics streamed, the tensor spooled where a later copy compares with it,
    compared with the partners' spooled tensors (:meth:`TraceBook.partners`) where it is the
    later one. :attr:`names` and :attr:`orders`: per step, the names recorded per kind and
    the orders given."""

    def __init__(self, book: TraceBook, name: str) -> None:
        self.book, self.name = book, name
        self.names: List[Dict[str, List[str]]] = []
        self.orders: List[Dict[str, List[str]]] = []
        self.digests: Dict[Key, str] = {}
        self.spool = Spool(book.dir / f"spool_{book.rank}" / name) if book.spooled(name) else None
        self.prev: Dict[str, np.ndarray] = {}  # this copy's weights one step back (for the update statistics)
        self.held: Dict[str, Dict[Key, Tuple[np.ndarray, np.ndarray]]] = {}  # by partner: candidates held whole
        self.decided: Dict[str, Dict[str, bool]] = {}  # by partner: first / beyond already captured or passed
        self.pending: Dict[str, Dict[str, Tuple[PairRow, List[int], List[int]]]] = {}  # shard rows, to merge
        self.local = frozenset(book.slices.get(name, {}))  # parameters this copy records as its shard

    def _stored(self, name: str, values: np.ndarray) -> Tuple[np.ndarray, int]:
        """What this copy digests and spools of ``values``: the reference, the rows the copies
        that read its spool compare (:meth:`TraceBook.spool_rows`); any other copy, all of it.
        Returns ``(rows, first row)``."""
        rows = self.book.spool_rows(name) if self.name == self.book.reference else None
        if rows is None or not values.ndim:
            return values, 0
        return values[rows[0]:rows[1]], rows[0]

    def begin_step(self, index: int) -> None:
        self.names.append({})
        self.orders.append({})
        for partner in self.book.partners(self.name):
            spool = self.book.sinks[partner].spool
            if spool is not None and index >= 1 and self.book.last_comparer(partner) == self.name:
                spool.drop_before(index - 1)  # its weights of step index - 1 are this step's "before"

    def order(self, kind: str, names: Sequence[str]) -> None:
        self.orders[-1][kind] = list(names)

    def record(self, kind: str, items: Iterable[Tuple[str, np.ndarray]]) -> None:
        step = len(self.names) - 1
        recorded = self.names[-1].setdefault(kind, [])
        partners = self.book.partners(self.name)
        for name, values in items:
            values = self._own_rows(name, np.require(values, np.float32, "C"))  # (ascontiguousarray: 0-d -> 1-d)
            key = (step, kind, name)
            recorded.append(name)
            stored, first_row = self._stored(name, values)
            sha, stats = digest(stored)
            self.digests[key] = sha
            line = {"copy": self.name, "step": step, "kind": kind, "name": name, "shape": list(stored.shape),
                    "digest": sha, **stats}
            if stored is not values or name in self.local:
                line["rows"] = self._rows_of(name, stored, first_row)
            self.book.stream("tensors").write(json.dumps(line) + "\n")
            if self.spool is not None:
                self.spool.write(key, stored, first_row)
            for partner in partners:
                self._compare(partner, key, values)
            if partners and kind in ("initial", "weight"):
                self.prev[name] = values
        for partner in partners:
            self._merge(partner, step, kind)
            self._decide(partner, step, kind)

    def copy_rows(self, name: str, rows: int) -> Optional[Tuple[int, int]]:
        """The rows ``[r0, r1)`` of the whole tensor ``name`` (``rows`` rows) that :meth:`_own_rows`
        keeps of it, for the tracer to copy only those out of the model (the twin: half its
        copies at two shards); ``None``: all of it."""
        found = self.book.sliced(self.name, name) if self.name != self.book.reference else None
        if found is None or rows != found["total"] or found["rows"] == found["total"]:
            return None
        return int(found["offset"]), int(found["offset"] + found["rows"])

    def _own_rows(self, name: str, values: np.ndarray) -> np.ndarray:
        """This rank's rows of a whole tensor that the book slices for this copy though it holds
        it whole (the twin, given the distributed copy's slices: each rank compares its rows with
        the reference's and the shard group merges them, as for the distributed copy's shards,
        instead of every rank comparing the whole tensor); anything else as it is."""
        found = self.book.sliced(self.name, name) if self.name != self.book.reference else None
        if found is None or not values.ndim or values.shape[0] != found["total"] or found["rows"] == found["total"]:
            return values
        return values[found["offset"]:found["offset"] + found["rows"]]

    def _rows_of(self, name: str, stored: np.ndarray, first_row: int) -> List[int]:
        """``[first row, rows]`` of the whole tensor a digest line covers."""
        found = self.book.sliced(self.name, name)
        return [found["offset"], found["rows"]] if found else [first_row, int(stored.shape[0])]

    def end(self) -> None:
        if self.spool is not None:
            self.spool.finish()
            self.book.spooled_bytes += self.spool.written

    def close(self) -> None:
        if self.spool is not None:
            self.spool.close()

    # --- against a partner's spooled tensors ----------------------------------------------------

    def _compare(self, partner: str, key: Key, values: np.ndarray) -> None:
        """The pair row of ``values`` (this copy's tensor ``key``) and the partner's; where one
        of them is a shard, the shard's partial row, merged at the kind's end (:meth:`_merge`)."""
        book, other_sink = self.book, self.book.sinks[partner]
        spool = other_sink.spool
        if spool is None or key not in spool.index:
            return
        step, kind, name = key
        ref_is_partner = partner == book.reference
        against = self.name if ref_is_partner else partner  # the copy the row is of, against the reference
        shard = book.sliced(against, name)  # the other copy holds this rank's shard of it
        rows = (shard["offset"], shard["offset"] + shard["rows"]) if shard else None
        prev_key = ((step - 1, "weight", name) if step > 0 else (0, "initial", name)) if kind == "weight" else None
        if prev_key is not None and not self._updates(against, name, spool, prev_key):
            prev_key = None
        shards = book.layout.get(name, 1)  # (the twin's rows too: the full capture's, :meth:`TraceBook.pairs`)
        mine = values if not (shard and not ref_is_partner) else values[rows[0]:rows[1]]
        if rows is not None and ref_is_partner and not spool.covers(key, rows):
            rows = None  # (a spool without those rows: compared whole, and then differs by shape)
        stored = spool.shape(key)
        equal = stored == mine.shape and other_sink.digests.get(key) == self.digests[key] and (
            prev_key is None or other_sink.digests.get(prev_key) == self.digests.get(prev_key))
        mine_prev = None
        if prev_key is not None:
            mine_prev = self.prev[name] if not (shard and not ref_is_partner) else self.prev[name][rows[0]:rows[1]]
        if equal:
            a = b = mine
            prev = None if prev_key is None else (mine_prev, mine_prev)
        else:
            theirs = spool.read(key, rows if ref_is_partner and shard else None)
            a, b = (theirs, mine) if ref_is_partner else (mine, theirs)
            prev = None
            if prev_key is not None:
                before = spool.read(prev_key, rows if ref_is_partner and shard else None)
                prev = (before, mine_prev) if ref_is_partner else (mine_prev, before)
        if not shard:
            a, b, prev = self._cut(against, name, a, b, prev)
        if shard:
            row = partial_stats(a, b, kind, prev)
            total = [int(shard["total"])] + [int(n) for n in np.shape(b)[1:]]
            self.pending.setdefault(partner, {})[name] = (row, total, total)
        else:
            row = equal_stats(a, kind, shards, None if prev is None else prev[0]) if equal else \
                pair_stats(a, b, kind, shards, prev)
            book.add_row(against, key, row)
        self._hold(partner, key, row, a, b)

    def _merge(self, partner: str, step: int, kind: str) -> None:
        """The kind's shard rows merged over each shard group: every rank of the group sends its
        partial rows (one all-gather, ``TraceBook.gather``) and keeps the whole tensors'
        (``sweep.analysis.pairs.merge_partials``). Every parameter of the copy's slices takes
        part (a zero row where this rank recorded none), so every rank sends the same shape."""
        book = self.book
        against = self.name if partner == book.reference else partner
        slices = book.slices.get(against)
        pending = self.pending.pop(partner, {})
        if not slices or kind not in ("initial", "grad", "weight") or book.gather is None:
            return
        groups: Dict[int, List[str]] = {}
        for name in sorted(slices):
            groups.setdefault(id(slices[name]["group"]), []).append(name)
        for names in groups.values():
            table = np.stack([_packed(pending.get(name)) for name in names])
            stacked = book.gather(slices[names[0]]["group"], table)  # (shards, names, fields)
            for i, name in enumerate(names):
                if name not in pending:
                    continue
                parts = [_unpacked(stacked[k, i]) for k in range(stacked.shape[0])]
                _, shape_a, shape_b = pending[name]
                book.add_row(against, (step, kind, name),
                             merge_partials([p for p in parts if p is not None], shape_a, shape_b, kind,
                                            int(slices[name]["shards"])))

    def _updates(self, against: str, name: str, spool: Spool, prev_key: Key) -> bool:
        """Whether the weight ``name`` takes part in the update statistics: both copies held it
        before any step with one shape (its ``initial`` row), and its step before is at hand."""
        row = self.book.rows.get(against, {}).get((0, "initial", name))
        return bool(row) and row["shape_a"] == row["shape_b"] and prev_key in spool.index and name in self.prev

    def _cut(self, against: str, name: str, a: np.ndarray, b: np.ndarray,
             prev: Optional[Tuple[np.ndarray, np.ndarray]]) -> Tuple[np.ndarray, np.ndarray, Any]:
        """The pair (and its step before) cut to the slice this rank's shard holds where a copy
        records its local shards and the reference full tensors (``shard_rank``: a sharding
        engine that does not gather, MindSpore's hyper-parallel): the reference's tensor to the
        shard's rows (``b``'s shape), or, for the twin (whole, as the reference), both to the
        rows the distributed copy holds (``shard_shapes``)."""
        book = self.book
        if book.shard_rank is None:
            return a, b, prev
        shape = book.shard_shapes.get(name) if against == book.twin else np.shape(b)
        if shape is None:
            return a, b, prev

        def cut(values: np.ndarray) -> np.ndarray:
            return to_shard(values, shape, book.shard_rank)

        return cut(a), cut(b), None if prev is None else (cut(prev[0]), cut(prev[1]))

    # --- the decisive tensors, captured whole ----------------------------------------------------

    def _hold(self, partner: str, key: Key, row: PairRow, a: np.ndarray, b: np.ndarray) -> None:
        """Hold a tensor pair whole while it may be the first that differs (beyond its rounding
        envelope, or at all) in its kind and step: the :data:`HELD` + 1 first in the
        reference's order (``sweep.analysis.trace``'s: by cause, else by name) are kept until
        the rows of the whole step decide (:meth:`_decide`). The twin's pairs are never held."""
        if self._envelope(partner):
            return
        decided = self._decided(partner)
        if decided["first"] and decided["beyond"] or not row["abs"] > self.book.noise_floor:
            return
        if decided["first"] and not self._maybe_beyond(key, row):
            return
        ours = self.book.sinks[partner] if partner == self.book.reference else self
        order = ours.orders[key[0]].get(key[1]) or []
        rank = {n: i for i, n in enumerate(order)}
        place = lambda k: (rank.get(k[2], len(rank)), k[2])  # noqa: E731
        held = self.held.setdefault(partner, {})
        if len(held) > HELD:
            worst = max(held, key=place)
            if place(worst) < place(key):
                return
            del held[worst]
        held[key] = (np.array(a, copy=True), np.array(b, copy=True))

    def _envelope(self, partner: str) -> bool:
        """Whether the pair with ``partner`` is the reference's with its twin (the envelope)."""
        return self.book.twin in (partner, self.name) and self.book.reference in (partner, self.name)

    def _decided(self, partner: str) -> Dict[str, bool]:
        """Which decisive tensors of the pair with ``partner`` are captured (or passed): the
        first beyond the envelope counts as passed where none is measured (nothing is called
        rounding then: the first difference is the decisive one)."""
        return self.decided.setdefault(partner, {"first": False, "beyond": self.book.envelope is None})

    def _maybe_beyond(self, key: Key, row: PairRow) -> bool:
        """Whether the pair ``row`` of ``key`` may lie beyond its envelope: its relative difference
        at its largest (over its own size; the near-zero rule only divides by a larger one)
        beyond the bound measured so far (which only grows), or no bound yet."""
        bound = self.book.bound_now(*key)
        if bound is None:
            return True
        return row["abs"] > bound * row["scale_a"] if row["scale_a"] > 0 else True

    def _decide(self, partner: str, step: int, kind: str) -> None:
        """The step's ``kind`` fully compared: where it holds the first difference (and the
        first beyond the envelope measured so far), keep those pairs as the capture; drop the
        rest. The twin's pairs instead add to the envelope (:meth:`TraceBook.measure`)."""
        if self._envelope(partner):
            self.book.measure(step, kind)
            return
        held = self.held.get(partner) or {}
        decided = self._decided(partner)
        if decided["first"] and decided["beyond"]:
            return
        against = self.name if partner == self.book.reference else partner
        ours = self if partner != self.book.reference else self.book.sinks[partner]
        rows = dict(self.book.by_step.get(against, {}).get((step, kind)) or {})
        entry = {"ours": {"grad": ours.names[step].get("grad", [])}, "theirs": {}, "order": ours.orders[step],
                 "pairs": {kind: rows}}
        for what in ("first", "beyond"):
            if decided[what]:
                continue
            bounds = None if what == "first" else {
                (0, kind, n): b for n in rows if (b := self.book.bound_now(step, kind, n)) is not None}
            found = first_difference_in([entry], Search(self.book.noise_floor), bounds)
            if found is None:
                continue
            decided[what] = True
            if what == "beyond":
                self.book.beyond[against] = dict(found, step=step)
            pair = held.get((step, kind, found["name"]))
            if pair is not None:
                base, first = (f"{against}/{role}/{kind}/{step}/{found['name']}" for role in (what, "first"))
                for copy, value in zip((self.book.reference, against), pair):
                    if what == "beyond" and f"{first}/{copy}" in self.book.captured:  # the first is beyond: once
                        self.book.same_as[f"{base}/{copy}"] = f"{first}/{copy}"
                    else:
                        self.book.captured[f"{base}/{copy}"] = value
        for key in [k for k in held if k[0] == step and k[1] == kind]:
            del held[key]


FIELDS = ("present", "same_shape", "updates", "has_chunk", "scale_a", "scale_b", "abs", "aa", "ab", "bb", "dd", "uu",
          "ee", "eu", "chunk", "grad", "rows_a", "rows_b")


def _packed(row: Optional[Tuple[PairRow, List[int], List[int]]]) -> np.ndarray:
    """One shard's partial row (``sweep.analysis.pairs.partial_stats``) as a float64 vector of
    :data:`FIELDS` for the shard group's all-gather (zeros: this rank recorded none)."""
    out = np.zeros(len(FIELDS))
    if row is None:
        return out
    r = row[0]
    values = {"present": 1.0, "same_shape": float(r["shape_a"] == r["shape_b"]), "updates": float("uu" in r),
              "has_chunk": float(r.get("chunk") is not None), "scale_a": r["scale_a"], "scale_b": r["scale_b"],
              "abs": r["abs"], "aa": r["aa"], "ab": r.get("ab", 0.0), "bb": r.get("bb", 0.0),
              "dd": r.get("dd", float("inf")),
              "uu": r.get("uu", 0.0), "ee": r.get("ee", 0.0), "eu": r.get("eu", 0.0),
              "chunk": r["chunk"] if r.get("chunk") is not None else 0.0, "grad": float("bb" in r),
              "rows_a": float(r["shape_a"][0]) if r["shape_a"] else -1.0,
              "rows_b": float(r["shape_b"][0]) if r["shape_b"] else -1.0}
    for i, field in enumerate(FIELDS):
        out[i] = values[field]
    return out


def _unpacked(vector: np.ndarray) -> Optional[PairRow]:
    """:func:`_packed`'s inverse: the partial row (``None`` for a shard that sent none)."""
    v = dict(zip(FIELDS, (float(x) for x in vector)))
    if not v["present"]:
        return None
    row: PairRow = {"shape_a": [1] if v["same_shape"] else [0], "shape_b": [1], "scale_a": v["scale_a"],
                    "scale_b": v["scale_b"], "abs": v["abs"], "aa": v["aa"], "dd": v["dd"],
                    "chunk": v["chunk"] if v["has_chunk"] and v["rows_b"] > 0 else None}
    if v["grad"]:
        row.update(ab=v["ab"], bb=v["bb"])
    if v["updates"]:
        row.update(uu=v["uu"], ee=v["ee"], eu=v["eu"])
    return row


def rerun_book(cfg: Any, job_dir: Path | str, rank: int, names: Sequence[str], layout: Any = None,
               shard_rank: Optional[int] = None, slices: Any = None,
               gather: Optional[Callable[[Any, np.ndarray], np.ndarray]] = None, twin_traced: bool = False,
               shard_shapes: Any = None, twin_after: Optional[str] = None) -> Optional[TraceBook]:
    """The :class:`TraceBook` of a tracing rerun (``compare.trace_until`` set; its files in the
    rerun's ``ranks/``, ``compare.trace_capture``), else ``None``. ``names``: the copies this
    process trains, in order; ``twin_traced``: the standalone copy's twin trains and is traced
    here (``sweep.train.twin``): its pairs are the envelope (``compare.envelope_margin``,
    ``sweep.train.twin.perturbation_dtype``). It trains first, or right after copy
    ``twin_after`` (the standalone copy where it trains first here: the twin then compares
    with the standalone copy's spool, which the distributed copy reads anyway, and spools
    nothing itself: half the scratch bytes). ``layout``, ``slices``, ``shard_shapes``: as
    the book's, or functions that give them (called only for a rerun). A copy whose partner
    trains in another process (``baseline.framework``: each hands its trace over in a file,
    ``sweep.train.trace_files``) is held whole (``full``)."""
    from sweep.layout import JobDir
    from sweep.train import crosses_frameworks, twin

    compare = cfg.compare
    if compare.get("trace_until") is None:
        return None
    capture = "full" if crosses_frameworks(cfg) else str(compare.get("trace_capture") or "staged")
    envelope = (float(compare.get("envelope_margin", 4.0)), twin.perturbation_dtype(cfg)) if twin_traced else None
    order = list(names)
    if twin_traced:
        order.insert(order.index(twin_after) + 1 if twin_after in order else 0, "twin")
    return TraceBook(order, capture, JobDir(job_dir).ranks, rank,
                     layout() if callable(layout) else layout, shard_rank, float(compare.noise_floor),
                     slices=slices() if callable(slices) else slices, gather=gather, envelope=envelope,
                     shard_shapes=shard_shapes() if callable(shard_shapes) else shard_shapes)
