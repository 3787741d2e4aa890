"""Which copies each rank of a launch trains: the standalone copy on rank 0 only (and on every
rank of a tracing rerun), the twin on the last rank meanwhile (``sweep.train.phase_order``,
``sweep.train.twin.trains``). Real jobs that rely on it: ``tests/integration/test_torch_jobs.py``
(the ranks agree), ``test_planted_divergence.py`` (they disagree)."""

from __future__ import annotations

import pytest

from sweep.train import launch_order, phase_order, twin


def test_only_rank_0_of_a_first_pass_trains_the_standalone_copy(tmp_path):
    assert phase_order("standalone_first", "both", tmp_path, rank=0) == ["standalone", "distributed"]
    assert phase_order("standalone_first", "both", tmp_path, rank=1) == ["distributed"]
    assert phase_order("distributed_first", "both", tmp_path, rank=3) == ["distributed"]
    assert launch_order("distributed_first", "both", tmp_path) == ["distributed", "standalone"]
    # a tracing rerun: every rank traces its own rows of the standalone copy
    assert phase_order("standalone_first", "both", tmp_path, rank=1, everywhere=True) == ["standalone", "distributed"]
    # the standalone-only process and order=separate are as before
    assert phase_order("separate", "both", tmp_path, rank=0) == ["distributed"]
    assert phase_order("standalone_first", "standalone", tmp_path, rank=0) == ["standalone"]
    with pytest.raises(ValueError, match="order="):
        phase_order("sideways", "both", tmp_path, rank=1)


@pytest.mark.parametrize("world", [1, 2, 4])
def test_the_twin_trains_on_the_last_rank_once_and_on_every_rank_of_a_rerun(tmp_path, world):
    first = {"compare": {"envelope": True}}
    rerun = {"compare": {"envelope": True, "trace_until": 3}}
    assert [r for r in range(world) if twin.trains(first, tmp_path, "both", False, r, world)] == [world - 1]
    assert [r for r in range(world) if twin.trains(rerun, tmp_path, "both", False, r, world)] == list(range(world))
    off = {"compare": {"envelope": False}}
    assert not any(twin.trains(off, tmp_path, "both", False, r, world) for r in range(world))
