"""N160-N164: the precision a job ran against its mixed-precision policy (``sweep.analysis.dtypes``:
``dtype_evidence``'s dtypes, ``override_notes``, ``precision_notes``)."""

from __future__ import annotations

from typing import Any, Dict, Sequence

from sweep.findings.notes_catalog.base import NoteKind

FAMILY = "dtypes"
# the words of each way a per-module override departs (``override_notes``' ``wrong`` entries)
OVERRIDE_WORDS = {"param": "its forward's parameters ran {seen}, the override gives param_dtype={want}",
                  "output": "its output ran {seen}, the override gives output_dtype={want}",
                  "input": "its input ran {seen}, which cast_forward_inputs casts to {want}"}
MODULE_WORDS = {"params": "its forward saw its parameters in", "output": "its output ran",
                "grad_output": "its output's gradient ran"}


def listed(names: Sequence[str], limit: int = 4) -> str:
    """``a, b, c, d and 2 more``."""
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _ran(values: Dict[str, Any]) -> Dict[str, Any]:
    return {"what": values["key"].replace("_", " "), "how": "configured" if values["configured"] else "implied"}


def _override(values: Dict[str, Any]) -> Dict[str, Any]:
    return {"modules_text": listed(values["modules"]),
            "wrong_text": [OVERRIDE_WORDS[w["field"]].format(seen=w["seen"], want=w["want"]) for w in values["wrong"]]}


def _module(values: Dict[str, Any]) -> Dict[str, Any]:
    return {"said": [f"{MODULE_WORDS[w['field']]} {w['dtype']}" for w in values["wrong"]],
            "others_text": listed(values["others"]) if values.get("others") else None}


RAN = NoteKind(
    code="N160", name="a dtype ran otherwise than the policy", family=FAMILY,
    template="{what} dtype ran {ran}, {how} {expected}",
    rests_on="the dtypes the distributed copy ran at step 0 (parameters in the forward, the reduction, the master "
             "weights, the optimizer state) against those its MixedPrecisionPolicy configures or implies (FSDP2's "
             "semantics)",
    not_claimed="that the dtype changes the result beyond rounding",
    example={"key": "param_forward", "ran": "bfloat16", "configured": False, "expected": "float32"},
    fill=_ran,
)
OVERRIDE = NoteKind(
    code="N161", name="a per-module policy not applied", family=FAMILY,
    template="mp_policy.overrides.{key} was not applied to {modules_text}: {wrong_text}",
    rests_on="the dtypes each module an override names ran in its first forward (its parameters, its output, its "
             "input with cast_forward_inputs) against the override's",
    not_claimed="why the engine did not apply it",
    example={"key": "norm", "modules": ["layers.0.norm", "layers.1.norm"],
             "wrong": [{"field": "param", "seen": "bfloat16", "want": "float32"}]},
    fill=_override,
)
MODULE = NoteKind(
    code="N162", name="a module computes in a dtype no policy gives", family=FAMILY,
    template="precision departs from the policy in {module}: {said}, which no mp_policy field gives (the policy "
             "computes in {allowed|or})[, and so do {others_text} after it]",
    rests_on="the dtypes observer's per-module records (parameters seen, output, output's gradient) against every "
             "dtype the job's policies give (a module may widen to the master dtype)",
    not_claimed="that the module's own code casts: a hook or the engine may",
    example={"module": "layer0", "wrong": [{"field": "output", "dtype": "float16"}], "allowed": ["float32"],
             "others": ["layer1"]},
    fill=_module,
)
GRADS = NoteKind(
    code="N163", name="gradients read in another dtype than the master weights", family=FAMILY,
    template="the optimizer read the gradients of {params_text} in {dtypes|and}, expected {master} (the master "
             "weights' dtype: the reduced gradient is cast back to it)",
    rests_on="the dtype of each gradient as the optimizer read it, against the master weights'",
    not_claimed="that the update differs beyond rounding",
    example={"params": ["b"], "dtypes": ["bfloat16"], "master": "float32"},
    fill=lambda values: {"params_text": listed(values["params"])},
)
MASTER_LOWER = NoteKind(
    code="N164", name="master weights hold only lower-precision values", family=FAMILY,
    template="the {master} master weights {params_text} hold only {holds} values after step {step}: a {holds} copy "
             "was written back into the master weights (each update below that precision is lost)",
    rests_on="the master weights after each step: every value representable in a lower precision, where the "
             "standalone copy's are not (or only later)",
    not_claimed="which code wrote the copy back",
    example={"master": "float32", "params": ["w", "b"], "holds": "bfloat16", "step": 1},
    fill=lambda values: {"params_text": listed(values["params"])},
)

KINDS = [RAN, OVERRIDE, MODULE, GRADS, MASTER_LOWER]
