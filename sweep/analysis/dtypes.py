"""The dtypes a job ran against those its mixed-precision policy configures or implies.

Pure rules over ``JobRecord.dtypes`` (``{"configured": {...}, "observed": {...}}``): whether
the policy was applied (:func:`dtype_evidence`'s ``policy_applied``) and every observed dtype
that departs from the one the policy sets or implies (:func:`implied_dtypes`). Each departure is a
note (``sweep.records.Note``: N160-N164, their sentences in ``sweep.findings.notes_catalog.dtypes``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from sweep.records import Note, note

_CONFIG_KEY = {"param_forward": "param_dtype", "reduce": "reduce_dtype", "output": "output_dtype"}


def dtype_name(value: Optional[str], unknown: str) -> str:
    """``torch.bfloat16`` / ``Float32`` / ``float32`` -> ``bfloat16`` / ``float32``;
    ``unknown`` for ``None``."""
    return unknown if value is None else str(value).rsplit(".", 1)[-1].lower()


def implied_dtypes(configured: Dict[str, Any], master: str = "float32") -> Dict[str, Optional[str]]:
    """What each observed dtype should be under a ``MixedPrecisionPolicy`` (FSDP2's
    semantics, ``torch.distributed.fsdp.MixedPrecisionPolicy`` docs): the forward's
    parameters in ``param_dtype`` (default: the stored parameter's); gradients reduced in
    ``reduce_dtype`` (default: ``param_dtype``); the master weights and the optimizer
    state in the dtype the parameters were created in (``master``: ``model.init_dtype``).
    Keys: ``param_forward``, ``reduce``, ``master``, ``optimizer_state``; values dtype names."""
    param = dtype_name(configured.get("param_dtype"), "") or master
    return {
        "param_forward": param,
        "reduce": dtype_name(configured.get("reduce_dtype"), "") or param,
        "master": master,
        "optimizer_state": master,
    }


def dtype_evidence(record: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """``dtypes_configured``, ``dtypes_ran`` (``a/b/c`` strings: ``-`` for a default,
    ``?`` for unknown), ``policy_applied`` (configured ``param_dtype`` == observed
    ``param_forward``; ``None`` if either is unknown) and ``dtype_notes``: every observed
    dtype that differs from the one the policy configures or implies (:func:`implied_dtypes`),
    e.g. an fp32 policy that ran in lower precision; all ``None`` (notes ``[]``) for a
    result without ``dtypes``. ``record``: ``JobRecord.dtypes``."""
    if not record:
        return {"dtypes_configured": None, "dtypes_ran": None, "policy_applied": None, "dtype_notes": []}
    configured, observed = record.get("configured") or {}, record.get("observed") or {}
    wanted, ran = configured.get("param_dtype"), observed.get("param_forward")
    notes = []
    for key, expected in implied_dtypes(configured, dtype_name(configured.get("init_dtype"), "") or "float32").items():
        seen = observed.get(key)
        if seen is not None and expected is not None and dtype_name(seen, "") != expected:
            notes.append(note("N160", key=key, ran=dtype_name(seen, ""), expected=expected,
                              configured=bool(configured.get(_CONFIG_KEY.get(key, "")))))
    return {
        "dtypes_configured": "/".join(
            dtype_name(configured.get(k), "-") for k in ("param_dtype", "reduce_dtype", "output_dtype")
        ),
        "dtypes_ran": "/".join(dtype_name(observed.get(k), "?")
                               for k in ("param_forward", "reduce", "grad", "output", "master", "optimizer_state")),
        "policy_applied": None if wanted is None or ran is None else dtype_name(wanted, "") == dtype_name(ran, ""),
        "dtype_notes": notes,
    }


def override_notes(observed: Optional[Dict[str, Any]], master: str = "float32") -> List[Note]:
    """Where a per-module policy (``mp_policy.overrides``) was not applied, from the dtypes
    each named module's first forward ran (``observed["overrides"]``, the dtypes observer):
    its parameters in another dtype than the override's ``param_dtype`` (else ``master``:
    the stored dtype), its output in another than an ``output_dtype`` it sets, or, with
    ``cast_forward_inputs`` and a ``param_dtype``, its input in another (FSDP2 casts a
    unit's inputs to its ``param_dtype``). One note (``N161``) per override key and way it
    departs, naming the modules; ``[]`` where nothing was observed."""
    grouped: Dict[tuple, List[str]] = {}
    for name, entry in sorted(((observed or {}).get("overrides") or {}).items()):
        want = entry.get("want") or {}
        param = dtype_name(want.get("param_dtype"), "") or master
        checks = [(entry.get("param"), param, "param")]
        if want.get("output_dtype"):
            checks.append((entry.get("output"), dtype_name(want["output_dtype"], ""), "output"))
        if want.get("cast_forward_inputs") and want.get("param_dtype"):
            checks.append((entry.get("input"), param, "input"))
        wrong = tuple((field, dtype_name(seen, ""), expected) for seen, expected, field in checks
                      if seen is not None and dtype_name(seen, "") != expected)
        if wrong:
            grouped.setdefault((str(entry.get("key", name)), wrong), []).append(name)
    return [note("N161", key=key, modules=names, wrong=[{"field": f, "seen": s, "want": w} for f, s, w in wrong])
            for (key, wrong), names in grouped.items()]


def compute_dtypes(policies: List[Dict[str, Any]], master: str = "float32") -> List[str]:
    """The dtypes a module may compute and return in under the job's policies (``policies``:
    the root ``mp_policy`` and each ``mp_policy.overrides`` entry merged, as plain values):
    every policy's ``param_dtype`` (a unit without one computes in the master dtype),
    ``output_dtype`` and the master dtype (a module may widen, as a norm computing in
    float32 does); sorted names."""
    found = {master}
    for policy in policies:
        found.add(dtype_name(policy.get("param_dtype"), "") or master)
        if policy.get("output_dtype"):
            found.add(dtype_name(policy["output_dtype"], ""))
    return sorted(found)


def precision_notes(observed: Optional[Dict[str, Any]], policies: List[Dict[str, Any]], master: str = "float32",
                    standalone: Optional[Dict[str, Any]] = None) -> List[Note]:
    """Where the precision the distributed copy ran departs from its policy, from the dtypes
    observer's per-module and per-parameter records (``observed``: ``RankResult.dtypes_observed``
    with ``modules``, ``grads``, ``master_lower``; ``sweep.train.observers.dtypes``):

    * a module whose forward saw its own parameters, or returned, or got its output's
      gradient, in a dtype no policy gives (:func:`compute_dtypes`: a float16 output under a
      float32 policy), naming the first module in execution order and how many others;
    * a gradient the optimizer read in another dtype than the master weights' (FSDP and
      hyper-parallel cast the reduced gradient back to it);
    * float32 master weights that hold only lower-precision values after a step (a
      lower-precision copy written back into them), unless the standalone copy's do too
      (``standalone``: its ``dtypes_observed``).

    One note each (``N162``, ``N163``, ``N164``); ``[]`` where nothing departs or nothing was
    observed."""
    if not observed:
        return []
    allowed = compute_dtypes(policies, master)
    notes = []
    off = []
    for m in observed.get("modules") or []:
        wrong = [(field, dtype_name(m.get(field), "")) for field in ("params", "output", "grad_output")
                 if m.get(field) and dtype_name(m.get(field), "") not in allowed]
        if wrong:
            off.append((m["module"], wrong))
    if off:
        name, wrong = off[0]
        notes.append(note("N162", module=name, wrong=[{"field": f, "dtype": d} for f, d in wrong], allowed=allowed,
                          others=[n for n, _ in off[1:]]))
    grads = observed.get("grads") or {}
    off = sorted(n for n, d in grads.items() if d and dtype_name(d, "") != master)
    if off:
        kinds = sorted({dtype_name(grads[n], "") for n in off})
        notes.append(note("N163", params=off, dtypes=kinds, master=master))
    lower = observed.get("master_lower")
    theirs = (standalone or {}).get("master_lower")
    if lower and not (theirs and int(theirs.get("step", -1)) <= int(lower["step"])):
        notes.append(note("N164", master=master, params=list(lower["params"]), holds=lower["holds"],
                          step=int(lower["step"])))
    return notes
