"""A job's one line (``[status] overrides  key numbers  [notes]  (wall)``): what a run prints
per job, and ``python -m sweep.report`` on a single run's dir again."""

from __future__ import annotations

import math
from typing import Sequence

from sweep.records import JobRecord


def summary_line(record: JobRecord, label: str = "", constant: Sequence[str] = ()) -> str:
    """One human line per job: status, overrides (less ``constant``: those every job of
    the multirun has, printed once at its start), and the key number."""
    c = record.comparison or {}
    head = f"[{record.status:>7}] {label}{'(resumed) ' if record.resumed else ''}"
    shown = [o for o in record.overrides if o not in set(constant)]
    head += " ".join(shown) or ("(the overrides of every job)" if record.overrides else "(defaults)")
    if record.judged and c:
        extra = f"max|diff|={c['max_abs_diff']:.3g} mean diff={c['mean_signed_diff']:+.3g}"
        if c.get("first_nonfinite_step") is not None:  # the diffs above are over the finite steps only
            extra = f"non-finite loss from step {c['first_nonfinite_step']}; over the finite steps {extra}"
        if c.get("first_fail_step") is not None:
            extra += f" first fail step={c['first_fail_step']} ({c['n_fail']}/{c['n_steps']})"
        else:  # the losses within tolerance: what a failing job fails on, in short
            from sweep.analysis.evidence import unseen_failure

            unseen = unseen_failure({"status": record.status, "first_fail_step": None, "reason": record.reason})
            extra += f" fails on: {unseen}" if unseen else ""
        if record.repeats:
            spread = record.repeat_spread or {}
            extra += (f" NONDETERMINISTIC: {len(record.repeats)} repeats differ by up to "
                      f"{spread.get('distributed_max_abs', math.nan):.3g}" if record.nondeterministic
                      else f" {len(record.repeats)} repeats agree")
        return f"{head}  {extra}{ran_note(record)}{tolerance_note(record)}{beyond_note(record)}  " \
               f"({record.timings_s.get('wall', math.nan):.1f}s)"
    return f"{head}  {record.reason}"


def beyond_note(record: JobRecord) -> str:
    """What a passing job's line adds where its losses leave their rounding envelope
    (``JobRecord.envelope``'s ``loss``: ``within`` false), or, the losses within it, its traced
    tensors or updates do (``first_real_step``, a drift class other than rounding): the status
    judges the tolerance only, and a fault may move the numbers by less than it yet by far more
    than rounding does; empty otherwise."""
    loss = (record.envelope or {}).get("loss") or {}
    if record.status != "ok" or not (record.envelope or {}).get("measured"):
        return ""
    if loss.get("within") is not False:  # the losses within it: a traced tensor or update may still leave it
        from sweep.analysis.evidence import drift_class, parting_step, record_row

        row = record_row(record)
        cls = drift_class(row)
        if cls in (None, "rounding") or row.get("first_real_step") is None:
            return ""
        return (f"  [within tolerance, yet its traced tensors leave their rounding envelope from step "
                f"{parting_step(row)} ({cls}): more than float rounding]")
    ratio = loss.get("ratio")
    size = f" (up to {ratio:.3g}x it)" if isinstance(ratio, (int, float)) and math.isfinite(ratio) else ""
    return (f"  [within tolerance, yet the losses leave their rounding envelope from step "
            f"{loss.get('first_beyond_step')}{size}: more than float rounding]")


def tolerance_note(record: JobRecord) -> str:
    """What a failing job's line adds where it fails the tolerance only, within its rounding
    envelope (``sweep.analysis.rounding.tolerance_only``): the tolerance is finer than this
    precision holds, and the tolerance that would hold; empty otherwise."""
    from sweep.analysis.envelope import hold_text
    from sweep.analysis.evidence import record_row, tolerance_only

    if record.status != "fail" or not tolerance_only(record_row(record)):
        return ""
    found = record.envelope or {}
    would = hold_text((found.get("loss") or {}).get("band"))
    return (f"  [within its rounding envelope ({found.get('dtype')}): the tolerance is finer than this precision "
            f"holds{'; ' + would + ' would hold' if would else ''}]")


def ran_note(record: JobRecord) -> str:
    """What the job line adds when the engine ran otherwise than configured: the entry
    point that ran where it is not the configured one (``Engine.info()``'s ``api.name``
    against its ``api_configured``: hyper-parallel's ``hsdp`` where ``fully_shard`` was
    asked for) and the collectives it emulated (``collectives_emulated``); empty if neither."""
    engine = record.engine or {}
    ran, wanted = (engine.get("api") or {}).get("name"), engine.get("api_configured")
    parts = [f"ran {ran}, not {wanted}"] if ran and wanted and ran != wanted else []
    if engine.get("collectives_emulated"):
        parts.append("emulated " + ", ".join(map(str, engine["collectives_emulated"])))
    return f"  [{'; '.join(parts)}]" if parts else ""
