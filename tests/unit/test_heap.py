"""``sweep.train.heap.give_back``: memory a copy let go of leaves the process (glibc)."""

from __future__ import annotations

import ctypes
import ctypes.util

import psutil
import pytest

from sweep.train import heap


@pytest.mark.skipif(heap._libc() is None, reason="no glibc malloc_trim here")
def test_freed_heap_chunks_below_the_top_go_back_to_the_os():
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size, count = 64 * 1024, 2048  # 128 MiB in chunks below glibc's mmap threshold: on the heap
    chunks = [libc.malloc(size) for _ in range(count)]
    for c in chunks:
        ctypes.memset(c, 1, size)  # touched: resident
    pin = libc.malloc(size)  # a live chunk above them: the heap's top cannot shrink past it
    ctypes.memset(pin, 1, size)
    for c in chunks:
        libc.free(c)
    held = psutil.Process().memory_info().rss
    assert heap.give_back() is True
    after = psutil.Process().memory_info().rss
    libc.free(pin)
    assert held - after > 100 * 2 ** 20, (held, after)


def test_it_only_collects_where_there_is_no_malloc_trim(monkeypatch):
    monkeypatch.setattr(heap, "_libc", lambda: None)
    assert heap.give_back() is False


def test_settle_freezes_what_lives_and_later_cycles_are_still_collected():
    import gc
    import weakref

    class Node:
        pass

    try:
        heap.settle()
        frozen = gc.get_freeze_count()
        assert frozen > 0
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle made after the freeze: only a collection frees it
        gone = weakref.ref(a)
        del a, b
        heap.give_back()
        assert gone() is None
        assert gc.get_freeze_count() == frozen  # give_back alone freezes nothing more
    finally:
        gc.unfreeze()
