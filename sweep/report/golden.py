"""Golden baselines: a job's loss sequences in a file of their own, to compare other runs with.

:func:`export` writes one from a judged job's dir (``python -m sweep.report DIR
--export-golden FILE``); ``baseline.file=FILE`` makes a job take its standalone
sequence from one instead of training the standalone copy (``sweep.run.baseline.from_file``
checks its steps and config against the job's), so a run on one machine (an NPU) is
compared with a golden run made on another (a GPU, CPU in float64).

The file is JSON: ``{"format": "sweep-golden/1", "steps": N, "config": the job's
resolved config, "versions": the job's versions, "commands": a command job's
``runner.command`` and ``runner.baseline_command`` as written (before interpolation), "source": the job dir, "exported": UTC
ISO-8601, "rows": [{"step", "loss", "rank", "copy"}]}``, ``copy`` ``standalone``
(``rank`` ``null``) or ``distributed`` (every rank that recorded a result, else the
judged one), or ``twin`` (the standalone copy's twin, ``rank`` ``null``, where the job
measured its rounding envelope; then also ``"twin": {"dtype", "seed", "perturbation"}``), steps
counted from 0, losses as floats or ``"nan"``/``"inf"``/``"-inf"``. A job that takes its
standalone sequence from the file takes its rounding envelope from the twin's rows.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional

from sweep.errors import RecordError
from sweep.io import read_json, write_json
from sweep.layout import JobDir
from sweep.records import JobRecord, RankResult

FORMAT = "sweep-golden/1"


def export(job_dir: Path | str, path: Path | str) -> Dict[str, Any]:
    """Write the golden file of the job in ``job_dir`` to ``path``; returns its content.

    Raises:
        FileNotFoundError: no ``result.json`` in ``job_dir``.
        RecordError: the job was not judged (``error``/``timeout``: no sequences).
    """
    paths = JobDir(job_dir)
    if not paths.result.exists():
        raise FileNotFoundError(f"no {paths.result}: not a job dir (give a job's dir, or a sweep dir and --job N)")
    record = JobRecord.read(paths.result)
    if not record.judged or not record.losses:
        raise RecordError(f"{paths.result}: status {record.status}, no loss sequences to export "
                          f"({record.reason or 'no reason recorded'})")
    rows: List[Dict[str, Any]] = [{"step": i, "loss": v, "rank": None, "copy": "standalone"}
                                  for i, v in enumerate(record.losses["standalone"])]
    ranks = _rank_sequences(paths, record)
    for rank, seq in sorted(ranks.items()):
        rows += [{"step": i, "loss": v, "rank": rank, "copy": "distributed"} for i, v in enumerate(seq)]
    twin = ((record.envelope or {}).get("twin") or {})
    if twin.get("losses"):
        rows += [{"step": i, "loss": v, "rank": None, "copy": "twin"} for i, v in enumerate(twin["losses"])]
    templates = (record.engine or {}).get("templates")  # a command job's commands as written
    content = {"format": FORMAT, "steps": len(record.losses["standalone"]), "config": record.config,
               "versions": record.versions, **({"commands": templates} if templates else {}),
               **({"twin": {k: twin.get(k) for k in ("dtype", "seed", "perturbation")}} if twin.get("losses") else {}),
               "source": str(Path(job_dir).resolve()), "status": record.status,
               "exported": datetime.now(timezone.utc).isoformat(), "rows": rows}
    write_json(path, content)
    return content


def _rank_sequences(paths: JobDir, record: JobRecord) -> Dict[int, List[Any]]:
    """Every rank's distributed sequence from ``ranks/`` (not with ``data.split=sharded``:
    there the job's is the mean over ranks), else the judged rank's."""
    sharded = ((record.config or {}).get("data") or {}).get("split") == "sharded"
    out: Dict[int, List[Any]] = {}
    if not sharded and paths.ranks.exists():
        for file in sorted(paths.ranks.glob("rank_*.json")):
            try:
                result = RankResult.read(file)
            except (OSError, RecordError):
                continue
            if result.distributed:
                out[result.rank] = result.distributed
    if not out:
        out[record.judged_rank or 0] = record.losses["distributed"]  # type: ignore[index]
    return out


def read(path: Path | str) -> Dict[str, Any]:
    """A golden file's content, checked.

    Raises:
        FileNotFoundError: no such file.
        RecordError: not JSON, another format, rows of the wrong shape.
    """
    try:
        data = read_json(path)
    except ValueError as exc:
        raise RecordError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RecordError(f"{path}: not a golden file (format {FORMAT!r}; write one with "
                          "python -m sweep.report DIR --export-golden FILE)")
    rows = data.get("rows")
    if not isinstance(rows, list) or not all(isinstance(r, dict) and {"step", "loss", "copy"} <= set(r)
                                             for r in rows):
        raise RecordError(f"{path}: rows must be objects with step, loss, rank and copy")
    if not isinstance(data.get("config"), dict):
        raise RecordError(f"{path}: no config")
    return data


def sequence(data: Dict[str, Any], copy: str = "standalone", rank: Optional[int] = None) -> List[Any]:
    """The losses of ``copy`` (and ``rank``: ``None`` takes the lowest one) in step order.

    Raises:
        RecordError: the file holds no such sequence, or one with a gap.
    """
    rows = [r for r in data["rows"] if r["copy"] == copy]
    if rank is None and rows:
        ranks = sorted({r.get("rank") for r in rows}, key=lambda x: (x is not None, x or 0))
        rank = ranks[0]
    rows = sorted((r for r in rows if r.get("rank") == rank), key=lambda r: r["step"])
    if not rows:
        raise RecordError(f"the golden file holds no {copy} losses" + (f" of rank {rank}" if rank is not None else ""))
    steps = [r["step"] for r in rows]
    if steps != list(range(len(rows))):
        raise RecordError(f"the golden file's {copy} steps are not 0-{len(rows) - 1} without a gap")
    return [r["loss"] for r in rows]


def twin(data: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The twin record of a golden file (``{"losses", "dtype", "seed", "perturbation"}``, as
    ``sweep.records.RankResult.twin``), or ``None`` where it holds none."""
    if not any(r["copy"] == "twin" for r in data["rows"]):
        return None
    return dict(data.get("twin") or {}, losses=sequence(data, "twin"))
