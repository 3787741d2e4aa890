"""Sweep against sweep: the before/after check of a fix or a version bump.

``python -m sweep.report NEW --against OLD`` matches the jobs of two sweep dirs by
their resolved config (each job's ``result.json`` config, normalised: how the sweep ran
aside; the same grid, or two grids that share jobs, however their overrides were
spelled) and reports, per matched job, the status change and the change
of the key metrics, plus the jobs present in only one sweep. Pure functions over the
rows of ``sweep.report.summary.collect``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from tabulate import tabulate

Row = Dict[str, Any]
METRICS = ("first_fail_step", "n_fail", "max_abs_diff", "mean_signed_diff")
CHANGES = ("fixed", "broke", "still failing", "still passing", "other")


# Config keys that say how a sweep ran, not what a job computed: never part of a job's identity.
NOT_IDENTITY = ("resume", "replace_grid", "gate", "logger", "execution", "hydra")


def _key(row: Row) -> Any:
    """A job's identity: its resolved config (``result.json``'s), normalised (keys sorted,
    :data:`NOT_IDENTITY` left out), so ``mesh=dp2`` and ``mesh.mesh_shape=[2]``, or an
    override spelled ``+x=1`` and ``x=1``, are one job; the overrides where a job has no
    record (missing)."""
    import json

    result = row.get("result")
    config = getattr(result, "config", None)
    if not config:
        return ("overrides", tuple(sorted(row["overrides"].items())))
    return ("config", json.dumps({k: v for k, v in config.items() if k not in NOT_IDENTITY}, sort_keys=True,
                                 default=str))


def change(old: Optional[str], new: Optional[str]) -> str:
    """``fixed`` (was not ok, now ok), ``broke`` (was ok, now not), ``still failing``,
    ``still passing``, or ``other`` (neither judged, e.g. error -> timeout)."""
    if old == "ok" and new == "ok":
        return "still passing"
    if new == "ok":
        return "fixed"
    if old == "ok":
        return "broke"
    if old in ("fail", "error", "timeout", "missing") and new in ("fail", "error", "timeout", "missing"):
        return "still failing" if "fail" in (old, new) else "other"
    return "other"


def match(new_rows: Sequence[Row], old_rows: Sequence[Row]) -> Dict[str, Any]:
    """``{"pairs": [(new, old, change)], "only_new": [...], "only_old": [...], "counts":
    {change: n}}``; jobs match when their resolved configs are equal (:func:`_key`)."""
    old_by_key: Dict[Any, Row] = {}
    for row in old_rows:
        old_by_key.setdefault(_key(row), row)
    pairs, only_new, seen = [], [], set()
    for row in new_rows:
        old = old_by_key.get(_key(row))
        if old is None:
            only_new.append(row)
            continue
        seen.add(_key(row))
        pairs.append((row, old, change(old["status"], row["status"])))
    only_old = [r for r in old_rows if _key(r) not in seen]
    counts = {c: sum(1 for _, _, k in pairs if k == c) for c in CHANGES}
    return {"pairs": pairs, "only_new": only_new, "only_old": only_old, "counts": counts}


def _delta(new: Any, old: Any) -> Any:
    if isinstance(new, (int, float)) and isinstance(old, (int, float)):
        return new - old
    return None


def verdict(found: Dict[str, Any]) -> str:
    """``fixed: 16; broke: 0; still failing: 2; still passing: 14`` plus unmatched jobs."""
    c = found["counts"]
    text = "; ".join(f"{k}: {c[k]}" for k in CHANGES if c[k] or k in ("fixed", "broke", "still failing"))
    if found["only_new"] or found["only_old"]:
        text += f"; only in the new sweep: {len(found['only_new'])}; only in the old: {len(found['only_old'])}"
    return text


def render(found: Dict[str, Any], new_name: str, old_name: str, tablefmt: str = "simple",
           max_rows: Optional[int] = None) -> str:
    """The verdict, the matched jobs (changes first) and the unmatched ones."""
    order = {"broke": 0, "fixed": 1, "still failing": 2, "other": 3, "still passing": 4}
    pairs = sorted(found["pairs"], key=lambda p: (order[p[2]], p[0]["job"]))
    keys: List[str] = list(dict.fromkeys(k for new, _, _ in pairs for k in new["overrides"]))
    varying = [k for k in keys if len({new["overrides"].get(k) for new, _, _ in pairs}) > 1] or keys
    header = ["new job", "old job", *varying, "change", "status", *[f"Δ {m}" for m in METRICS]]
    body = []
    for new, old, kind in pairs:
        body.append([new["job"], old["job"], *(new["overrides"].get(k, "") for k in varying), kind,
                     f"{old['status']} -> {new['status']}",
                     *(_fmt(_delta(new.get(m), old.get(m))) for m in METRICS)])
    shown = body if max_rows is None else body[:max_rows]
    parts = [f"{new_name} against {old_name}: {verdict(found)}",
             "Matched jobs (by config; changes first):\n"
             + (tabulate(shown, headers=header, tablefmt=tablefmt, disable_numparse=True) if body else "none")]
    if max_rows is not None and len(body) > max_rows:
        parts[-1] += f"\n... {len(body) - max_rows} more rows"
    for title, rows in (("Only in the new sweep", found["only_new"]), ("Only in the old sweep", found["only_old"])):
        lines = [f"- job {r['job']} {r['status']}: " + " ".join(f"{k}={v}" for k, v in r["overrides"].items())
                 for r in rows]
        parts.append(f"{title}:\n" + ("\n".join(lines) or "none"))
    return "\n\n".join(parts)


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:+.3g}" if isinstance(value, float) else f"{value:+d}"
