"""N101-N109: the distributed copy's collectives against the engine's contract
(``sweep.analysis.collectives.ledger_notes``: the ledger of every ``torch.distributed`` call,
FSDP2's divide factors, held against ``expected_collectives``)."""

from __future__ import annotations

from sweep.findings.notes_catalog.base import NoteKind

FAMILY = "collectives"
LEDGER = "the rank's collective ledger (op, dtype, element count, group, reduce op of every call) against the " \
         "engine's contract (expected_collectives: the policy's dtypes, the mesh dims' groups)"

DTYPE = NoteKind(
    code="N101", name="a collective in another dtype", family=FAMILY,
    template="{op} ran in {dtype} over {group}, expected {expected|or} ({why})",
    rests_on=LEDGER + "; calls of more than one element",
    not_claimed="that the dtype changes the result beyond rounding",
    example={"op": "reduce_scatter", "dtype": "bfloat16", "group": "dp_shard", "expected": ["float32"],
             "why": "reduce_dtype=float32"},
)
GROUP = NoteKind(
    code="N102", name="a collective over another group", family=FAMILY,
    template="{op} over {group}, expected the {expected| or the } group",
    rests_on=LEDGER + "; calls of more than one element (FSDP2's reshard_after_forward=k gathers excepted)",
    not_claimed="which ranks' values the call mixed",
    example={"op": "reduce_scatter", "group": "world", "expected": ["dp_shard"]},
)
NO_REPLICATE = NoteKind(
    code="N103", name="no reduction across the replicate dim", family=FAMILY,
    template="no {op} over {dim} in step {step}: the replicas' gradients are never reduced across the replicate dim",
    rests_on=LEDGER + "; the first step that reduced its gradients with no reduction over a group holding the dim's",
    not_claimed="the later steps (only the first is named)",
    example={"op": "all_reduce", "dim": "dp_replicate", "step": 0},
)
NO_SHARD = NoteKind(
    code="N104", name="no reduction across the shard dim", family=FAMILY,
    template="no {op} over {dim} in step {step}: the gradients are never reduced across the shard dim",
    rests_on=LEDGER + "; the first step with no reduce-scatter or all-reduce over a group holding the dim's",
    not_claimed="the later steps (only the first is named)",
    example={"op": "reduce_scatter", "dim": "dp_shard", "step": 0},
)
DIVIDE = NoteKind(
    code="N105", name="gradients not divided by the ranks summed", family=FAMILY,
    template="the gradient reduction sums over {summed} ranks and divides by {divided:g}, expected a mean (divide by "
             "{summed}): the gradients run x{ratio:.4g}[{sum_only|if}, the ranks summed: a sum where a mean was "
             "expected][ = {factors|or}][: {causes|, or }]",
    rests_on="FSDP2's divide factors (pre- and post-divide, the reduce op's group size, a PREMUL_SUM's factor) "
             "against the ranks the reduction sums over; the ratio named by the known factors it equals "
             "(world_size, grad_accum_steps, the replicate degree)",
    not_claimed="which of several equal factors it is (the sweep's contrasts decide)",
    example={"summed": 4, "divided": 1.0, "ratio": 4.0, "sum_only": True, "factors": [], "causes": []},
)
REPLICAS_TWICE = NoteKind(
    code="N106", name="gradients reduced across the replicas more than once", family=FAMILY,
    template="{calls} all_reduce calls over {dim} in step {step} for {reductions} gradient reduction(s) (reduce_op "
             "{ops}): an all-reduce FSDP2 does not make, the gradients are reduced across the replicas more than once",
    rests_on=LEDGER + "; all-reduces over the replicate dim's group against the step's divide-factors entries that "
                      "all-reduce (fully_shard over a sub-mesh without the replicate dim makes none: an engine's own "
                      "all-reduces there are judged by the parameters they carried, N142 and N143)",
    not_claimed="which code made the extra all-reduce",
    example={"calls": 2, "dim": "dp_replicate", "step": 0, "reductions": 1, "ops": ["AVG"]},
)
SYNC_ON = NoteKind(
    code="N107", name="gradient sync on between micro-batches", family=FAMILY,
    template="{count} gradient reductions in step {step} for {units} fully_shard unit(s) and "
             "grad_accum_steps={accum}: gradient sync is not off between micro-batches",
    rests_on="the step's divide-factors entries (one a gradient reduction) against the fully_shard units",
    not_claimed="that the result differs: a reduction per micro-batch sums to the same mean, in more rounding",
    example={"count": 4, "step": 0, "units": 2, "accum": 2},
)
UNIT_TWICE = NoteKind(
    code="N108", name="a unit reduces more than once a step", family=FAMILY,
    template="{count} gradient reductions in step {step} for {units} fully_shard unit(s): some unit reduces more than "
             "once per step",
    rests_on="the step's divide-factors entries (one a gradient reduction) against the fully_shard units",
    not_claimed="which unit",
    example={"count": 3, "step": 0, "units": 2},
)
CLIP_NONE = NoteKind(
    code="N109", name="clipping norm never all-reduced", family=FAMILY,
    template="the clipping norm of step {step} was never all-reduced: each rank clips by the norm of its own gradient "
             "shard, expected an all_reduce over the {expected| or the } group ({why})",
    rests_on="the ledger's calls in the step's clip span against the contract's clip entry (the groups a norm's "
             "all-reduce may use, the ranks a full gradient is sharded over)",
    not_claimed="how far the clipped gradients depart (that depends on the shards' norms)",
    example={"step": 0, "expected": ["dp_shard"], "why": "the gradients are sharded over dp_shard"},
)
CLIP_GROUP = NoteKind(
    code="N110", name="clipping norm all-reduced over another group", family=FAMILY,
    template="the clipping norm of step {step} was all-reduced over {group} (reduce_op {reduce_op}, {numel} "
             "element(s)), expected the {expected| or the } group ({why})[: it holds the {shard} group {times:g} "
             "times over, so each shard is counted {times:g} times and a norm of summed squares runs "
             "x{norm_factor:.4g}]",
    rests_on="the ledger's calls in the step's clip span against the contract's clip entry",
    not_claimed="that the clipping bit (a norm under the threshold clips nothing)",
    example={"step": 0, "group": "world", "reduce_op": "SUM", "numel": 1, "expected": ["dp_shard"],
             "why": "the gradients are sharded over dp_shard", "shard": "dp_shard", "times": 2.0,
             "norm_factor": 1.4142},
)

KINDS = [DTYPE, GROUP, NO_REPLICATE, NO_SHARD, DIVIDE, REPLICAS_TWICE, SYNC_ON, UNIT_TWICE, CLIP_NONE, CLIP_GROUP]
