"""Inside the model (issue 25), the pure parts: the first module that differs
(sweep.analysis.modules), the collective ledger against the config and the optimizer as it
ran (sweep.analysis.collectives), gradients in autograd's order and known scales
(sweep.analysis.trace), and the module trace's hooks on a real torch module."""

import math

import numpy as np
import pytest

from sweep.analysis.collectives import dim_groups, ledger_notes, optimizer_notes, scale_causes
from sweep.analysis.modules import compare_modules, first_over_ranks
from sweep.analysis.trace import Search, first_difference, pure_scale, tensor_rows
from sweep.records import Note
from sweep.report.notes import text_of
from sweep.findings.places import module_text, signature, tensor_text


def _rendered(notes_of, *args, **kwargs):
    """What a note function found, as the report renders it (each a typed note: sweep.records.Note)."""
    notes = notes_of(*args, **kwargs)
    assert all(isinstance(n, Note) for n in notes), notes
    return [text_of(n) for n in notes]


def _summary(values):
    values = np.asarray(values, np.float32)
    return {"sample": values.reshape(values.shape[0], -1), "shape": list(values.shape), "dtype": "float32"}


def _step(outputs, grads=None, inputs=None):
    """A module-trace step: ``outputs`` in execution order, ``{name: array}``."""
    names = list(outputs)
    inputs = inputs or {}
    forward = [{"module": n, "call": 0, "micro": 0, "output": _summary(outputs[n]),
                "input": _summary(inputs[n]) if n in inputs else _summary(np.ones((2, 3)))} for n in names]
    backward = [{"module": n, "call": 0, "micro": 0, "grad": _summary(g)} for n, g in (grads or {}).items()]
    return {"forward": forward, "backward": backward}


X = np.arange(6, dtype=np.float32).reshape(2, 3) + 1.0


def test_a_forward_fault_in_a_later_layer_names_that_layer_not_the_first():
    ours = [_step({"layer0": X, "layer1": X * 2, "(model)": X * 2},
                  inputs={"layer0": X, "layer1": X, "(model)": X})]
    theirs = [_step({"layer0": X, "layer1": X * 2.02, "(model)": X * 2.02},
                    inputs={"layer0": X, "layer1": X, "(model)": X})]
    found = compare_modules(ours, theirs)["first"]
    assert (found["module"], found["phase"], found["step"]) == ("layer1", "forward", 0)
    assert found["rel_in"] == 0.0 and found["rel_out"] == pytest.approx(0.01, rel=1e-3)
    assert module_text(found).startswith("layer1 forward output at step 0, inputs agree, rel 0.01")


def test_an_input_that_differs_before_any_module_is_named_for_its_input():
    ours = [_step({"layer0": X}, inputs={"layer0": X})]
    theirs = [_step({"layer0": X * 1.01}, inputs={"layer0": X * 1.01})]
    found = compare_modules(ours, theirs)["first"]
    assert found["where"] == "input" and "pre-forward hook" in module_text(found)


def test_a_backward_fault_names_the_module_whose_backward_produced_it():
    grads = {"layer1": X, "layer0": X}
    ours = [_step({"layer0": X, "layer1": X}, grads=grads)]
    theirs = [_step({"layer0": X, "layer1": X}, grads={"layer1": X, "layer0": X * 3})]
    found = compare_modules(ours, theirs)["first"]
    assert (found["phase"], found["module"], found["gradient_of"]) == ("backward", "layer1", "layer0")


def test_sharded_rows_are_compared_with_the_standalone_rows_of_the_rank_and_gradients_by_the_shard_count():
    full = np.arange(8, dtype=np.float32).reshape(4, 2) + 1.0
    ours = [_step({"layer0": full}, grads={"layer0": full}, inputs={"layer0": full})]
    # rank 1 of 2 holds rows 2-3; a mean loss over half the rows gives each row twice the gradient
    theirs = [_step({"layer0": full[2:]}, grads={"layer0": full[2:] * 2}, inputs={"layer0": full[2:]})]
    result = compare_modules(ours, theirs, rank=1, sharded=True)
    assert result["first"] is None, result["first"]
    assert all(row["rel"] == 0.0 for row in result["rows"])


def test_with_the_batch_cut_across_ranks_a_tensor_without_batch_rows_is_not_compared():
    """A new user's correct GPT on sharded data was named at its learned position embedding: the
    gradient of ``wpe``'s ``(T, C)`` output sums over each copy's own sequences. A batch mean
    (a statistic of the rank's rows) and a seq-first ``(T, B, C)`` tensor do not line up either;
    a batch-free forward (the embedding's output itself) still does."""
    tokens, pos = np.arange(16, dtype=np.float32).reshape(4, 4) + 1.0, np.ones((3, 4), np.float32)
    seq_first = np.arange(24, dtype=np.float32).reshape(3, 4, 2)
    ours = [_step({"wpe": pos, "block": tokens, "mean": tokens.mean(0), "attn": seq_first},
                  grads={"block": tokens, "wpe": pos * 4, "attn": seq_first},
                  inputs={"wpe": np.arange(3.0), "block": tokens, "mean": tokens, "attn": seq_first})]
    mine = tokens[2:]
    theirs = [_step({"wpe": pos, "block": mine, "mean": mine.mean(0), "attn": seq_first[:, 2:]},
                    grads={"block": mine * 2, "wpe": pos * 2, "attn": seq_first[:, 2:]},
                    inputs={"wpe": np.arange(3.0), "block": mine, "mean": mine, "attn": seq_first[:, 2:]})]
    result = compare_modules(ours, theirs, rank=1, sharded=True)
    assert result["first"] is None, result["first"]
    rel = {(r["phase"], r["module"]): r["rel"] for r in result["rows"]}
    assert rel[("forward", "wpe")] == 0.0 and rel[("forward", "block")] == 0.0 and rel[("backward", "block")] == 0.0
    assert rel[("forward", "mean")] is None and rel[("backward", "wpe")] is None and rel[("forward", "attn")] is None
    # a fault in a batch-free forward is still named; replicated data compares every tensor as before
    theirs[0]["forward"][0]["output"] = _summary(pos * 1.01)
    assert compare_modules(ours, theirs, rank=1, sharded=True)["first"]["module"] == "wpe"
    whole = [_step({"wpe": pos}, grads={"wpe": pos * 2}, inputs={"wpe": np.arange(3.0)})]
    assert compare_modules([_step({"wpe": pos}, grads={"wpe": pos * 4}, inputs={"wpe": np.arange(3.0)})], whole,
                           sharded=True)["first"]["gradient_of"] == "wpe"  # one rank: nothing cut, compared


def test_with_the_batch_cut_across_ranks_rows_routed_by_their_values_are_not_compared():
    """A new user's mixture of experts on sharded data: an expert's input holds the tokens routed to
    it, 4 of the standalone copy's 8 rows and 2 of the rank's 4 here: the counts divide, the rows do
    not line up, and the expert was named 4.5e7x beyond rounding at step 1 of a correct model. Rows
    per model-input row must match the batch's (``(model)``'s input: 8 and 4 rows)."""
    batch = np.arange(16, dtype=np.float32).reshape(8, 2) + 1.0
    routed = batch[[0, 3, 5, 6]]  # the standalone copy's expert: rows 0, 3 (rank 0's) and 5, 6 (rank 1's)
    ours = [_step({"router": batch, "expert": routed * 2, "(model)": batch},
                  inputs={"router": batch, "expert": routed, "(model)": batch})]
    theirs = [_step({"router": batch[4:], "expert": routed[2:] * 2, "(model)": batch[4:]},
                    inputs={"router": batch[4:], "expert": routed[2:], "(model)": batch[4:]})]
    result = compare_modules(ours, theirs, rank=1, sharded=True)
    assert result["first"] is None, result["first"]
    rel = {r["module"]: (r["rel_in"], r["rel"]) for r in result["rows"]}
    assert rel["expert"] == (None, None) and rel["router"] == (0.0, 0.0)
    flat = batch.reshape(16, 1)  # (B T, C) rows: 2 per input row in both copies, still compared
    ours = [_step({"flat": flat, "(model)": batch}, inputs={"flat": flat, "(model)": batch})]
    theirs = [_step({"flat": flat[8:] * 1.01, "(model)": batch[4:]}, inputs={"flat": flat[8:], "(model)": batch[4:]})]
    assert compare_modules(ours, theirs, rank=1, sharded=True)["first"]["module"] == "flat"


def test_equal_traces_name_nothing_and_say_so():
    result = compare_modules([_step({"layer0": X})], [_step({"layer0": X})])
    assert result["first"] is None and "agree exactly" in module_text(result)
    twin = compare_modules([_step({"layer0": X})], [_step({"layer0": X})], twin=[_step({"layer0": X})])
    assert "agree within their rounding envelope" in module_text(twin)


def test_a_parent_that_returns_its_last_childs_output_is_not_blamed_for_the_next_gradient():
    ours = [_step({"0": X, "1": X, "(model)": X}, grads={"1": X, "(model)": X, "0": X})]
    theirs = [_step({"0": X, "1": X, "(model)": X}, grads={"1": X, "(model)": X, "0": X * 2})]
    assert compare_modules(ours, theirs)["first"]["module"] == "1"


def test_the_job_takes_the_earliest_module_over_its_ranks():
    a = {"step": 1, "phase": "forward", "module": "layer1", "rel_in": 0.0, "rel_out": 0.5}
    b = {"step": 0, "phase": "backward", "module": "layer0", "gradient_of": "layer1", "rel_out": 0.5}
    found = first_over_ranks([(a, 0), (b, 1), (None, 2)])
    assert found["module"] == "layer0" and found["ranks"] == [1] and not found["every"]
    assert module_text(found) == ("layer0 backward at step 0: the gradient of its output agrees, the next gradient "
                                  "autograd produced (layer1's output) differs, rel 0.5 (rank 1)")
    assert module_text(first_over_ranks([(a, 0), (a, 1)])).endswith(" (every rank)")


def test_gradients_are_taken_in_autograd_order_when_the_trace_gives_one():
    ones = {"layer0.weight": np.ones(3), "layer1.weight": np.ones(3)}
    off = {"layer0.weight": np.ones(3) * 2, "layer1.weight": np.ones(3) * 2}
    step = {"grad": ones, "order": {"grad": ["layer1.weight", "layer0.weight"]}}
    found = first_difference([step], [{"grad": off}])
    assert found["name"] == "layer1.weight"
    assert first_difference([{"grad": ones}], [{"grad": off}])["name"] == "layer0.weight"  # by name without one
    assert [r["name"] for r in tensor_rows([step], [{"grad": off}])] == ["layer1.weight", "layer0.weight"]


def test_a_gradient_that_is_world_size_times_the_standalone_one_is_named_a_sum_for_a_mean():
    g = np.array([0.5, -1.0, 2.0])
    found = first_difference([{"grad": {"w": g}}], [{"grad": {"w": g * 4}}], Search(known={"world_size": 4}))
    assert found["scale"] == pytest.approx(4.0)
    assert "x4 = world_size: a sum where a mean was expected)" in tensor_text(found)
    # a new user's fault doubled the gradients at update 5 only: the factor is world_size's, the stop is no op's
    over = dict(found, updates={"until": 5})
    assert ("x4 = world_size: a sum where a mean was expected; but the difference is over after update 5, and an op "
            "the reduction runs at every step would not stop)") in tensor_text(over)
    assert pure_scale(g, g + np.array([0.1, 0.0, 0.0])) is None  # not a pure scale
    assert signature(scale_causes(0.5, {"grad_accum_steps": 2.0})).startswith("x0.5 = 1/grad_accum_steps")
    assert scale_causes(3.0, {"world_size": 4.0}) is None and signature(None) is None
    # a new user's x0.25 with world_size = grad_accum_steps = 2: both divided once more, named as their product
    quarter = scale_causes(0.25, {"world_size": 2.0, "grad_accum_steps": 2.0, "the replicate degree": None})
    assert quarter["factors"] == ["1/(world_size * grad_accum_steps)"], quarter
    assert signature(quarter).startswith("x0.25 = 1/(world_size * grad_accum_steps): divided by both"), signature(quarter)
    assert scale_causes(0.5, {"world_size": 2.0, "grad_accum_steps": 2.0})["factors"] == [
        "1/world_size", "1/grad_accum_steps"]  # one factor matches: no product said


FSDP_HSDP = {"mesh_shape": [2, 2], "mesh_dim_names": ["dp_replicate", "dp_shard"],
             "all_gather": {"dim": "dp_shard", "size": 2, "dtypes": ["bfloat16"], "why": "param_dtype"},
             "reduce_scatter": {"dim": "dp_shard", "size": 2, "dtypes": ["float32"], "why": "reduce_dtype"},
             "all_reduce": {"dim": "dp_replicate", "size": 2, "dtypes": ["float32"], "why": "reduce_dtype"},
             "divide": 4, "units": 1, "grad_accum_steps": 1}


def _call(op, dtype, group, step=0, numel=100):
    return {"op": op, "dtype": dtype, "numel": numel, "group": group, "reduce_op": "AVG", "step": step}


def _divide(rs_group, ar_group, rs_op="AVG", ar_op="AVG", post=None):
    return {"op": "divide_factors", "predivide": None, "postdivide": post, "factor": None,
            "reduce_scatter_op": rs_op, "all_reduce_op": ar_op, "reduce_scatter_group": rs_group,
            "all_reduce_group": ar_group, "step": 0}


def test_a_ledger_that_matches_the_config_gives_no_note():
    assert dim_groups([2, 2], ["dp_replicate", "dp_shard"], 1) == {"dp_replicate": [1, 3], "dp_shard": [0, 1]}
    entries = [_call("all_gather_single", "bfloat16", [0, 1]), _call("reduce_scatter_single", "float32", [0, 1]),
               _call("all_reduce", "float32", [0, 2]), _divide([0, 1], [0, 2])]
    assert _rendered(ledger_notes, entries, FSDP_HSDP, rank=0, world_size=4) == []


def test_a_ledger_names_a_wrong_dtype_a_missing_replicate_reduction_and_a_sum_for_a_mean():
    entries = [_call("all_gather_single", "bfloat16", [0, 1]), _call("reduce_scatter_single", "bfloat16", [0, 1]),
               _divide([0, 1], [], rs_op="SUM", ar_op="SUM")]
    notes = _rendered(ledger_notes, entries, FSDP_HSDP, rank=0, world_size=4)
    assert any(n.startswith("reduce_scatter ran in bfloat16 over dp_shard, expected float32") for n in notes), notes
    assert any(n.startswith("no all_reduce over dp_replicate in step 0") for n in notes), notes
    assert "the gradient reduction sums over 2 ranks and divides by 1, expected a mean (divide by 2): the " \
           "gradients run x2, the ranks summed: a sum where a mean was expected" in notes, notes
    assert all("; " not in n for n in notes)  # one note each: the report splits on "; "
    found = {n.code: n.values for n in ledger_notes(entries, FSDP_HSDP, rank=0, world_size=4)}
    assert found["N101"]["dtype"] == "bfloat16" and found["N103"]["dim"] == "dp_replicate", found
    assert found["N105"]["summed"] == 2 and found["N105"]["sum_only"] is True, found


def test_reductions_on_every_micro_batch_are_named():
    expected = dict(FSDP_HSDP, mesh_shape=[2], mesh_dim_names=["dp"], all_reduce=None, divide=2, grad_accum_steps=2,
                    all_gather={"dim": "dp", "size": 2, "dtypes": ["bfloat16"], "why": ""},
                    reduce_scatter={"dim": "dp", "size": 2, "dtypes": ["float32"], "why": ""})
    entries = [_call("reduce_scatter_single", "float32", [0, 1]), _divide([0, 1], []),
               _call("reduce_scatter_single", "float32", [0, 1]), _divide([0, 1], [])]
    notes = _rendered(ledger_notes, entries, expected, rank=0, world_size=2)
    assert any("gradient sync is not off between micro-batches" in n for n in notes), notes
    # such a step's gradients are the sum of its micro-batches' means: no one reduction to hold the values
    # against (the step-0 check), and a gradient reduced once per micro-batch is not "reduced more than once"
    from sweep.analysis.collectives import synced_micro_batches
    from sweep.analysis.reductions import coverage_notes

    assert synced_micro_batches(entries, expected) == {0}
    assert synced_micro_batches(entries[:2], expected) == set()
    assert synced_micro_batches(entries, dict(expected, grad_accum_steps=1)) == set()  # N108's: judged
    named = [dict(e, params=["w"]) if e["op"] != "divide_factors" else e for e in entries]
    assert coverage_notes(named, expected, ["w"], {"w": 8}, 0, 2) == []
    assert coverage_notes(named, dict(expected, grad_accum_steps=1), ["w"], {"w": 8}, 0, 2)[0].code == "N143"


def test_an_optimizer_hyper_parameter_that_ran_otherwise_is_named_with_both_values():
    configured = {"name": "adam", "lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}
    ran = {"standalone": [dict(configured, group=0)], "distributed": [dict(configured, group=0, eps=1e-5)]}
    assert _rendered(optimizer_notes, ran, configured) == [
        "optimizer eps ran 1e-05 in the distributed copy (param group 0), configured 1e-08"]
    assert _rendered(optimizer_notes, {"distributed": [dict(configured, group=0)]}, configured) == []


def test_the_module_trace_only_looks_and_records_in_execution_and_autograd_order():
    torch = pytest.importorskip("torch")
    from sweep.train.observers.module_trace import ROOT, ModuleTrace
    from sweep.train.observers.optimizer_log import optimizer_ran

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    x = torch.randn(5, 3)
    plain = model(x).sum()
    plain.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    trace = ModuleTrace(model)
    trace.begin_recording()
    with trace.forward():
        out = model(x)
    out.sum().backward()
    assert torch.equal(out.sum(), plain) and all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads))
    assert [e["module"] for e in trace.steps[0]["forward"]] == ["0", "1", "2", ROOT]
    # the root's output is its last child's (one tensor, two hooks: in registration order)
    assert [e["module"] for e in trace.steps[0]["backward"]] == ["2", ROOT, "1", "0"]
    assert trace.owners["2.weight"] == "2"
    trace.remove()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-6)
    assert optimizer_ran(opt)[0]["eps"] == 1e-6 and optimizer_ran(opt)[0]["betas"] == [0.9, 0.999]


def test_a_factor_on_one_gradient_alone_is_not_named_a_reductions_of_them_all():
    """x2 = world_size on one gradient alone: no reduction of every gradient; its own reduction's
    sum (a hand engine reducing each apart) or a factor on it alone, both said."""
    g = np.array([0.5, -1.0, 2.0])
    ours = [{"grad": {"a": g, "b": g}}]
    found = first_difference(ours, [{"grad": {"a": g * 2, "b": g}}], Search(known={"world_size": 2}))
    assert found["scale"] == pytest.approx(2.0) and found["scale_alone"]
    assert ("(x2 = world_size, this tensor only: the other gradients are not scaled alike; a sum where a mean was "
            "expected in its own reduction, or a factor on it alone)") in tensor_text(found)
    both = first_difference(ours, [{"grad": {"a": g * 2, "b": g * 2}}], Search(known={"world_size": 2}))
    assert both["scale_causes"]["factors"] == ["world_size"]
    assert signature(both["scale_causes"]).startswith("x2 = world_size")


def test_a_reduction_over_every_rank_covers_both_dims_of_an_hsdp_mesh():
    entries = [_call("reduce_scatter_single", "float32", [0, 1, 2, 3]), _divide([0, 1, 2, 3], [])]
    notes = _rendered(ledger_notes, entries, FSDP_HSDP, rank=0, world_size=4)
    assert not any("never reduced" in n for n in notes), notes
    assert any(n.startswith("reduce_scatter over world, expected the dp_shard group") for n in notes), notes


def test_an_all_reduce_fsdp2_does_not_make_is_named():
    entries = [_call("reduce_scatter_single", "float32", [0, 1]), _call("all_reduce", "float32", [0, 2]),
               _divide([0, 1], [0, 2]), dict(_call("all_reduce", "float32", [0, 2]), reduce_op="SUM")]
    notes = _rendered(ledger_notes, entries, FSDP_HSDP, rank=0, world_size=4)
    assert any(n.startswith("2 all_reduce calls over dp_replicate in step 0 for 1 gradient reduction(s) "
                            "(reduce_op AVG, SUM)") for n in notes), notes


def test_all_reduces_over_the_replicas_of_a_shard_sub_mesh_are_not_counted_against_fsdp2():
    """``fully_shard`` over the ``dp_shard`` sub-mesh makes no replicate all-reduce (its divide
    factors give no all-reduce group): an engine's own all-reduces over ``dp_replicate`` are not
    extra ones FSDP2 did not make (the parameters they carried judge them)."""
    hand = dict(_call("all_reduce", "float32", [0, 2]), reduce_op="SUM", span="update", params=["w"],
                params_from="grad")
    entries = [_call("reduce_scatter_single", "float32", [0, 1]), _divide([0, 1], []), hand,
               dict(hand, params=["b"])]
    notes = _rendered(ledger_notes, entries, FSDP_HSDP, rank=0, world_size=4)
    assert not any("all_reduce calls over dp_replicate" in n for n in notes), notes
    # made in clip_grad_norm: a reduction of the gradients, not the clipping norm's, and the replicate dim's
    norm = dict(_call("all_reduce", "float32", [0, 1], numel=1), span="clip", reduce_op="SUM")
    clipped = [dict(e, span="clip") if e is hand or e.get("params") == ["b"] else e for e in entries] + [norm]
    want = dict(FSDP_HSDP, clip={"groups": ["dp_shard"], "size": 2, "why": "the norm of the whole gradient"})
    notes = _rendered(ledger_notes, clipped, want, rank=0, world_size=4)
    assert not any("clipping norm" in n or "no all_reduce over dp_replicate" in n for n in notes), notes


def test_the_ledger_names_the_parameter_whose_gradient_a_reduction_is_given():
    """In the update span a reduction given a parameter's local gradient itself (its memory and
    size) names that parameter, ``params_from: grad``; any other tensor names none."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from sweep.engines.collectives import Ledger, local_grads

    model = torch.nn.Linear(3, 2)
    model(torch.ones(1, 3)).sum().backward()
    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with Ledger() as ledger:
            ledger.span, ledger.grad_owners = "update", local_grads(model)
            dist.all_reduce(model.weight.grad)
            dist.all_reduce(model.bias.grad.clone())
            dist.all_reduce(model.weight.grad[0])  # a view of part of it: not the gradient
    finally:
        if started:
            dist.destroy_process_group()
    assert [(e["params"], e.get("params_from")) for e in ledger.entries] == [
        (["weight"], "grad"), (None, None), (None, None)]


def test_the_first_floating_output_is_found_in_a_dict_or_tuple():
    torch = pytest.importorskip("torch")
    from sweep.train.torch_tensors import first_floating

    t = torch.ones(2)
    assert first_floating({"ids": torch.ones(2, dtype=torch.long), "logits": (t,)}) is t
    assert first_floating({"ids": torch.ones(2, dtype=torch.long)}) is None
    assert first_floating({"ids": torch.ones(2, dtype=torch.long)}, floating=False) is not None


def test_an_engine_that_names_its_groups_has_every_call_held_to_them():
    """hyper-parallel's MindSpore contract lists the groups an all-reduce may use (the
    replicate dim, or every rank for a parameter too small to shard): others are named."""
    contract = dict(FSDP_HSDP, all_reduce=dict(FSDP_HSDP["all_reduce"], groups=["dp_replicate", "world"]),
                    divide=None, units=0)
    fine = [_call("reduce_scatter_tensor", "float32", [0, 1]), _call("all_reduce", "float32", [0, 2]),
            _call("all_reduce", "float32", [0, 1, 2, 3])]
    assert _rendered(ledger_notes, fine, contract, rank=0, world_size=4) == []
    wrong = fine + [_call("all_reduce", "float32", [0, 1])]
    assert _rendered(ledger_notes, wrong, contract, rank=0, world_size=4) == [
        "all_reduce over dp_shard, expected the dp_replicate or the world group"]


def test_a_scale_that_two_equal_factors_explain_names_both():
    """world_size = grad_accum_steps = 2: a loss divided twice by the accumulation is x0.5,
    and so is a double division by world_size; the ratio names both (issue 38)."""
    both = signature(scale_causes(0.5, {"world_size": 2.0, "grad_accum_steps": 2.0}))
    assert both == ("x0.5 = 1/world_size or 1/grad_accum_steps: divided by world_size twice, or the loss divided "
                    "by the micro-batch count twice")
    assert signature(scale_causes(0.5, {"world_size": 4.0, "grad_accum_steps": 2.0})).startswith(
        "x0.5 = 1/grad_accum_steps:")


def test_lrs_as_they_ran_are_compared_copy_against_copy():
    """Only step 0's param groups were held against the config; a schedule fault at a later
    step is named at its step with both lrs (issue 38)."""
    from sweep.analysis.collectives import lr_notes

    assert _rendered(lr_notes, [1e-3, 1e-3, 9e-4], [1e-3, 1e-3, 9e-4]) == []
    assert _rendered(lr_notes, [1e-3, 1e-3, 9e-4], [1e-3, 1e-3, 4.5e-4]) == [
        "lr differs from step 2: distributed 0.00045, standalone 0.0009 (the copies' schedules differ in shape: "
        "another schedule in one copy)"]
    # the cause is read from what differs (issue 51), not assumed
    cosine = [1e-3 * (1 + math.cos(math.pi * t / 8)) / 2 for t in range(8)]
    ahead = _rendered(lr_notes, cosine, cosine[1:] + [0.0])[0]
    assert ahead.startswith("lr differs from step 0") and "runs 1 step ahead of the standalone one" in ahead \
        and "an extra scheduler.step()" in ahead
    assert "runs 1 step behind" in _rendered(lr_notes, cosine, cosine[:1] + cosine[:-1])[0]
    assert "its scheduler does not step" in _rendered(lr_notes, cosine, cosine[:3] + [cosine[3]] * 5)[0]
    assert "x0.5 the standalone one at every step from there" in _rendered(lr_notes,
        cosine, cosine[:2] + [x * 0.5 for x in cosine[2:]])[0]
    assert "at step 3 only (x2), equal again from step 4" in _rendered(lr_notes,
        cosine, [x * 2 if t == 3 else x for t, x in enumerate(cosine)])[0]
    assert _rendered(lr_notes, None, [1e-3]) == [] and _rendered(lr_notes, [1e-3], []) == []  # one copy's lrs unknown: no claim
    assert _rendered(lr_notes, [1e-3, 1e-3], [1e-3 * (1 + 1e-8), 1e-3]) == []  # a float32 round trip is no difference


def test_a_clipping_norm_reduced_over_the_wrong_group_or_not_at_all_is_named_scalars_included():
    clip = {"groups": ["dp_shard"], "size": 2, "why": "the norm is Partial over the shard dim"}
    contract = dict(FSDP_HSDP, clip=clip)
    grads = [_call("reduce_scatter_single", "float32", [0, 1]), _call("all_reduce", "float32", [0, 2]),
             _divide([0, 1], [0, 2])]

    def norm(group, step=0):  # one element: the squared norm, summed
        return dict(_call("all_reduce", "float32", group, step=step, numel=1), reduce_op="SUM", span="clip")

    assert _rendered(ledger_notes, grads + [norm([0, 1])], contract, rank=0, world_size=4) == []
    # over every rank of an HSDP mesh: each replica's shard is counted again
    notes = _rendered(ledger_notes, grads + [norm([0, 1, 2, 3])], contract, rank=0, world_size=4)
    assert notes == ["the clipping norm of step 0 was all-reduced over world (reduce_op SUM, 1 element(s)), expected "
                     "the dp_shard group (the norm is Partial over the shard dim): it holds the dp_shard group 2 times "
                     "over, so each shard is counted 2 times and a norm of summed squares runs x1.414"]
    # never reduced: each rank clips by its own shard's norm
    notes = _rendered(ledger_notes, grads, contract, rank=0, world_size=4)
    assert len(notes) == 1 and notes[0].startswith("the clipping norm of step 0 was never all-reduced"), notes
    # the clip span's all-reduce is not taken for a gradient reduction, nor a scalar elsewhere for a norm
    assert _rendered(ledger_notes, grads + [norm([0, 2])], dict(FSDP_HSDP, clip=dict(clip, groups=["dp_replicate"])),
                        rank=0, world_size=4) == []
    # without clipping there is nothing to check
    assert _rendered(ledger_notes, grads, dict(FSDP_HSDP, clip=None), rank=0, world_size=4) == []


def test_an_input_that_holds_other_rows_is_said_to_come_from_a_discrete_choice():
    # bf16 rounding flipped one token's route: the expert's input held 3 rows against 2, said "rel inf"
    batch = np.arange(8, dtype=np.float32).reshape(4, 2) + 1.0
    ours = [_step({"router": batch, "expert": batch[:3]}, inputs={"router": batch, "expert": batch[:3]})]
    theirs = [_step({"router": batch, "expert": batch[:2]}, inputs={"router": batch, "expert": batch[:2]})]
    found = compare_modules(ours, theirs)["first"]
    assert (found["module"], found["where"], found["rows_in"]) == ("expert", "input", [3, 2])
    assert module_text(found).startswith("expert input at step 0 holds other rows: 3 in the standalone copy, 2 here, "
                                         "while every module before it agrees: a discrete choice before it (routing")
