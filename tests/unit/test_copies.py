"""Equal copies, the pure parts (issue 24): one name per tensor through wrappers, tensors
one copy lacks never dropped, replicas judged by digest, and notes on unequal copies
stated in the verdict."""

import numpy as np
import pytest

from sweep.report.findings import attribute
from sweep.analysis.compare import RANDOM_DRAWS_NOTE
from sweep.analysis.trace import canonical_name, first_difference, locate, missing_names
from sweep.records import RankResult
from sweep.analysis import judging
from sweep.analysis.judging import replica_check
from sweep.findings.places import tensor_text


def replica_reason(*args):
    """The replicas' reason (a note: N184, N185) as the report renders it."""
    from sweep.report.notes import text_of

    return text_of(judging.replica_reason(*args))


def _trace(weights, buffers=None, steps=2, grad=1.0):
    out = []
    for i in range(steps):
        entry = {"grad": {n: np.full_like(v, grad) for n, v in weights.items()},
                 "weight": {n: v - 0.1 * (i + 1) for n, v in weights.items()}}
        if buffers is not None:
            entry["buffer"] = dict(buffers)
        if i == 0:
            entry["initial"] = dict(weights)
            if buffers is not None:
                entry["initial_buffer"] = dict(buffers)
        out.append(entry)
    return out


def test_wrapper_segments_are_dropped_anywhere_in_a_name():
    assert canonical_name("module.layers.0._checkpoint_wrapped_module.attn.w") == "layers.0.attn.w"
    assert canonical_name("_orig_mod.layer0._fsdp_wrapped_module.weight") == "layer0.weight"
    assert canonical_name("layer0.weight") == "layer0.weight"
    assert canonical_name("modules.x") == "modules.x"  # whole segments only


def test_a_parameter_one_copy_lacks_is_named_and_initial_weights_are_not_claimed_equal():
    w = {"a": np.ones(3), "b": np.zeros(2)}
    ours, theirs = _trace(w), _trace({**w, "extra": np.zeros(4)})
    assert first_difference(ours, theirs) is None  # what both hold is equal
    assert missing_names(ours, theirs) == [{"name": "extra", "kind": "initial", "step": 0, "only_in": "distributed"}]
    found = locate(ours, theirs, 1)
    assert found["missing"][0]["name"] == "extra"
    assert tensor_text(found).startswith("no tensor both copies hold differs in steps 0-1")
    assert "only the distributed copy has the parameter extra" in tensor_text(found)
    # a difference elsewhere keeps the missing tensor in its description too
    bad = _trace({"a": np.ones(3), "b": np.zeros(2), "extra": np.zeros(4)}, grad=2.0)
    found = locate(ours, bad, 1)
    assert (found["kind"], found["name"]) == ("grad", "a")
    assert "the first gradient (initial weights equal)" in tensor_text(found)
    assert tensor_text(found).endswith("only the distributed copy has the parameter extra (not compared: the "
                                         "copies differ in what they hold)")


def test_a_name_renamed_by_a_wrapper_matches_once_canonical():
    w = {"layer0.weight": np.ones(3)}
    wrapped = {canonical_name("module._orig_mod.layer0.weight"): np.ones(3)}
    assert missing_names(_trace(w), _trace(wrapped)) == []
    raw = _trace({"module.layer0.weight": np.ones(3)})  # not normalised: both sides named
    assert {(m["name"], m["only_in"]) for m in missing_names(_trace(w), raw)} == \
        {("layer0.weight", "standalone"), ("module.layer0.weight", "distributed")}


def test_a_buffer_that_differs_is_the_first_differing_tensor():
    w = {"layer0.weight": np.ones(3)}
    found = locate(_trace(w, {"norm.running_mean": np.zeros(2)}), _trace(w, {"norm.running_mean": np.ones(2)}), 1)
    assert (found["step"], found["kind"], found["name"]) == (0, "initial_buffer", "norm.running_mean")
    assert tensor_text(found).startswith("buffer norm.running_mean initial value (before any step)")
    later = _trace(w, {"norm.running_mean": np.zeros(2)})
    later[1]["buffer"] = {"norm.running_mean": np.full(2, 0.5)}
    found = locate(_trace(w, {"norm.running_mean": np.zeros(2)}), later, 1)
    assert (found["step"], found["kind"]) == (1, "buffer")
    assert "buffer norm.running_mean after the forward of step 1" in tensor_text(found)
    missing = missing_names(_trace(w, {}), _trace(w, {"norm.num_batches_tracked": np.zeros(())}))
    assert [(m["name"], m["kind"]) for m in missing] == [("norm.num_batches_tracked", "initial_buffer")]


def _rank(rank, key, digests, coords):
    return RankResult(rank=rank, world_size=4, framework="torch",
                      replica={"key": key, "digests": digests, "coords": coords,
                               "mesh_dims": ["dp_replicate", "dp_shard"]})


def test_replicas_of_a_shard_must_agree_step_by_step():
    ok = [_rank(r, f"s{r % 2}", ["x", "y"], [r // 2, r % 2]) for r in range(4)]
    found = replica_check(ok)
    assert found["groups"] == [[0, 2], [1, 3]] and found["first_step"] is None
    bad = ok[:3] + [_rank(3, "s1", ["x", "z"], [1, 1])]
    found = replica_check(bad)
    assert (found["first_step"], found["pairs"], found["ranks"]) == (1, [[1, 3]], [1, 3])
    assert replica_reason(found).startswith(
        "replicas disagree from step 1: rank 1 (dp_replicate x dp_shard [0, 1]) and rank 3 "
        "(dp_replicate x dp_shard [1, 1]) hold the same shards")
    # ranks holding different shards are never held against each other; no digests, no check
    assert replica_check([_rank(r, f"s{r}", [str(r)], [0, r]) for r in range(2)])["groups"] == []
    assert replica_check([RankResult(rank=0, world_size=1, framework="torch")]) is None


def _row(job, status, split, notes=None, max_abs=0.0):
    return {"job": job, "overrides": {"data.split": split}, "status": status, "reason": None,
            "first_fail_step": 0 if status == "fail" else None, "first_diff_step": 0 if max_abs else None,
            "max_abs_diff": max_abs, "mean_signed_diff": max_abs, "notes": notes}


def test_random_draws_on_sharded_data_are_stated_and_name_no_culprit():
    rows = [_row(0, "ok", "replicated"), _row(1, "fail", "sharded", notes=RANDOM_DRAWS_NOTE, max_abs=0.1)]
    out = attribute(rows)
    assert out["culprits"][0]["random_draws_only"] is True
    assert "Culprit:" not in out["verdict"] and "No culprit from this alone" in out["verdict"]
    assert f"Copies not equal: {RANDOM_DRAWS_NOTE} (job 1)" in out["verdict"]
    assert "Copies not equal" not in attribute([_row(0, "ok", "replicated")])["verdict"]
    # a failing job without the note is a culprit as before
    plain = attribute([_row(0, "ok", "replicated"), _row(1, "fail", "sharded", max_abs=0.1)])
    assert "Culprit: data.split=sharded" in plain["verdict"]


def test_a_snapshot_leaves_the_storage_resizable():
    import pytest
    import torch

    from sweep.train.torch_tensors import host_copy

    live = torch.arange(6, dtype=torch.float32)
    copied = host_copy(live)
    live.untyped_storage().resize_(0)  # FSDP2's reshard frees an unsharded parameter so
    assert copied.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] and copied.dtype == np.float32
    viewed = torch.arange(6, dtype=torch.float32)
    viewed.float().cpu().numpy()  # the old snapshot: a numpy view of live storage
    with pytest.raises(RuntimeError, match="not resizable"):
        viewed.untyped_storage().resize_(0)


def test_each_copy_draws_from_its_own_stream_seeded_alike():
    import torch

    from sweep.train.observers.base import Step
    from sweep.train.observers.random_draws import RandomDraws
    from sweep.train.torch_rank import copy_random_stream

    drop, x, cpu = torch.nn.Dropout(0.5), torch.ones(64), torch.device("cpu")
    torch.manual_seed(3)
    outer = torch.get_rng_state()
    drew, masks = {}, []
    for name in ("standalone", "distributed"):
        with copy_random_stream(7, cpu):
            draws = RandomDraws(cpu)
            draws.begin_step(Step(index=0, copy=None))
            masks.append(drop(x))
            np.random.rand()
            draws.end(1)
            drew[name] = draws.drew
    assert torch.equal(masks[0], masks[1]) and drew == {"standalone": True, "distributed": True}
    assert torch.equal(torch.get_rng_state(), outer)  # the stream outside is untouched
    layer = torch.nn.Linear(2, 2, bias=False)  # (its initialisation draws: outside the stream)
    with copy_random_stream(7, cpu):
        draws = RandomDraws(cpu)
        draws.begin_step(Step(index=0, copy=None))
        layer(torch.ones(2)).sum().backward()  # a step that draws nothing
        draws.end(1)
    assert draws.drew is False


@pytest.mark.parametrize("how", ["independent", "checkpoint", "shared"])
def test_every_way_of_giving_the_weights_gives_buffers_no_state_dict_carries(tmp_path, how):
    import torch

    from sweep.train.torch_rank import copy_weights
    from tests.helpers.own_models import random_projection

    def built(persistent):
        return random_projection(framework="torch", in_size=4, hidden_size=3, out_size=2, persistent=persistent)

    for persistent in (False, True):
        src, dst = built(persistent), built(persistent)
        assert not torch.equal(src.proj, dst.proj)  # each construction drew its own
        copy_weights(dst, src, how, tmp_path / "w.pt")
        assert torch.equal(src.proj, dst.proj) and dst.proj is not src.proj, (how, persistent)
        assert all(torch.equal(p, q) for p, q in zip(src.parameters(), dst.parameters()))
