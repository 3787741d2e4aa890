"""A running statistic that never moved in the distributed copy (issue: a correct BatchNorm net on
hyper-parallel's MindSpore hsdp ended "apart" with no word of why): each rank records which
buffers still equal their value before the first step, and the judge's end-buffer sentence says
the statistic never moved, and how the rank holds it where the engine shards it."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from sweep.findings.places import tensor_text
from sweep.run.judge import frozen
from sweep.train.final_state import MAX_ELEMENTS, buffers_before, final_record

torch = pytest.importorskip("torch")


def _bn(momentum: float):
    torch.manual_seed(0)
    return torch.nn.BatchNorm1d(4, momentum=momentum)


def test_a_copy_whose_statistics_never_moved_lists_them_unchanged_bit_for_bit():
    from sweep.train.torch_tensors import record_tensors

    copies = {"standalone": _bn(0.1), "distributed": _bn(0.0)}  # momentum 0: the forward leaves them as they were
    buffers = {name: (lambda m=m: record_tensors(m, "buffer")) for name, m in copies.items()}
    before = buffers_before(list(copies), buffers)
    for module in copies.values():
        module(torch.randn(8, 4))
    final = final_record(list(copies), buffers, before)
    assert set(final["unchanged"]["distributed"]) >= {"running_mean", "running_var"}
    assert "running_mean" not in final["unchanged"]["standalone"]
    assert final["distributed"]["running_mean"] == [0.0] * 4  # the values themselves as before
    assert "unchanged" not in final_record(list(copies), buffers)  # nothing to hold them against


def test_buffers_too_large_to_record_are_not_snapshotted():
    big = {"distributed": lambda: {"stat": np.zeros(MAX_ELEMENTS + 1, np.float32)}}
    assert buffers_before(["distributed"], big) == {}


def test_the_sentence_says_the_statistic_never_moved_and_names_the_shard_the_rank_holds():
    first = {"step": 5, "kind": "buffer", "name": "bn.moving_mean", "abs_diff": 0.0076, "rel_diff": 1.0,
             "after_last_step": True}
    sharded = SimpleNamespace(final={"unchanged": {"distributed": ["bn.moving_mean"]}},
                              replica={"tensors": {"buffer:bn.moving_mean": "(32,)@0:1/2"}})
    found = frozen(first, sharded, lambda name: name)
    assert found["frozen"] and found["held"] == {"dim": 0, "shard": 1, "shards": 2}
    assert "never moved from its value before step 0, and this rank holds it as shard 1 of 2 along dim 0: " \
           "the engine shards it as a parameter" in tensor_text(found)
    whole = SimpleNamespace(final=sharded.final, replica={"tensors": {"buffer:bn.moving_mean": "(32,)"}})
    text = tensor_text(frozen(first, whole, lambda name: name))
    assert "never moved from its value before step 0: the forward's update never reached it" in text
    moved = SimpleNamespace(final={"unchanged": {"distributed": []}}, replica=None)
    assert frozen(first, moved, lambda name: name) is first and "never moved" not in tensor_text(first)


def test_a_norm_that_parts_on_sharded_data_is_said_to_normalise_by_its_shard():
    from omegaconf import OmegaConf

    from sweep.run.judge import batch_stats_note

    module = {"step": 0, "phase": "forward", "module": "bn", "rel_in": 0.0, "rel_out": 0.52}
    tensor = {"step": 0, "kind": "buffer", "name": "bn.running_mean", "abs_diff": 0.003, "rel_diff": 1.1}
    sharded, replicated = (OmegaConf.create({"data": {"split": s}}) for s in ("sharded", "replicated"))
    assert batch_stats_note(sharded, module, tensor).startswith(
        "bn normalises by its batch's statistics (its buffer bn.running_mean is one): with data.split=sharded")
    assert batch_stats_note(replicated, module, tensor) is None  # one batch: a real difference
    assert batch_stats_note(sharded, dict(module, module="layer0"), tensor) is None  # another module's buffer
    assert batch_stats_note(sharded, module, dict(tensor, after_last_step=True)) is None
    assert batch_stats_note(sharded, None, None) is None


def test_a_tensor_key_is_read_where_it_is_written():
    from sweep.analysis.judging import key_shards, part_text

    assert key_shards("(32,)") == [] and part_text("(32,)") == "whole"
    assert key_shards("(4, 32)@0:1/2,1:0/2") == [{"mesh_dim": 0, "shard": 1, "shards": 2},
                                                 {"mesh_dim": 1, "shard": 0, "shards": 2}]
    assert part_text("(4, 32)@1:0/2") == "dim-0 shard 0 of 2"
    assert key_shards("(4, 32)@rank-local:3") == []
    hsdp = SimpleNamespace(final={"unchanged": {"distributed": ["bn.moving_var"]}},
                           replica={"tensors": {"buffer:bn.moving_var": "(16,)@0:0/1"}})  # one shard: whole
    first = {"step": 2, "kind": "buffer", "name": "bn.moving_var", "abs_diff": 0.1, "rel_diff": 1.0,
             "after_last_step": True}
    assert "held" not in frozen(first, hsdp, lambda name: name)
