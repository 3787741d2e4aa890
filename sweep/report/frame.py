"""A sweep as pandas DataFrames, for notebooks: ``sweep.load(dir)`` and ``sweep.load_steps(dir)``.

pandas is an optional extra (``pip install '.[pandas]'``), imported inside the functions:
``import sweep`` never imports it. Without it, both functions raise ``ImportError`` with
one line naming the extra.

- :func:`load`: one row per job of the sweep (the rows of :func:`sweep.report.summary.collect`,
  missing jobs included), with every value of the job's resolved config as a dotted
  column (``optimizer.lr``, ``mesh.mesh_shape``; lists become tuples, so columns can be
  grouped on), constant ones too.
- :func:`load_steps`: long format, one row per job, rank and step, with the rank's
  distributed loss, the standalone loss and their difference.

Either takes a sweep dir (``hydra.sweep.dir``) or a single run's dir (``hydra.run.dir``,
holding ``result.json``): that is one job, numbered 0.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from sweep.errors import RecordError
from sweep.io import read_floats
from sweep.layout import JobDir
from sweep.records import JobRecord, RankResult

#: leading columns of :func:`load`, in this order; then the config columns, then the metrics
JOB_COLUMNS = ("job", "status", "reason", "job_dir")
#: columns of :func:`load_steps`, in this order
STEP_COLUMNS = ("job", "step", "rank", "standalone", "distributed", "difference")


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise ImportError(
            "sweep.load and sweep.load_steps need pandas: pip install 'sweep-numerics[pandas]' "
            "(in a checkout: pip install -e '.[pandas]')"
        ) from None
    return pandas


def flatten(config: Any, prefix: str = "") -> Dict[str, Any]:
    """A nested dict as ``{"a.b.c": value}``; lists become tuples (hashable, so a column
    of them can be grouped on); an empty dict has no values and gives no column. A
    non-dict ``config`` is ``{prefix: config}``."""
    if isinstance(config, dict):
        out: Dict[str, Any] = {}
        for key, value in config.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(config, list):
        config = tuple(config)
    return {prefix: config}


def _single_run(path: Path) -> bool:
    return JobDir(path).result.exists() and not any(p.name.isdigit() for p in path.iterdir() if p.is_dir())


def _rows(path: Path) -> List[Dict[str, Any]]:
    """:func:`sweep.report.summary.collect` of a sweep dir, or a one-row equivalent of a run dir."""
    from sweep.report.summary import collect

    if not _single_run(path):
        rows = collect(path)
        for row in rows:
            row["job_dir"] = str(path / str(row["job"]))
        return rows
    # a single run: the same row the report would build for it, as job 0
    from sweep.report.summary import collect_job

    row = collect_job(path)
    row["job_dir"] = str(path)
    return [row]


def load(path: Path | str) -> Any:
    """One row per job: a ``pandas.DataFrame``.

    Columns: ``job`` (int), ``status`` (``ok``/``fail``/``error``/``timeout``/``missing``),
    ``reason`` (str or None), ``job_dir`` (str); then every value of the job's resolved
    config (``JobRecord.config``) flattened into dotted columns (``optimizer.lr``,
    ``mesh.mesh_shape`` as a tuple; a missing job, which has no record, gets its override
    values there as strings); then every metric of the report's row
    (:data:`sweep.report.summary.METRICS`: ``drift``, ``first_fail_step``, ``n_fail``,
    ``max_abs_diff``, ``mean_signed_diff``, ..., and ``policy_applied``), and the job's
    ``versions`` as ``versions.<name>``. A config key that has the name of a metric is
    prefixed ``config.``. Rows are in job order; the index is a RangeIndex.

    Raises:
        ImportError: pandas is not installed (names the extra).
        FileNotFoundError: ``path`` is neither a sweep dir nor a run dir.
    """
    pd = _pandas()
    from sweep.report.summary import METRICS

    path = Path(path)
    metric_names = [m for m in METRICS if m != "status"] + ["policy_applied"]
    records = []
    for row in _rows(path):
        result: Optional[JobRecord] = row["result"]
        out: Dict[str, Any] = {k: row.get(k) for k in JOB_COLUMNS}
        config = flatten(result.config) if result is not None and result.config else dict(row["overrides"])
        for key, value in config.items():
            out[f"config.{key}" if key in out or key in metric_names else key] = value
        out.update({m: row.get(m) for m in metric_names})
        if result is not None:
            out.update({f"versions.{k}": v for k, v in (result.versions or {}).items()})
        records.append(out)
    frame = pd.DataFrame.from_records(records)
    if frame.empty:
        frame = pd.DataFrame(columns=list(JOB_COLUMNS))
    return frame


def _standalone(job: JobDir, ranks: Dict[int, RankResult], record: Optional[JobRecord]) -> Optional[List[float]]:
    """Rank 0's standalone sequence; else ``ranks/standalone.json``'s (order=separate or a
    reused baseline); else the record's."""
    first = ranks.get(0)
    if first is not None and first.standalone is not None:
        return read_floats(first.standalone)
    try:
        separate = RankResult.read(job.standalone_result)
        if separate.standalone is not None:
            return read_floats(separate.standalone)
    except (OSError, RecordError):
        pass
    if record is not None and record.losses:
        return read_floats(record.losses["standalone"])
    return None


def _rank_results(job: JobDir) -> Dict[int, RankResult]:
    """Every readable ``ranks/rank_<r>.json``, by rank; unreadable ones are left out."""
    found: Dict[int, RankResult] = {}
    if not job.ranks.is_dir():
        return found
    for path in job.ranks.glob("rank_*.json"):
        suffix = path.stem[len("rank_"):]
        if not suffix.isdigit():
            continue
        try:
            found[int(suffix)] = RankResult.read(job.rank_result(int(suffix)))
        except (OSError, RecordError):
            continue
    return found


def step_records(job_num: int, job_dir: Path | str) -> Iterator[Tuple[int, int, int, float, float, float]]:
    """``(job, step, rank, standalone, distributed, difference)`` tuples of one job dir:
    for each rank that recorded a distributed sequence, one per step; ``standalone`` is
    rank 0's sequence (see :func:`load_steps`), NaN past its end; ``difference`` is
    ``distributed - standalone``. A job without rank files (an errored job) but with a
    record's losses yields rank 0 from the record. Yields nothing for a job with no losses."""
    job = JobDir(job_dir)
    try:
        record: Optional[JobRecord] = JobRecord.read(job.result) if job.result.exists() else None
    except (OSError, RecordError):
        record = None
    ranks = _rank_results(job)
    standalone = _standalone(job, ranks, record)
    sequences = {r: read_floats(res.distributed) for r, res in sorted(ranks.items()) if res.distributed is not None}
    if not sequences and record is not None and record.losses:
        sequences = {0: read_floats(record.losses["distributed"])}
    for rank, distributed in sequences.items():
        for step, value in enumerate(distributed):
            ref = standalone[step] if standalone is not None and step < len(standalone) else math.nan
            yield job_num, step, rank, ref, value, value - ref


def load_steps(path: Path | str) -> Any:
    """Long format: one row per job, step and rank, a ``pandas.DataFrame`` with columns
    ``job`` (int), ``step`` (int, 0-based), ``rank`` (int), ``standalone`` (float: rank
    0's standalone loss at that step, the same for every rank), ``distributed`` (float:
    that rank's distributed loss), ``difference`` (float: distributed - standalone).
    Non-finite losses are NaN/±inf. Read from each rank's file
    (``JobDir.rank_result(r)``, :class:`sweep.records.RankResult`); jobs without losses
    (errored, missing) have no rows. E.g. ``load_steps(d).pivot_table(index="step",
    columns="job", values="difference")`` (rank 0: filter ``rank == 0`` first).

    Raises:
        ImportError: pandas is not installed (names the extra).
        FileNotFoundError: ``path`` is neither a sweep dir nor a run dir.
    """
    pd = _pandas()
    path = Path(path)
    rows: Iterable[tuple] = []
    if _single_run(path):
        rows = list(step_records(0, path))
    else:
        rows = [r for row in _rows(path) for r in step_records(row["job"], row["job_dir"])]
    frame = pd.DataFrame.from_records(rows, columns=list(STEP_COLUMNS))
    return frame.astype({"job": "int64", "step": "int64", "rank": "int64", "standalone": "float64",
                         "distributed": "float64", "difference": "float64"})


TRACE_COLUMNS = ("rank", "step", "phase", "order", "what", "name", "call", "rel_in", "abs", "rel", "shape",
                 "dtype_standalone", "dtype_distributed", "bound")


def _untraced(job_dir: Path) -> str:
    """Why a job has no tracing rerun, from its ``result.json``: the note its record gives
    (``not traced: ...``, ``not observed (runner=command)``), a job that did not finish, or
    copies that never differed; without a readable record, the reasons there can be."""
    try:
        record = JobRecord.read(JobDir(job_dir).result)
    except (OSError, RecordError):
        return ("no readable result.json either; a job is traced when its copies differ (not with "
                "compare.trace_after=0, runner=command, order=separate or baseline.framework)")
    runner = ((record.config or {}).get("runner") or {}).get("name")
    for found in (record.first_tensor, record.first_module):
        if isinstance(found, dict) and found.get("note"):
            note = str(found["note"])
            if runner == "command" and "runner=command" in note:
                return f"{note}: its tensors run inside your command, which the tool does not rerun or trace"
            return note
    if runner == "command":
        return "runner=command: its tensors run inside your command, which the tool does not rerun or trace"
    if record.status not in ("ok", "fail"):
        return f"the job did not finish ({record.status}: {record.reason})"
    if (record.comparison or {}).get("first_diff_step") is None and not (record.comparison or {}).get("max_abs_diff"):
        return "its copies never differed"
    return "compare.trace_after=0, or a job whose copies are not traced (order=separate, baseline.framework)"


def load_trace(job_dir: Path | str) -> Any:
    """A job's module and tensor comparison from its tracing rerun (``JOB_DIR/trace/``,
    ``sweep.run.job``; ``job_dir`` is the job's dir, or its ``trace/`` dir), as a ``pandas.DataFrame``, one row per rank and compared tensor,
    in trace order: columns ``rank``, ``step``, ``phase`` (``forward``, ``backward`` for
    module outputs and their gradients; ``initial``, ``initial_buffer``, ``buffer``,
    ``grad``, ``weight`` for parameters and buffers), ``order`` (position within the
    step's phase: execution order, autograd's order for gradients), ``what``
    (``module`` or ``tensor``), ``name`` (the module's or the tensor's canonical name),
    ``call`` (a module's k-th call in the step, 0 for tensors), ``rel_in`` (a module
    input's relative difference), ``abs`` / ``rel`` (max absolute difference, relative to
    the standalone tensor's ``max|.|``), ``shape``, ``dtype_standalone``,
    ``dtype_distributed`` (modules only), ``bound`` (the relative size its rounding envelope
    allows: ``compare.envelope_margin`` x the standalone copy's twin's difference there,
    ``sweep.analysis.envelope``; ``NaN`` where none was measured or none applies, as for the
    initial weights). Filter ``rel > bound`` for what is beyond float rounding.

    Raises:
        ImportError: pandas is not installed (names the extra).
        FileNotFoundError: the job has no tracing rerun, with why (:func:`_untraced`: what its
            record says, e.g. ``runner=command``, whose tensors run inside the command).
    """
    pd = _pandas()
    if Path(job_dir).name == "trace" and (Path(job_dir) / "ranks").is_dir():  # the trace dir itself: its job's
        job_dir = Path(job_dir).parent
    trace = Path(job_dir) / "trace"
    ranks = _rank_results(JobDir(trace))
    if not ranks:
        raise FileNotFoundError(f"no tracing rerun in {job_dir} (no {trace}/ranks/rank_*.json): "
                                + _untraced(Path(job_dir)))
    rows = []
    for rank, result in sorted(ranks.items()):
        for row in (result.modules or {}).get("rows") or []:
            rows.append({"rank": rank, "step": row["step"], "phase": row["phase"], "order": row["order"],
                         "what": "module", "name": row["module"], "call": row["call"], "rel_in": row["rel_in"],
                         "abs": row["abs"], "rel": row["rel"], "shape": row["shape"],
                         "dtype_standalone": row["dtype_standalone"], "dtype_distributed": row["dtype_distributed"],
                         "bound": row.get("bound")})
        for row in result.tensors or []:
            rows.append({"rank": rank, "step": row["step"], "phase": row["kind"], "order": row["order"],
                         "what": "tensor", "name": row["name"], "call": 0, "rel_in": None, "abs": row["abs"],
                         "rel": row["rel"], "shape": row["shape"], "dtype_standalone": None, "dtype_distributed": None,
                         "bound": row.get("bound")})
    phases = {p: i for i, p in enumerate(("initial", "initial_buffer", "forward", "buffer", "backward", "grad",
                                          "weight"))}
    rows.sort(key=lambda r: (r["rank"], r["step"], phases.get(r["phase"], len(phases)), r["order"]))
    frame = pd.DataFrame.from_records(rows, columns=list(TRACE_COLUMNS))
    return frame.astype({"rank": "int64", "step": "int64", "order": "int64", "call": "int64", "rel_in": "float64",
                         "abs": "float64", "rel": "float64", "bound": "float64"})
