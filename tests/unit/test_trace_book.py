"""The staged trace (``sweep.train.trace_book``): streamed digests, a spooled copy read back
step by step, pair statistics kept, the decisive tensors captured; the same findings as the
traces held whole (``full``), envelope included (the standalone copy's twin as a third copy),
whichever order the copies train in and however many there are."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sweep.analysis.trace import (Search, envelope_bounds, envelope_bounds_in, locate, locate_in, tensor_rows,
                                  tensor_rows_in, to_shards)
from sweep.train.trace_book import TraceBook, digest

NAMES = {"a.w": (6, 4), "a.b": (6,), "b.w": (3, 6), "b.b": (3,), "s": ()}
ORDER = ["b.w", "b.b", "a.w", "a.b", "s"]


def _trace(seed, steps, fault, shard=None):
    """Two copies' traces (standalone, other) of a few SGD steps; ``fault(step, grads, rng)``
    gives the other copy's gradients; ``shard``: the other copy records dim-0 shard
    ``shard`` of 2 of every matrix (a sharding engine that does not gather)."""
    rng = np.random.default_rng(seed)
    w = {n: rng.standard_normal(s).astype(np.float32) for n, s in NAMES.items()}
    wd = {n: v.copy() for n, v in w.items()}

    def cut(tensors):
        if shard is None:
            return {n: v.copy() for n, v in tensors.items()}
        return {n: (v[shard * (len(v) // 2):(shard + 1) * (len(v) // 2)].copy() if np.ndim(v) == 2 else v.copy())
                for n, v in tensors.items()}

    ours, theirs = [], []
    for t in range(steps):
        a = {"initial": {n: v.copy() for n, v in w.items()}, "initial_buffer": {"m": np.zeros(3, np.float32)}} \
            if t == 0 else {}
        b = {"initial": cut(wd), "initial_buffer": {"m": np.zeros(3, np.float32)}} if t == 0 else {}
        g = {n: (rng.standard_normal(np.shape(v)) * 0.1).astype(np.float32) for n, v in w.items()}
        gd = fault(t, {n: v.copy() for n, v in g.items()}, rng)
        for n in w:
            w[n] = (w[n] - 0.1 * g[n]).astype(np.float32)
            wd[n] = (wd[n] - 0.1 * gd[n]).astype(np.float32)
        a.update(buffer={"m": np.full(3, t, np.float32)}, grad=g, weight={n: v.copy() for n, v in w.items()},
                 order={"grad": ORDER})
        b.update(buffer={"m": np.full(3, t, np.float32)}, grad=cut(gd), weight=cut(wd), order={"grad": ORDER})
        ours.append(a)
        theirs.append(b)
    return ours, theirs


FAULTS = {
    "none": lambda t, g, r: g,
    "doubled from step 1": lambda t, g, r: {n: v * 2 for n, v in g.items()} if t >= 1 else g,
    "one gradient x1.5 from step 2": lambda t, g, r: dict(g, **{"a.w": g["a.w"] * 1.5}) if t >= 2 else g,
    "rounding, then beyond": lambda t, g, r: {
        n: (v * (1 + (1e-7 if t < 3 else 1e-2) * r.standard_normal(np.shape(v)))).astype(np.float32)
        for n, v in g.items()},
    "one shard at step 1": lambda t, g, r: dict(g, **{"a.w": np.concatenate([g["a.w"][:3], g["a.w"][3:] + 1e-3])})
    if t == 1 else g,
    "a NaN at step 1": lambda t, g, r: dict(g, **{"b.b": np.array([np.nan, 1, 2], np.float32)}) if t == 1 else g,
}


def _twin(ours, seed=99, rel=3e-7):
    """The standalone copy's twin: every tensor of ``ours`` (its initial weights too) moved by
    a relative ``rel`` x a fresh normal draw, in float32: rounding's size, nothing more."""
    rng = np.random.default_rng(seed)
    out = []
    for step in ours:
        entry = {"order": step["order"]}
        for kind, tensors in step.items():
            if kind != "order":
                entry[kind] = {n: (v * (1 + rel * rng.standard_normal(np.shape(v)))).astype(np.float32)
                               for n, v in tensors.items()}
        out.append(entry)
    return out


def _same(a, b):
    """Equal, NaN equal to NaN (a NaN gradient's update statistics are NaN in both)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True
    return a == b


def _feed(book, name, trace):
    sink = book.sink(name)
    for step in trace:
        sink.begin_step(len(sink.names) if hasattr(sink, "names") else len(sink.entries))
        for kind in ("initial", "initial_buffer", "buffer"):
            if kind in step:
                sink.record(kind, iter(step[kind].items()))
        sink.order("grad", step["order"]["grad"])
        for kind in ("grad", "weight"):
            sink.record(kind, iter(step[kind].items()))
    sink.end()


def _run(tmp_path, capture, order, traces, layout=None, shard_rank=None, envelope=None, shard_shapes=None):
    book = TraceBook(order, capture, tmp_path / capture / "-".join(order), rank=1, layout=layout,
                     shard_rank=shard_rank, envelope=envelope, shard_shapes=shard_shapes)
    for name in order:
        _feed(book, name, traces[name])
    pairs = {name: book.pairs(name) for name in order if name != "standalone"}
    return book, pairs


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("order", [("standalone", "distributed"), ("distributed", "standalone")])
def test_the_staged_trace_finds_what_the_full_one_does(tmp_path, fault, order):
    ours, theirs = _trace(3, 6, FAULTS[fault])
    traces = {"standalone": ours, "distributed": theirs}
    layout = {"a.w": 2, "b.w": 3}
    _, full = _run(tmp_path, "full", order, traces, layout)
    book, staged = _run(tmp_path, "staged", order, traces, layout)
    want = locate(ours, theirs, 5, Search(rank=1, known={"world_size": 2.0}, layout=layout))
    for pairs in (full["distributed"], staged["distributed"]):
        assert _same(locate_in(pairs, 5, Search(rank=1, known={"world_size": 2.0})), want)
        assert _same(tensor_rows_in(pairs), tensor_rows(ours, theirs))
    done = book.close()
    files = book.dir
    assert not (files / "spool_1").exists()  # the scratch spool is gone
    lines = [json.loads(line) for line in (files / "tensors_1.jsonl").read_text().splitlines()]
    assert {line["copy"] for line in lines} == {"standalone", "distributed"}
    assert all(len(line["digest"]) == 32 and line["nonfinite"] >= 0 for line in lines)
    assert done["spooled_bytes"] == sum(4 * int(np.prod(line["shape"])) for line in lines if line["copy"] == order[0])
    if "step" in want:  # the decisive tensors, both copies, captured whole
        with np.load(files / "capture_1.npz") as captured:
            first = f"distributed/first/{want['kind']}/{want['step']}/{want['name']}"
            a, b = captured[f"{first}/standalone"], captured[f"{first}/distributed"]
            assert np.array_equal(a, ours[want["step"]][want["kind"]][want["name"]], equal_nan=True)
            assert np.array_equal(b, theirs[want["step"]][want["kind"]][want["name"]], equal_nan=True)
            beyond = want.get("beyond_rounding")
            if beyond:  # stored once where the first is beyond: its name then points to the first's
                key = f"distributed/beyond/{beyond['kind']}/{beyond['step']}/{beyond['name']}/distributed"
                assert key in captured or done["same_as"][key] == f"{first}/distributed"
                assert (key in captured) != ((beyond["step"], beyond["kind"], beyond["name"])
                                              == (want["step"], want["kind"], want["name"]))


def test_a_copy_that_records_its_shards_is_compared_with_the_reference_cut_to_them(tmp_path):
    ours, theirs = _trace(5, 4, FAULTS["one gradient x1.5 from step 2"], shard=1)
    want = locate(to_shards(ours, theirs, 1), theirs, 3, Search(rank=1))
    assert want["name"] == "a.w" and want["step"] == 2
    _, full = _run(tmp_path, "full", ("standalone", "distributed"), {"standalone": ours, "distributed": theirs},
                   shard_rank=1)
    _, staged = _run(tmp_path, "staged", ("standalone", "distributed"), {"standalone": ours, "distributed": theirs},
                     shard_rank=1)
    assert locate_in(full["distributed"], 3, Search(rank=1)) == want \
        == locate_in(staged["distributed"], 3, Search(rank=1))


def test_any_number_of_copies_is_compared_with_the_reference(tmp_path):
    """A third copy (another distributed one) is compared with the reference as the
    distributed one is, in one pass; the rows give the difference's size relative to the
    standalone tensor for each tensor and step."""
    ours, theirs = _trace(7, 4, FAULTS["doubled from step 1"])
    _, other = _trace(7, 4, lambda t, g, r: {n: (v * (1 + 1e-7)).astype(np.float32) for n, v in g.items()})
    traces = {"standalone": ours, "other": other, "distributed": theirs}
    book, staged = _run(tmp_path, "staged", ("standalone", "other", "distributed"), traces)
    assert locate_in(staged["distributed"], 3) == locate(ours, theirs, 3)
    assert locate_in(staged["other"], 3) == locate(ours, other, 3)
    row = staged["other"][2]["pairs"]["weight"]["a.w"]
    a, b = ours[2]["weight"]["a.w"].astype(np.float64), other[2]["weight"]["a.w"].astype(np.float64)
    assert row["abs"] == np.max(np.abs(a - b)) and row["scale_a"] == np.max(np.abs(a))
    assert row["diff_norm"] == pytest.approx(np.linalg.norm(a - b)) and row["norm_a"] == pytest.approx(np.linalg.norm(a))
    assert not (book.dir / "spool_1").exists() or not any((book.dir / "spool_1").rglob("0.bin"))


ENVELOPE = (4.0, "float32")  # (compare.envelope_margin, the twin's nudge dtype)


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("order", [("twin", "standalone", "distributed"), ("twin", "distributed", "standalone"),
                                   ("standalone", "twin", "distributed")])
def test_the_twin_is_the_envelope_of_the_staged_trace_as_of_the_full_one(tmp_path, fault, order):
    """The standalone copy's twin, trained first or right after it, is a third copy of the book: its pairs with
    the standalone copy give every tensor's envelope (bounds, envelope ratio, the first
    beyond it, the update onset's envelope) as the traces held whole do, bit for bit; the
    first tensor beyond its envelope is captured whole, never a twin's tensor."""
    ours, theirs = _trace(3, 6, FAULTS[fault])
    twin = _twin(ours)
    traces = {"standalone": ours, "distributed": theirs, "twin": twin}
    layout = {"a.w": 2, "b.w": 3}
    _, full = _run(tmp_path, "full", order, traces, layout, envelope=ENVELOPE)
    book, staged = _run(tmp_path, "staged", order, traces, layout, envelope=ENVELOPE)
    want = locate(ours, theirs, 5, Search(rank=1, known={"world_size": 2.0}, layout=layout), twin=twin)
    bounds = envelope_bounds(ours, twin, *ENVELOPE)
    for pairs in (full, staged):
        assert _same(envelope_bounds_in(pairs["twin"], *ENVELOPE), bounds)
        assert _same(locate_in(pairs["distributed"], 5, Search(rank=1, known={"world_size": 2.0}), twin=pairs["twin"]),
                     want)
        assert _same(tensor_rows_in(pairs["distributed"], envelope_bounds_in(pairs["twin"], *ENVELOPE)),
                     tensor_rows(ours, theirs, bounds))
    done = book.close()
    with np.load(book.dir / "capture_1.npz") if (book.dir / "capture_1.npz").exists() else _empty() as captured:
        assert not any("/twin" in key or key.startswith("twin/") for key in captured)
        beyond = want.get("beyond_rounding") or (want if want.get("bound") is not None else None)
        key = f"distributed/beyond/{beyond['kind']}/{beyond['step']}/{beyond['name']}/distributed" if beyond else ""
        held = key in captured or done.get("same_as", {}).get(key) in captured  # the first is beyond: stored once
        if beyond and order[-1] == "distributed":  # the twin's pairs complete first: the capture reads its whole window
            assert held
        elif beyond:  # else as measured so far, and the summary says where that is not the whole window's
            assert held or any("within the whole window's envelope" in n for n in done.get("notes", []))
    if fault == "rounding, then beyond":  # the case the envelope decides: rounding first, a fault later
        assert want["bound"] >= want["rel_diff"] and want["beyond_rounding"]["step"] == 3


class _empty(dict):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_without_a_twin_nothing_is_captured_as_within_an_envelope(tmp_path):
    ours, theirs = _trace(3, 6, FAULTS["rounding, then beyond"])
    book, staged = _run(tmp_path, "staged", ("standalone", "distributed"), {"standalone": ours, "distributed": theirs})
    found = locate_in(staged["distributed"], 5)
    assert found["envelope"] == "not measured" and "beyond_rounding" not in found and found["step"] == 0
    book.close()
    with np.load(book.dir / "capture_1.npz") as captured:
        assert not any("/beyond/" in key for key in captured)


def test_the_twin_of_a_copy_that_records_its_shards_is_cut_to_them(tmp_path):
    """Where the distributed copy records its local shards and the reference full tensors
    (MindSpore's hyper-parallel), the twin's pairs are cut to the same rows, full and staged
    (``shard_shapes``: the shapes the distributed copy records)."""
    ours, theirs = _trace(5, 4, FAULTS["one gradient x1.5 from step 2"], shard=1)
    twin = _twin(ours)
    want = locate(to_shards(ours, theirs, 1), theirs, 3, Search(rank=1), twin=to_shards(twin, theirs, 1))
    shapes = {n: np.shape(v) for kind in ("initial", "initial_buffer") for n, v in theirs[0][kind].items()}
    for order in (("twin", "standalone", "distributed"), ("twin", "distributed", "standalone")):
        traces = {"standalone": ours, "distributed": theirs, "twin": twin}
        for capture in ("full", "staged"):
            _, pairs = _run(tmp_path / capture, capture, order, traces, shard_rank=1, envelope=ENVELOPE,
                            shard_shapes=shapes)
            assert _same(locate_in(pairs["distributed"], 3, Search(rank=1), twin=pairs["twin"]), want)
            assert pairs["twin"][0]["pairs"]["initial"]["a.w"]["shape_a"] == [3, 4]


def test_equal_copies_are_compared_by_digest_without_reading_the_spool(tmp_path, monkeypatch):
    from sweep.train import trace_book

    ours, theirs = _trace(11, 3, FAULTS["none"])
    reads = []
    monkeypatch.setattr(trace_book.Spool, "read", lambda self, key: reads.append(key))
    _, staged = _run(tmp_path, "staged", ("standalone", "distributed"), {"standalone": ours, "distributed": theirs})
    assert reads == []
    assert locate_in(staged["distributed"], 2) == locate(ours, theirs, 2)


def test_a_digest_is_exact_and_its_statistics_count_what_is_not_finite():
    values = np.array([[1.0, -3.0], [np.inf, np.nan]], np.float32)
    sha, stats = digest(values)
    assert sha == digest(values.copy())[0] != digest(np.array([[1.0, -3.0], [np.inf, 0.0]], np.float32))[0]
    assert stats["nonfinite"] == 2 and np.isnan(stats["absmax"])  # a NaN anywhere: as max|.| reads it
    assert digest(np.array([0.0, 3.0, 4.0], np.float32))[1] == {"absmax": 4.0, "mean": pytest.approx(7 / 3),
                                                                "norm": 5.0, "nonfinite": 0}


def test_an_unknown_capture_is_refused(tmp_path):
    with pytest.raises(ValueError, match="compare.trace_capture='all'"):
        TraceBook(["standalone", "distributed"], "all", tmp_path)


SHARDED = {"a.w": 2, "b.w": 2}


def _shard(values, name, index):
    """Rank ``index``'s dim-0 shard of ``values`` (``torch.chunk``'s split in 2)."""
    if name not in SHARDED:
        return values
    size = -(-values.shape[0] // 2)
    return values[index * size:(index + 1) * size]


def _slices(index):
    out = {}
    for name, shards in SHARDED.items():
        rows = NAMES[name][0]
        size = -(-rows // shards)
        start = min(index * size, rows)
        out[name] = {"offset": start, "rows": min(size, rows - start), "total": rows, "shards": shards, "index": index,
                     "group": "dp"}
    return out


def _two_ranks(tmp_path, fault, twin_rows=False, order=("twin", "standalone", "distributed")):
    """Two ranks (threads) of one book each, recording the distributed copy's dim-0 shards of
    the sharded parameters (and, ``twin_rows``, only the same rows of the twin, which trains
    whole), the copies trained in ``order``, merging their statistics over a played all-gather:
    ``({rank: (distributed pairs, twin pairs)}, {rank: the closed book's summary}, (ours,
    theirs, twin))``."""
    import threading

    ours, theirs = _trace(3, 6, FAULTS[fault])
    twin = _twin(ours)
    barrier, shared = threading.Barrier(2), {}

    def gather(group, rows, index):
        shared[index] = rows
        barrier.wait()
        out = np.stack([shared[0], shared[1]])
        barrier.wait()
        return out

    found, done = {}, {}

    def rank(index):
        slices = {"distributed": _slices(index), **({"twin": _slices(index)} if twin_rows else {})}
        book = TraceBook(list(order), "staged", tmp_path / f"r{index}-{twin_rows}-{order[0]}",
                         rank=index, slices=slices, gather=lambda g, r: gather(g, r, index), envelope=ENVELOPE)
        local = [{kind: ({n: _shard(v, n, index) for n, v in step[kind].items()} if kind in ("initial", "grad", "weight")
                         else step[kind]) for kind in step} for step in theirs]
        for copy in order:
            _feed(book, copy, {"twin": twin, "standalone": ours, "distributed": local}[copy])
        found[index] = (book.pairs("distributed"), book.pairs("twin"))
        done[index] = book.close()

    threads = [threading.Thread(target=rank, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return found, done, (ours, theirs, twin)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_shards_compared_apart_and_merged_give_the_whole_tensors_findings(tmp_path, fault):
    """Two ranks, each recording its dim-0 shards of the distributed copy's parameters (FSDP2
    without a gather), merge their statistics in one all-gather per kind and step: each finds
    what the whole tensors give, bit for bit, and spools only its rows of the reference."""
    found, done, (ours, theirs, twin) = _two_ranks(tmp_path, fault)
    for index in (0, 1):
        want = locate(ours, theirs, 5, Search(rank=index, known={"world_size": 2.0}, layout=SHARDED), twin=twin)
        pairs, envelope = found[index]
        assert _same(locate_in(pairs, 5, Search(rank=index, known={"world_size": 2.0}), twin=envelope), want)
        assert _same(tensor_rows_in(pairs), tensor_rows(ours, theirs))
        full = sum(4 * int(np.prod(v.shape)) for step in ours for kind in step if kind != "order"
                   for v in step[kind].values())
        assert done[index]["spooled_bytes"] < 2 * full  # the twin whole (its envelope is the whole tensors')
        assert done[index]["spooled_bytes"] - full < full  # and only this rank's rows of the sharded parameters


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("order", [("twin", "standalone", "distributed"), ("standalone", "twin", "distributed")])
def test_a_twin_compared_by_rows_and_merged_is_the_envelope_of_the_whole_tensors(tmp_path, fault, order):
    """The twin trains whole on every rank of a rerun; given the distributed copy's slices,
    each rank compares only those rows of it (and spools only them, and the standalone copy
    only its rows), and the merged rows are the whole tensors' bit for bit: the same bounds as
    the twin's whole traces give, the same envelope pairs as a full capture laid out by shard,
    the same findings as a whole twin; trained right after the standalone copy, it spools
    nothing (it compares with the standalone copy's spool, which the distributed copy reads)."""
    whole, whole_done, _ = _two_ranks(tmp_path, fault)
    rows, rows_done, (ours, theirs, twin) = _two_ranks(tmp_path, fault, twin_rows=True, order=order)
    layout = {name: shards for name, shards in SHARDED.items()}
    _, full = _run(tmp_path, "full", ("twin", "standalone", "distributed"),
                   {"standalone": ours, "distributed": theirs, "twin": twin}, layout, envelope=ENVELOPE)
    for index in (0, 1):
        pairs, envelope = rows[index]
        assert _same(envelope, full["twin"])  # the rows a full capture takes, bit for bit
        assert _same(envelope_bounds_in(envelope, *ENVELOPE), envelope_bounds(ours, twin, *ENVELOPE))
        want = locate(ours, theirs, 5, Search(rank=index, known={"world_size": 2.0}, layout=SHARDED), twin=twin)
        assert _same(locate_in(pairs, 5, Search(rank=index, known={"world_size": 2.0}), twin=envelope), want)
        assert _same(locate_in(pairs, 5, Search(rank=index, known={"world_size": 2.0}), twin=envelope),
                     locate_in(whole[index][0], 5, Search(rank=index, known={"world_size": 2.0}),
                               twin=whole[index][1]))
        assert rows_done[index]["spooled_bytes"] < whole_done[index]["spooled_bytes"]
        if order[0] == "standalone":  # no twin rows: about half what the twin-first order spools
            _, first_done, _ = _two_ranks(tmp_path / "first", fault, twin_rows=True)
            assert 0 < rows_done[index]["spooled_bytes"] < 0.6 * first_done[index]["spooled_bytes"]


def test_a_capture_read_against_the_envelope_so_far_says_where_the_whole_window_holds_it(tmp_path):
    """Where the distributed copy trains before the standalone one, the twin's pairs grow
    alongside the comparison: a tensor beyond the envelope measured up to its step may lie
    within the whole window's. The finding reads the whole window's (nothing beyond it); the
    capture taken on the way is named in the book's summary as such, never passed off as the
    first beyond the envelope."""
    ours, theirs = _trace(3, 6, lambda t, g, r: dict(g, **{"a.w": (g["a.w"] * (1 + 1e-4)).astype(np.float32)})
                          if t == 1 else g)
    twin = _twin(ours)
    for step in twin[4:]:  # the twin's rounding shows late: a rare event at step 4
        step["grad"]["a.w"] = (step["grad"]["a.w"] * (1 + 1e-3)).astype(np.float32)
    traces = {"standalone": ours, "distributed": theirs, "twin": twin}
    want = locate(ours, theirs, 5, twin=twin)
    assert want["name"] == "a.w" and want["step"] == 1 and want["beyond_rounding"] is None
    for order in (("twin", "standalone", "distributed"), ("twin", "distributed", "standalone"),
                  ("standalone", "twin", "distributed")):
        book, pairs = _run(tmp_path, "staged", order, traces, envelope=ENVELOPE)
        assert _same(locate_in(pairs["distributed"], 5, twin=pairs["twin"]), want)
        done = book.close()
        early = [key for key in [*done["captured"], *done.get("same_as", {})] if "/beyond/" in key]
        if order[-1] == "distributed":  # the whole window's envelope from the start: nothing beyond it
            assert early == [] and "notes" not in done
        else:
            assert early and any("within the whole window's envelope" in note for note in done["notes"])
