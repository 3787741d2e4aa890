"""V132 no effect: a swept factor whose levels gave the same losses, bit for bit, in every one-factor pair.

A factor that changes nothing is worth knowing either way: a setting that by design leaves the
numerics alone (``reshard_after_forward`` on FSDP2 in fp32), which later sweeps can drop, or a
factor that never reached the training (a ``runner=command`` whose command does not read it:
``runner.args.reduce=mean,sum`` swept, the script's ``--reduce`` flag never passed). Its
rows' levels would otherwise read as tested.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from sweep.analysis.grid import factors, one_factor_pairs
from sweep.findings.base import Context, Finding, Kind, Row
from sweep.findings.quiet import case


def losses(row: Row) -> Optional[Tuple[List[Any], List[Any]]]:
    """The job's recorded ``(distributed, standalone)`` losses (``JobRecord.losses``: floats, one
    per step), or ``None`` where the record has none."""
    found = getattr(row.get("result"), "losses", None) or {}
    dist, own = found.get("distributed"), found.get("standalone")
    return (list(dist), list(own)) if dist and own else None


def same(a: Row, b: Row) -> bool:
    """Both jobs recorded losses and they are equal bit for bit, both copies, at every step (a
    NaN never equals: two jobs that both diverge are not called alike), and the jobs ended
    alike (a level that fails on what the losses do not show, replicas that disagree, has an
    effect)."""
    first, second = losses(a), losses(b)
    if first is None or second is None or a.get("status") != b.get("status"):
        return False
    return all(np.array_equal(np.asarray(x, dtype=float), np.asarray(y, dtype=float)) for x, y in zip(first, second))


def command_template(rows: Sequence[Row]) -> Optional[str]:
    """``runner.command`` as written (``${...}`` not yet filled in) where the jobs ran a command
    (``runner=command``: ``JobRecord.engine["templates"]``), else ``None``."""
    for row in rows:
        engine = getattr(row.get("result"), "engine", None) or {}
        if engine.get("runner") == "command":
            return str((engine.get("templates") or {}).get("command") or "")
    return None


def interpolates(template: str, factor: str) -> bool:
    """Whether ``template`` reads ``factor`` as ``${factor}`` or one of its fields (``${factor.name}``)."""
    return re.search(r"\$\{" + re.escape(factor) + r"[.}]", template) is not None


def noted(row: Row, factor: str) -> bool:
    """Whether the job's notes already say ``factor`` had no effect (``sweep.run.judge.effect_notes``:
    an engine that does not use it)."""
    return any(str(n).startswith(f"{factor} had no effect") for n in row.get("note_list") or [])


def still(rows: Sequence[Row]) -> Dict[str, int]:
    """Each factor all of whose one-factor pairs (at least one) recorded the same losses bit
    for bit, both copies (:func:`same`), with its number of pairs; in the factors' order. A
    factor every job of whose pairs notes it had no effect is left to that note (V154)."""
    pairs: Dict[str, List[bool]] = defaultdict(list)
    said: Dict[str, List[bool]] = defaultdict(list)
    for factor, a, b in one_factor_pairs(rows):
        pairs[factor].append(same(a, b))
        said[factor].append(noted(a, factor) and noted(b, factor))
    return {f: len(pairs[f]) for f in factors(rows) if pairs.get(f) and all(pairs[f]) and not all(said[f])}


def check(ctx: Context) -> List[Finding]:
    found = still(ctx.rows)
    template = command_template(ctx.rows)
    if not found or (case(ctx) == "equal" and template is None):  # every job equals standalone: V114 says it all
        return []
    unread = [f for f in found if template is not None and not interpolates(template, f)]
    return [KIND.make(levels=list(found), evidence=("losses", "overrides"), strength=sum(found.values()),
                      names=list(found), pairs=sum(found.values()), unread=unread)]


KIND = Kind(
    code="V132", name="no effect", tier="contrast",
    template="No effect on the losses: {names|and} gave the same losses bit for bit, standalone and distributed, in "
             "every one-factor pair along {names|?it:them} ({pairs} in all)[; your command's text does not "
             "interpolate {unread|and}: a script that does not read {unread|?it:them} from $SWEEP_JOB_CONFIG or the "
             "SWEEP_* variables either never sees {unread|?it:them}].",
    rests_on="every one-factor pair along the factor (the jobs agree in every other factor), both jobs judged, "
             "their recorded losses equal at every step, both copies",
    not_claimed="that the factor cannot matter elsewhere (another model, more steps, another device); the tensors "
                "beyond the losses",
    check=check, example={"names": ["reshard_after_forward", "runner.args.reduce"], "pairs": 8,
                          "unread": ["runner.args.reduce"]},
)
