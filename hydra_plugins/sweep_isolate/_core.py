"""The isolation behind ``IsolateSweeper.sweep``: endpoints, batches, verdicts, report.

1. The endpoints (override maps): ``hydra.sweeper.failing`` / ``passing`` on top of the
   fixed overrides; or a failing job and its nearest passing job of a finished multirun
   (``from_sweep``); or, given a grid, jobs of the grid scouted in farthest-point order
   until one fails and one passes.
2. The changes between them, and ``sweep.analysis.isolate.ddmin`` with an oracle that launches a
   batch of probes (each ``repeat`` times, consecutive job numbers) through the
   launcher and reads each job's record (``status``, ``reason``, ``comparison``).
3. ``isolate.json`` after every batch (an interrupted isolation leaves what it knew),
   then ``isolate.md`` and the report on the terminal (``sweep.report.isolate_report``).

Job numbers follow the order of the batches, which depends only on the inputs and the
verdicts; so with ``resume=true`` and the same ``hydra.sweep.dir`` a rerun asks for the
same jobs in the same dirs and the finished ones are skipped.
"""

from __future__ import annotations

import atexit
import logging
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn
from omegaconf import OmegaConf

from sweep.analysis import isolate
from sweep.analysis.isolate import ERROR, FAIL, PASS, UNRESOLVED, Change, Subset
from sweep.analysis.evidence import rounding_only
from sweep.analysis.grid import failed, passed
from sweep.analysis.rounding import measured
from sweep.report.isolate_report import ISOLATE_JSON, reason_text, verdict, write_isolation

log = logging.getLogger(__name__)

Overrides = Dict[str, Optional[str]]
VERDICT_OF_STATUS = {"ok": PASS, "fail": FAIL, "error": ERROR, "timeout": ERROR}


def clean_passes(passes: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The passing report rows (``sweep.report.summary.collect``) a passing endpoint is taken
    from: those whose copies are equal or differ within their rounding envelope, where any are; a
    passing job beyond its measured envelope carries a drift below the tolerance (a fault Adam
    hides), so it is an endpoint only where no other job passes."""
    clean = [r for r in passes if not (r.get("first_diff_step") is not None and not rounding_only(r) and measured(r))]
    return clean or list(passes)


def from_sweep_rows(path: str, failing_job: Optional[int] = None) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]],
                                                                              List[Dict[str, Any]], Optional[str]]:
    """A finished multirun's rows at ``path`` (``sweep.report.summary.collect``, each with
    ``ran``: the overrides its job ran with), those failing for a cause (only ``failing_job``
    where given) and those passing (``failed``/``passed``), and why they give no isolation's
    endpoints, in one line (no job failing for a cause, none passing, ``failing_job`` not one that
    failed), else ``None``. The one rule :meth:`Isolation._from_sweep` and the sweeper's
    constructor (the command line's check, before Hydra starts) read."""
    from sweep.report.summary import collect

    rows = collect(path)
    for row in rows:
        row["ran"] = _as_ran(row)
    fails = [r for r in rows if failed(r)]  # a tolerance failure within the envelope is no fault to isolate
    passes = [r for r in rows if passed(r)]
    if failing_job is not None:
        fails = [r for r in fails if r["job"] == failing_job]
        if not fails:
            return rows, fails, passes, (f"job {failing_job} of {path} did not fail for a cause (it passed, or "
                                         "failed its tolerance only, within its rounding envelope)")
    if not fails or not passes:
        return rows, fails, passes, (f"hydra.sweeper.from_sweep={path} needs a failing and a passing job "
                                     f"({len(fails)} fail, {len(passes)} ok): nothing to isolate")
    return rows, fails, passes, None


def _pairs(items: Sequence[str]) -> Overrides:
    """``["a=1", "b=2"]`` -> ``{"a": "1", "b": "2"}``.

    Raises:
        ValueError: an item without ``=``.
    """
    out: Overrides = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        if not sep:
            raise ValueError(f"{item!r} is not an override (key=value)")
        out[key] = value
    return out


def parse_arguments(sweeper: Any, arguments: List[str], with_params: bool = True
                    ) -> Tuple[Overrides, Dict[str, List[str]]]:
    """``hydra.sweeper.params`` (unless ``with_params=False``: the command line alone) then the
    command line (a later key replaces an earlier one, as for Hydra's basic sweeper), split
    into fixed overrides (key -> value) and swept ones (key -> values)."""
    config_loader = sweeper.hydra_context.config_loader if sweeper.hydra_context else None
    parser = OverridesParser.create(config_loader=config_loader)
    params = [f"{k}={v}" for k, v in sweeper.params.items() if v is not None] if with_params else []
    fixed: Overrides = {}
    grid: Dict[str, List[str]] = {}
    for override in parser.parse_overrides(params + list(arguments)):
        key = override.get_key_element()
        fixed.pop(key, None)
        grid.pop(key, None)
        if override.is_sweep_override():
            if not override.is_discrete_sweep():
                raise ValueError(f"{key}: the isolate sweeper takes comma lists and choice(), not ranges or intervals")
            grid[key] = list(override.sweep_string_iterator())
        else:
            fixed[key] = override.get_value_element_as_str()
    return fixed, grid


def record_of(ret: JobReturn) -> Dict[str, Any]:
    """The job's record (``sweep.run.job.run``'s return value), or an ``error`` record when
    the job raised or returned something else."""
    try:
        value = ret.return_value
    except Exception as exc:  # the task raised: Hydra keeps the exception in the JobReturn
        return {"status": "error", "reason": f"job raised {type(exc).__name__}: {exc}"}
    if not isinstance(value, dict) or value.get("status") not in VERDICT_OF_STATUS:
        return {"status": "error", "reason": f"job returned no record with a status (got {type(value).__name__})"}
    return value


def rounding_fail(record: Dict[str, Any]) -> bool:
    """Whether a failing job fails its tolerance only, within its rounding envelope
    (``sweep.analysis.evidence.tolerance_only``: the tolerance is finer than this precision
    holds, no fault), so the isolation holds it as passing: it has nothing to isolate."""
    from sweep.analysis.evidence import job_evidence, tolerance_only
    from sweep.records import JobRecord

    if record.get("status") != "fail":
        return False
    try:
        result = JobRecord.from_dict(record)
    except Exception:  # a record of another shape: judged by its status
        return False
    return tolerance_only({"status": "fail", "result": result, **job_evidence(result)})


def resolution_of(record: Dict[str, Any]) -> Tuple[Optional[float], Optional[float]]:
    """``(resolution, departure)`` of a job's losses, as the grid's rules read them: the
    smallest loss difference it can show where it differs by float rounding only
    (``sweep.analysis.rounding.resolution``, where ``sweep.analysis.evidence.rounding_only``),
    and how far its losses leave their envelope (``sweep.analysis.rounding.departure``: an
    upper bound); ``None`` for either otherwise (equal to standalone, no envelope measured, a
    record of another shape)."""
    from sweep.analysis.evidence import job_evidence, rounding_only
    from sweep.analysis.rounding import departure, resolution
    from sweep.records import JobRecord

    try:
        result = JobRecord.from_dict(record)
    except Exception:  # a record of another shape: nothing to measure
        return None, None
    row = {"status": record.get("status"), "result": result,
           "max_abs_diff": (record.get("comparison") or {}).get("max_abs_diff"), **job_evidence(result)}
    return (resolution(row) if rounding_only(row) else None), departure(row)


def job_row(num: int, overrides: List[str], record: Dict[str, Any], **extra: Any) -> Dict[str, Any]:
    """One launched job for the report: number, overrides, status, reason, metrics, and
    ``rounding_fail`` (:func:`rounding_fail`: it fails its tolerance within its rounding envelope) and
    ``resolution``, ``departure`` (:func:`resolution_of`)."""
    comparison = record.get("comparison") or {}
    row = {"job": num, "overrides": overrides, "status": record["status"], "reason": record.get("reason"),
           "rounding_fail": rounding_fail(record)}
    row["resolution"], row["departure"] = resolution_of(record)
    for key in ("first_fail_step", "n_fail", "n_steps", "max_abs_diff", "mean_signed_diff"):
        value = comparison.get(key)
        row[key] = float(value) if key in ("max_abs_diff", "mean_signed_diff") and value is not None else value
    losses = record.get("losses") or {}
    if losses.get("standalone") and losses.get("distributed"):  # one copy's loss non-finite: its finite steps' diff
        from sweep.analysis.compare import nonfinite_in_one
        from sweep.io import read_floats

        row["nonfinite_in"] = nonfinite_in_one(read_floats(losses["standalone"]), read_floats(losses["distributed"]))
    row["resumed"] = bool(record.get("resumed"))
    row.update(extra)
    return row


class Isolation:
    """The state of one isolation run: job numbering, every job, every probe."""

    def __init__(self, sweeper: Any, arguments: List[str]) -> None:
        self.sweeper = sweeper
        self.arguments = list(arguments)
        self.sweep_dir = Path(sweeper.config.hydra.sweep.dir)
        self.returns: List[Sequence[JobReturn]] = []
        self.levels: Dict[str, List[str]] = {}  # grid factor -> its levels (grid and from_sweep modes)
        self.jobs: List[Dict[str, Any]] = []
        self.seen: Dict[frozenset, List[Dict[str, Any]]] = {}  # a probe's overrides -> its job rows
        self.departures: List[float] = []  # the failing probes' largest loss differences (verdict)
        self.probes: List[Dict[str, Any]] = []
        self.next_idx = 0
        self.began = time.monotonic()
        self.state: Dict[str, Any] = {"sweep_dir": str(self.sweep_dir), "repeat": sweeper.repeat,
                                      "max_jobs": sweeper.max_jobs, "status": "running"}

    # ---- launching -------------------------------------------------------------------
    def room(self) -> Optional[int]:
        """Jobs the budget still allows (``None``: no limit)."""
        return None if self.sweeper.max_jobs is None else max(self.sweeper.max_jobs - self.next_idx, 0)

    def launch(
        self, probe_overrides: List[List[str]], phase: str, extra: List[Dict[str, Any]]
    ) -> List[List[Dict[str, Any]]]:
        """Launch every probe ``repeat`` times as one batch; returns each probe's job rows.
        A probe whose overrides (as a set) already ran gets its earlier jobs, unlaunched."""
        repeat = self.sweeper.repeat
        keys = [frozenset(_pairs(o).items()) for o in probe_overrides]
        new = [i for i, key in enumerate(keys) if key not in self.seen and key not in keys[:i]]
        batch = [list(probe_overrides[i]) for i in new for _ in range(repeat)]
        if batch:
            self.sweeper.validate_batch_is_legal(batch)
            first = self.next_idx
            last = first + len(batch) - 1
            log.info(f"isolate: {phase}: {len(new)} probe(s) x {repeat} = jobs {first}..{last}")
            results = self.sweeper.launcher.launch(batch, initial_job_idx=first)
            self.next_idx += len(batch)
            self.returns.append(results)
            for n, i in enumerate(new):
                per = []
                for r in range(repeat):
                    k = n * repeat + r
                    row = job_row(first + k, probe_overrides[i], record_of(results[k]), phase=phase, repeat=r,
                                  **extra[i])
                    self.jobs.append(row)
                    per.append(row)
                self.seen[keys[i]] = per
        return [self.seen[key] for key in keys]

    def verdict(self, rows: List[Dict[str, Any]]) -> str:
        # a tolerance failure within the job's rounding envelope is no fault (issue 49): it passes here,
        # unless that envelope is too wide to show what a failing probe departs by (a coarser precision
        # hides the fault, sweep.analysis.evidence.masks): no verdict then, neither a pass nor a fail
        verdicts = [PASS if row.get("rounding_fail") else VERDICT_OF_STATUS[row["status"]] for row in rows]
        self.departures += [row["departure"] for row, v in zip(rows, verdicts)
                            if v == FAIL and row.get("departure") is not None]
        least = min(self.departures, default=None)
        masked = [v == PASS and least is not None and (row.get("resolution") or 0.0) >= least
                  for row, v in zip(rows, verdicts)]
        return isolate.combine([UNRESOLVED if m else v for m, v in zip(masked, verdicts)])

    def save(self, **update: Any) -> None:
        self.state.update(update, jobs=self.jobs, probes=self.probes, n_jobs=self.next_idx,
                          wall_s=time.monotonic() - self.began)
        write_isolation(self.sweep_dir, self.state, final=False)

    # ---- endpoints ---------------------------------------------------------------------
    def endpoints(self) -> Tuple[Overrides, Overrides, Optional[Dict[Subset, str]], int, str]:
        """``(passing, failing, known verdicts or None, grid size, how they were chosen)``."""
        sweeper = self.sweeper
        fixed, grid = parse_arguments(sweeper, self.arguments)
        if sweeper.failing is not None:
            swept = [o.get_key_element() for o in OverridesParser.create().parse_overrides(self.arguments)
                     if o.is_sweep_override()]
            if swept:
                raise ValueError("with hydra.sweeper.failing/passing the command line takes fixed overrides only, "
                                 f"not comma lists ({', '.join(swept)}); the grid's own swept keys are ignored")
            failing, passing = {**fixed, **_pairs(sweeper.failing)}, {**fixed, **_pairs(sweeper.passing)}
            n = len(isolate.changes_between(passing, failing))
            return passing, failing, None, 2 ** n, "given: hydra.sweeper.failing / hydra.sweeper.passing"
        if sweeper.from_sweep:
            # The grid's jobs ran with their own overrides, its grid's params included: this
            # process's default grid (hydra.sweeper.params, e.g. ablation=report's steps=200)
            # is not theirs; only what the command line fixes goes on top.
            return self._from_sweep(parse_arguments(sweeper, self.arguments, with_params=False)[0])
        if grid:
            return self._scout(fixed, grid)
        raise ValueError(
            "the isolate sweeper needs its endpoints: hydra.sweeper.failing=[...] and hydra.sweeper.passing=[...], "
            "or hydra.sweeper.from_sweep=<a multirun dir>, or a grid (key=a,b on the command line or in "
            "hydra.sweeper.params)"
        )

    def _pick_passing(self, failing: Overrides, candidates: List[Tuple[Any, Overrides]]) -> Tuple[Any, Overrides]:
        sign = 1 if self.sweeper.pick == "nearest" else -1
        return min(candidates, key=lambda c: sign * isolate.hamming(failing, c[1]))  # ties: the first

    def _from_sweep(self, fixed: Overrides) -> Tuple[Overrides, Overrides, None, int, str]:
        rows, fails, passes, unusable = from_sweep_rows(self.sweeper.from_sweep, self.sweeper.failing_job)
        if unusable:
            raise ValueError(unusable)
        for row in rows:
            for key, value in row["ran"].items():
                self.levels.setdefault(key, [])
                if value not in self.levels[key]:
                    self.levels[key].append(value)
        self.levels = {k: v for k, v in self.levels.items() if len(v) > 1 and k.lstrip("+") not in fixed}
        bad = fails[0]
        good, _ = self._pick_passing(bad["ran"], [(r, r["ran"]) for r in clean_passes(passes)])
        failing, passing = {**bad["ran"], **fixed}, {**good["ran"], **fixed}
        how = (f"from {self.sweeper.from_sweep}: failing job {bad['job']}, its {self.sweeper.pick} passing job "
               f"{good['job']}, each probe with the overrides its grid job ran with; the endpoints are run again here")
        if fixed:
            how += " (and, on top of every probe, " + " ".join(f"{k}={v}" for k, v in fixed.items()) + ")"
        return passing, failing, None, len(rows), how

    def _scout(
        self, fixed: Overrides, grid: Dict[str, List[str]]
    ) -> Tuple[Overrides, Overrides, Dict[Subset, str], int, str]:
        """Run grid jobs, spread out, ``scout_batch`` at a time, until one fails and one passes."""
        keys = list(grid)
        self.levels = {k: list(v) for k, v in grid.items() if len(v) > 1}
        points: List[Overrides] = [{}]
        for key in keys:
            points = [{**p, key: v} for p in points for v in grid[key]]
        order = isolate.spread_order(points)
        passed: List[Tuple[int, Overrides, List[Dict[str, Any]]]] = []
        failed: List[Tuple[int, Overrides, List[Dict[str, Any]]]] = []
        scouted = 0
        while not (passed and failed):
            room = self.room()
            size = self.sweeper.scout_batch
            if room is not None:
                size = min(size, room // self.sweeper.repeat)
            chosen = [i for _, i in zip(range(size), order)]
            if not chosen:
                break
            maps = [{**fixed, **points[i]} for i in chosen]
            rows = self.launch([[f"{k}={v}" for k, v in m.items()] for m in maps], "scout",
                               [{"grid_job": i} for i in chosen])
            for i, m, per in zip(chosen, maps, rows):
                verdict = self.verdict(per)
                self.probes.append({"probe": len(self.probes), "phase": "scout", "round": None, "granularity": None,
                                    "changes": None, "applied": f"grid job {i}", "verdict": verdict,
                                    "jobs": [r["job"] for r in per]})
                (passed if verdict == PASS else failed if verdict == FAIL else []).append((i, m, per))
            scouted += len(chosen)
            self.save()
        if not (passed and failed):
            raise _Stop("budget" if self.room() == 0 else "endpoints",
                        f"scouted {scouted} of {len(points)} grid jobs without finding "
                        f"{'a failing' if not failed else 'a passing'} one" + (" (budget)" if self.room() == 0 else ""),
                        len(points))
        bad_idx, failing, bad_rows = failed[0]
        good_idx, passing = self._pick_passing(failing, [(i, m) for i, m, _ in passed])
        good_rows = next(per for i, _, per in passed if i == good_idx)
        self._endpoint_jobs = {"passing": [r["job"] for r in good_rows], "failing": [r["job"] for r in bad_rows]}
        how = (f"scouted {scouted} of the grid's {len(points)} jobs: failing grid job {bad_idx}, its "
               f"{self.sweeper.pick} passing grid job {good_idx}")
        n = len(isolate.changes_between(passing, failing))
        return passing, failing, {(): PASS, tuple(range(n)): FAIL}, len(points), how

    # ---- the run ---------------------------------------------------------------------
    def run(self) -> None:
        sweep_dir = self.sweep_dir
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.sweeper.config, sweep_dir / "multirun.yaml")
        self._endpoint_jobs: Dict[str, List[int]] = {}
        try:
            passing, failing, known, grid_jobs, how = self.endpoints()
        except _Stop as stop:
            self.save(status=stop.status, reason=stop.reason, grid_jobs=stop.grid_jobs, changes=[], minimal=[])
            return self.finish()
        changes = isolate.changes_between(passing, failing)
        grid = "the full grid"
        if self.sweeper.failing is not None:
            grid = f"the full grid over the {len(changes)} changed keys (2 levels each)"
        self.state.update(endpoints_from=how, grid_jobs=grid_jobs, grid=grid, passing=passing, failing=failing,
                          changes=[_change(c) for c in changes])
        if not changes:
            self.save(status="endpoints", reason="the two configs are the same: nothing to isolate", minimal=[])
            return self.finish()
        jobs_of: Dict[Subset, List[int]] = {}
        if known:
            jobs_of[()] = self._endpoint_jobs["passing"]
            jobs_of[tuple(range(len(changes)))] = self._endpoint_jobs["failing"]

        def oracle(subsets: List[Subset], phase: str) -> List[str]:
            overrides = [isolate.apply(passing, changes, s) for s in subsets]
            extra = [{"changes": list(s)} for s in subsets]
            rows = self.launch(overrides, phase, extra)
            verdicts = []
            for s, per in zip(subsets, rows):
                verdict = self.verdict(per)
                jobs_of[s] = [r["job"] for r in per]
                self.probes.append({
                    "probe": len(self.probes), "phase": phase, "round": None, "granularity": None,
                    "changes": list(s), "applied": " + ".join(str(changes[i]) for i in s) or "(passing config)",
                    "verdict": verdict, "jobs": jobs_of[s],
                })
                verdicts.append(verdict)
            self.save()
            return verdicts

        room = self.room()
        budget = None if room is None else room // self.sweeper.repeat
        result = isolate.ddmin(len(changes), oracle, budget=budget, known=known)
        by_subset = {tuple(p["changes"]): p for p in self.probes if p["changes"] is not None}
        for probe in result.probes:  # round and granularity as ddmin numbered them
            by_subset[probe.changes].update(round=probe.round, granularity=probe.granularity)
        minimal = list(result.minimal)
        proof = None
        if result.status != "endpoints" and minimal:
            proof = {"passing": jobs_of.get((), []), "failing": jobs_of.get(result.minimal, [])}
        removals = {changes[c].key: result.verdicts.get(tuple(x for x in result.minimal if x != c))
                    for c in result.minimal}
        answer = " + ".join(str(changes[i]) for i in minimal)
        reason = reason_text(result.status, result.why)
        by_job = {r["job"]: r for r in self.jobs}
        endpoint_jobs = jobs_of.get((), []) + jobs_of.get(tuple(range(len(changes))), [])
        ends = [by_job[j] for j in endpoint_jobs if j in by_job and by_job[j].get("rounding_fail")]
        if result.status == "endpoints" and ends:  # why a config that fails its tolerance passes here
            reason += ("; job " + ", ".join(str(r["job"]) for r in ends) + " fails its tolerance only, within its "
                       "rounding envelope: the tolerance is finer than this precision holds, no fault to isolate")
        self.save(status=result.status, reason=reason, why=result.why, minimal=[_change(changes[i]) for i in minimal],
                  answer=answer, one_minimal=result.one_minimal, unproven=[changes[i].key for i in result.unproven],
                  removals=removals, proof=proof, deciding=[changes[i].key for i in minimal],
                  interaction=result.interaction)
        if minimal and result.status == "isolated":
            self.others(result, changes, oracle, jobs_of)
        if minimal and result.status != "endpoints" and self.levels and self.sweeper.context:
            self.context(isolate.apply(passing, changes, result.minimal), answer, [changes[i].key for i in minimal])
        self.finish()

    def others(self, result: Any, changes: List[Change], oracle: Any, jobs_of: Dict[Subset, List[int]]) -> None:
        """Whether the failure has another cause: the passing config with every change but the
        minimal set's (one probe, unless ddmin already ran it). If that fails too, ddmin again
        over those changes names the other failure-inducing set ("also fails alone"), so one
        of two independent causes is never called the one that decides it; if it passes,
        the minimal set decides it. ``state["others"]``: ``{"verdict", "jobs", "minimal":
        [changes], "answer"}``."""
        rest = tuple(i for i in range(len(changes)) if i not in result.minimal)
        if not rest:
            return
        room = self.room()
        verdict = result.verdicts.get(rest)
        if verdict is None:
            if room is not None and room < self.sweeper.repeat:
                self.save(others={"verdict": None, "reason": "the budget ran out before it was tested"})
                return
            verdict = oracle([rest], "others")[0]
        found: Dict[str, Any] = {"verdict": verdict, "jobs": jobs_of.get(rest, [])}
        if verdict == isolate.FAIL:
            def sub(subsets: List[Subset], phase: str) -> List[str]:
                return oracle([tuple(rest[i] for i in s) for s in subsets], "others")

            room = self.room()
            known = {tuple(range(len(rest))): isolate.FAIL}
            again = isolate.ddmin(len(rest), sub, budget=None if room is None else room // self.sweeper.repeat,
                                  known=known)
            other = [rest[i] for i in again.minimal]
            found.update(minimal=[_change(changes[i]) for i in other], status=again.status,
                         answer=" + ".join(str(changes[i]) for i in other), jobs=jobs_of.get(tuple(other), []))
        self.save(others=found)

    def context(self, failing_probe: List[str], answer: str, keys: List[str]) -> None:
        """The minimal failing probe with one grid factor outside the minimal set changed
        to each of its other levels, as one batch: a factor is a condition of the
        failure when some level makes it pass (``sweep.analysis.isolate.conditions``)."""
        base = _pairs(failing_probe)
        wanted = isolate.context_probes(base, self.levels, skip=keys)
        room = self.room()
        probes = wanted if room is None else wanted[: room // self.sweeper.repeat]
        verdicts: Dict[Tuple[str, str], str] = {}
        context = []
        if probes:
            overrides = [[f"{k}={v}" for k, v in {**base, key: level}.items() if v is not None]
                         for key, level in probes]
            rows = self.launch(overrides, "context", [{"context": f"{k}={v}"} for k, v in probes])
            for (key, level), per in zip(probes, rows):
                verdict = self.verdict(per)
                verdicts[(key, level)] = verdict
                jobs = [r["job"] for r in per]
                context.append({"key": key, "level": level, "verdict": verdict, "jobs": jobs})
                self.probes.append({"probe": len(self.probes), "phase": "context", "round": None, "granularity": None,
                                    "changes": None, "applied": f"{answer} + {key}={level}", "verdict": verdict,
                                    "jobs": jobs})
        found = isolate.conditions(base, verdicts)
        deciding = keys + list(found)
        self.save(context=context, context_complete=len(probes) == len(wanted), conditions=found,
                  deciding=deciding, interaction=len(deciding) >= 2)

    def finish(self) -> None:
        self.state.update(n_jobs=self.next_idx, wall_s=time.monotonic() - self.began)
        report = write_isolation(self.sweep_dir, self.state, final=True)
        from sweep.report.terminal import fit

        print("\n" + fit(report), flush=True)
        where = (f"isolation: {self.sweep_dir / 'isolate.md'} and {ISOLATE_JSON} "
                 f"(re-render: python -m sweep.report.isolate_report {self.sweep_dir})")
        print(f"\n{where}; the grid report that follows (summary.md) tabulates the probe jobs", flush=True)
        # The multirun's end callbacks (the grid report over the probes) print after this;
        # the answer goes last again, where the eye is, when the process exits.
        atexit.register(print, f"\n{fit(verdict(self.state))}\n{where}", flush=True)


def _as_ran(row: Dict[str, Any]) -> Overrides:
    """A grid job's overrides (the report's ``row["overrides"]``: keys without a ``+``, the
    run switches left out) with each key as the job gave it: ``+key`` or ``++key`` where its
    record's list adds the key (a probe without it would not compose)."""
    prefix = {}
    for item in getattr(row.get("result"), "overrides", None) or []:
        key = str(item).partition("=")[0]
        if key.startswith("+"):
            prefix[key.lstrip("+")] = key[: len(key) - len(key.lstrip("+"))]
    return {prefix.get(k, "") + k: v for k, v in row["overrides"].items()}


class _Stop(Exception):
    def __init__(self, status: str, reason: str, grid_jobs: int) -> None:
        super().__init__(reason)
        self.status, self.reason, self.grid_jobs = status, reason, grid_jobs


def _change(change: Change) -> Dict[str, Optional[str]]:
    return {"key": change.key, "passing": change.passing, "failing": change.failing}


def run_isolation(sweeper: Any, arguments: List[str]) -> List[Sequence[JobReturn]]:
    """``IsolateSweeper.sweep``: run the isolation and return every batch's JobReturns."""
    assert sweeper.config is not None and sweeper.launcher is not None
    isolation = Isolation(sweeper, arguments)
    isolation.run()
    return isolation.returns
