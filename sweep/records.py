"""The records every writer and reader shares: a rank's result and a job's record.

``RankResult`` is what each rank writes to ``ranks/rank_<r>.json`` (``sweep.train``);
``JobRecord`` is the job's ``result.json`` (``sweep.run.job``), read by the report, the
plots, the benchmark and the tests. Both carry ``schema_version``; :meth:`from_dict`
checks a file's content against the schema and raises :class:`RecordError` naming what
is wrong, so a reader never acts on a file of the wrong shape. Loss values are floats,
or the strings ``"nan"``, ``"inf"``, ``"-inf"`` as ``sweep.io`` stores non-finite values.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from sweep.errors import RecordError
from sweep.io import read_json, write_json

SCHEMA_VERSION = 3  # 1: records before versioning (no "schema_version" key); 2: before repeats; both still readable
STATUSES = ("ok", "fail", "error", "timeout")  # of a job record; the report adds "missing"
JUDGED = ("ok", "fail")

Loss = Union[float, str]


# A job's note as data (``sweep.analysis`` makes them, ``sweep.findings.notes_catalog`` holds their
# kinds, ``sweep.report.notes`` renders them): its kind's stable code (``N101``: never reused), the
# values its sentence reads, and the ranks that hold it where not every rank does. The text is
# rendered only at the edge (the report, the terminal, the page, JUnit; ``summary.json`` and
# ``result.json`` keep the codes and the text). A record's notes are a list of notes and plain
# strings (an older ``result.json``'s, or one not typed): a string renders as itself.
#
# In a file: a record written with a renderer (``write(path, render)``: the job's ``result.json``)
# keeps each list of notes as their sentences (``notes``: what people and tools read) and beside it
# ``note_data``, one entry a note (its code, values and ranks; ``null`` for a plain string); one
# written without (a rank's result, which the train wing writes and cannot render) keeps each note
# as its dict in ``notes``. Both read back as notes (:func:`_notes_in`).


@dataclass(frozen=True)
class Note:
    """One note of one job (the comment above). Equal notes (code, values, ranks) are one note."""

    code: str
    values: Dict[str, Any] = field(default_factory=dict)
    ranks: Tuple[int, ...] = ()

    def __hash__(self) -> int:
        return hash((self.code, json.dumps(self.values, sort_keys=True, default=str), self.ranks))

    def on_ranks(self, ranks: Sequence[int]) -> "Note":
        """This note, held by ``ranks`` only (its sentence names them)."""
        return Note(self.code, dict(self.values), tuple(int(r) for r in ranks))

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready: ``code``, ``values``, ``ranks`` (the sentence is the report's to render)."""
        return {"code": self.code, "values": dict(self.values), "ranks": list(self.ranks)}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Note":
        return cls(str(data["code"]), dict(data.get("values") or {}), tuple(int(r) for r in data.get("ranks") or ()))


NoteLike = Union[Note, str]


def ranks_text(ranks: Sequence[int]) -> str:
    """`` (rank 1)``, `` (ranks 0, 2)``: the ranks that hold a note; ``""`` for none (every rank)."""
    if not ranks:
        return ""
    return f" (rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})"


def note(code: str, **values: Any) -> Note:
    """A note of kind ``code`` with ``values``."""
    return Note(code, values)


def is_note_dict(data: Any) -> bool:
    """Whether ``data`` is a note as ``to_dict`` writes it (``code`` and ``values``)."""
    return isinstance(data, dict) and isinstance(data.get("code"), str) and isinstance(data.get("values"), dict)


def load_notes(items: Optional[Iterable[Any]]) -> List[NoteLike]:
    """A record's notes read back: a note's dict becomes a :class:`Note`, a string stays one."""
    return [Note.from_dict(i) if is_note_dict(i) else i for i in items or []]


def code_of(item: Any) -> Optional[str]:
    """A note's code; ``None`` for a plain string."""
    if isinstance(item, Note):
        return item.code
    return str(item["code"]) if is_note_dict(item) else None


def _known(cls: type, data: Dict[str, Any]) -> Dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    data = _notes_in(dict(data))
    for key in NOTE_PARTS:
        if isinstance(data.get(key), dict) and "notes" in data[key]:
            data[key] = _notes_in(dict(data[key]))
    return {k: v for k, v in data.items() if k in names}


NOTE_PARTS = ("collectives", "optimizer")  # record fields that hold a list of notes of their own


def _notes_in(holder: Dict[str, Any]) -> Dict[str, Any]:
    """``holder`` (a record's fields, or one of :data:`NOTE_PARTS`) with its ``notes`` read back as
    notes (a note's dict, or its sentence with its ``note_data`` entry beside it) and strings."""
    data = holder.pop("note_data", None)
    notes = holder.get("notes")
    if not isinstance(notes, list):
        return holder
    if isinstance(data, list) and len(data) == len(notes):
        notes = [d if is_note_dict(d) else n for n, d in zip(notes, data)]
    holder["notes"] = load_notes(notes)
    return holder


def _notes_out(holder: Dict[str, Any], render: Optional[Callable[[Note], str]]) -> Dict[str, Any]:
    """``holder`` (a record's fields, or one of :data:`NOTE_PARTS`), or a shallow copy with its
    ``notes`` JSON-ready where it holds a :class:`Note`: each as its dict, or with ``render`` as its
    sentence with ``note_data`` beside (one entry a note; ``None`` for a plain string)."""
    notes = holder.get("notes")
    if not (isinstance(notes, list) and any(isinstance(n, Note) for n in notes)):
        return holder
    holder = dict(holder)  # (never the record's own dict)
    if render is None:
        holder["notes"] = [n.to_dict() if isinstance(n, Note) else n for n in notes]
    else:
        holder["note_data"] = [n.to_dict() if isinstance(n, Note) else None for n in notes]
        holder["notes"] = [render(n) if isinstance(n, Note) else n for n in notes]
    return holder


def _check_losses(values: Any, what: str) -> None:
    if not isinstance(values, list) or not values:
        raise RecordError(f"{what} must be a non-empty list of losses, got {type(values).__name__}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise RecordError(f"{what} holds {v!r}, not a loss")
        if isinstance(v, str) and v not in ("nan", "inf", "-inf"):
            raise RecordError(f"{what} holds the string {v!r}, not a loss")


def _check_version(data: Dict[str, Any], what: str) -> None:
    version = data.get("schema_version", 1)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise RecordError(f"{what}: schema_version {version!r} is newer than this sweep reads ({SCHEMA_VERSION})")


class _Record:
    """What both records share: plain-dict form, atomic write, checked read."""

    def to_dict(self, render: Optional[Callable[[Note], str]] = None) -> Dict[str, Any]:
        """The fields by name, shallow: the values are the record's own lists and dicts
        (``dataclasses.asdict`` deep-copies every list, 30 ms for a 400 kB record, once per rank
        and job), but for the notes (:class:`Note`, the only dataclass a field holds): each as its
        code, values and ranks, or with ``render`` (``sweep.report.notes.text_of``) as its sentence
        with ``note_data`` beside (the comment above :class:`Note`), in new lists."""
        data = _notes_out({f.name: getattr(self, f.name) for f in fields(self)}, render)  # type: ignore[arg-type]
        for key in NOTE_PARTS:
            if isinstance(data.get(key), dict):
                data[key] = _notes_out(data[key], render)
        return data

    def write(self, path: Path | str, render: Optional[Callable[[Note], str]] = None) -> None:
        """``to_dict(render)`` as JSON at ``path``, atomically."""
        write_json(path, self.to_dict(render))

    @classmethod
    def from_dict(cls, data: Any, what: str) -> Any:
        raise NotImplementedError

    @classmethod
    def read(cls, path: Path | str, what: Optional[str] = None) -> Any:
        """Raises: OSError: unreadable; RecordError: not JSON, or not this record."""
        try:
            data = read_json(path)
        except ValueError as exc:
            raise RecordError(f"not JSON ({exc})") from None
        return cls.from_dict(data, what or Path(path).name)


@dataclass
class RankResult(_Record):
    """One rank's (or the standalone-only process's) result for one job.

    ``standalone``/``distributed``: the loss of every step of the copies this process
    trained (``None`` for a copy it did not train). ``moved``: max |change| of one copy's
    parameters while the other trained, keyed ``"<other>_during_<trained>"`` (0.0 for
    independent copies). ``dtypes_observed``: dtype names the distributed copy ran at
    step 0 (``param_forward``, ``output``, ``grad``, ...; ``sweep.train.observers.dtypes``);
    ``dtypes_observed_standalone``: the same for the standalone copy, if this process
    trained it (torch). ``timings_s``: ``setup`` and one entry
    per trained copy, seconds. ``engine_notes``: what the engine did besides the
    library's own behaviour (workarounds, emulated collectives); ``engine``: the engine's
    own record (``Engine.info()``: the API that ran, emulated collectives, call counts).
    ``random_draws``: per copy this process trained, whether its training advanced a
    random generator (torch's CPU or accelerator one, numpy's: the forward draws random
    numbers, e.g. dropout); each copy trains in its own stream, seeded alike.
    ``initial``: both copies' weights and buffers before any step, compared by canonical
    name (``{"first": first differing tensor or None, "missing": [{name, kind, step,
    only_in}]}``, ``sweep.train.torch_rank.initial_check``); ``None`` where not compared.
    ``final``: both copies' buffers after the last step, by name (``{"first": the first
    that differs beyond rounding, kind ``buffer``, or None}``,
    ``sweep.analysis.trace.final_buffers``): a running statistic the training losses never
    read (a BatchNorm frozen in one copy: ``"frozen"``, and ``"held"`` where the rank holds it as
    a shard, ``sweep.run.judge.frozen``, from each rank's ``final["unchanged"]``: ``{copy: [buffers
    still equal to their value before the first step]}``); ``{"note": why not}`` where not compared
    (sharded data: each rank's statistics are its shard's; copies trained apart).
    ``replica``: the distributed copy's local weights per step, ``{"key": which shards
    this rank holds, "coords": its mesh coordinates, "mesh_dims": their names,
    "digests": [digest hex of the local weights after each step, sweep.train.digests]}``; ranks
    with one key must give equal digests (``sweep.analysis.judging.replica_check``); ``None`` where not recorded.
    
    ``collectives``: the distributed copy's ledger (``sweep.engines.collectives``) folded
    per step (``calls``), the engine's ``expected`` contract (or ``unchecked``: why none),
    FSDP2's ``divide_factors`` and the ``notes`` where they depart
    (``sweep.analysis.collectives.ledger_notes``); step 0 in a job, every traced step in
    its tracing rerun. ``optimizer``: ``{"standalone", "distributed": each param group's
    hyper-parameters as the optimizer held them after step 0, "notes"}``. ``modules``:
    the tracing rerun's module comparison (``sweep.analysis.modules.compare_modules``:
    ``first``, ``description``, ``rows``); ``tensors``: its every traced tensor compared
    (``sweep.analysis.trace.tensor_rows``). ``features``: what both copies ran with besides
    the engine (``sweep.train.copies.features_record``: frozen and tied parameters, the
    modules activation checkpointing wrapped, activation offload, compile, ``model.init``,
    the lr schedule and its ``lr`` per step of each copy trained here). ``twin``: the
    standalone copy's twin where this process trained it (``sweep.train.twin.record``: its
    ``losses``, the ``dtype`` and ``seed`` of its nudged weights, ``nudged``, ``seconds``), else
    ``None``. ``reductions``: per
    copy, the gradients as they ran (``sweep.train.observers.reductions.gradients_record``:
    ``norms`` per step and parameter before the reduction, after it and as the optimizer read
    them; for the distributed copy ``found``, the op each gradient's reduction ran at step 0
    and traced steps, ``sizes`` and ``held``, the first step whose gradient buffers still held
    the last step's).
    """

    rank: int
    world_size: int
    framework: str
    versions: Dict[str, str] = field(default_factory=dict)
    standalone: Optional[List[Loss]] = None
    distributed: Optional[List[Loss]] = None
    moved: Dict[str, float] = field(default_factory=dict)
    dtypes_observed: Dict[str, Optional[str]] = field(default_factory=dict)
    dtypes_observed_standalone: Dict[str, Optional[str]] = field(default_factory=dict)
    zero_grad_effective: Optional[bool] = None
    timings_s: Dict[str, float] = field(default_factory=dict)
    python: Optional[str] = None
    engine_notes: List[str] = field(default_factory=list)
    engine: Dict[str, Any] = field(default_factory=dict)
    first_tensor: Optional[Dict[str, Any]] = None
    random_draws: Dict[str, bool] = field(default_factory=dict)
    initial: Optional[Dict[str, Any]] = None
    final: Optional[Dict[str, Any]] = None
    replica: Optional[Dict[str, Any]] = None
    collectives: Optional[Dict[str, Any]] = None
    optimizer: Optional[Dict[str, Any]] = None
    modules: Optional[Dict[str, Any]] = None
    tensors: Optional[List[Dict[str, Any]]] = None
    features: Optional[Dict[str, Any]] = None
    twin: Optional[Dict[str, Any]] = None
    reductions: Optional[Dict[str, Any]] = None
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def from_dict(cls, data: Any, what: str = "rank result") -> "RankResult":
        """Raises: RecordError: not a dict, a missing or ill-typed field."""
        if not isinstance(data, dict):
            raise RecordError(f"{what} is a {type(data).__name__}, not an object")
        _check_version(data, what)
        for key in ("rank", "world_size", "framework"):
            if key not in data:
                raise RecordError(f"{what} has no {key!r}")
        for key in ("standalone", "distributed"):
            if data.get(key) is not None:
                _check_losses(data[key], f"{what}[{key!r}]")
        return cls(**_known(cls, data))


@dataclass
class JobRecord(_Record):
    """A job's ``result.json``.

    ``status``: ``ok`` (every step within tolerance), ``fail`` (the comparison failed),
    ``error`` (invalid config, crashed rank, interrupted), ``timeout``. ``reason``:
    ``None`` when ok. ``overrides``: the job's Hydra overrides; ``config``: the resolved
    config; ``comparison``: ``sweep.analysis.compare.Comparison`` as a dict, of the judged rank
    (``judged_rank``: the first failing rank, else 0); ``rank_comparisons``: every rank's
    (``{rank, passed, n_fail, first_fail_step, first_diff_step, max_abs_diff}``); ``losses``:
    ``{"standalone": [...], "distributed": [...]}`` (the judged rank's, or the mean over
    ranks with ``data.split=sharded``); ``first_tensor``: where the copies' tensors first
    differ (``sweep.analysis.trace.first_difference``, from the job's tracing rerun, with its
    ``rank``), or why it was not traced; ``ranks_agree``: every rank recorded the same losses
    (the distributed copy's, and the standalone copy's where more than rank 0 trained it; over ``ranks_reported``, the ranks whose losses were read; ``None`` when only one of
    several reported); ``resolution``: where losses were read from rounded text, each
    copy's printed resolution (``sweep.analysis.compare.printed_resolution``: ``{"distributed":
    1e-4}``), else ``None`` (exact floats);
    ``dtypes``: ``{"configured": {...}, "observed": {...}, "observed_standalone": {...}}``
    (``observed``: what the distributed copy ran at step 0, ``observed_standalone``: the
    standalone copy, e.g. ``param_forward: bfloat16`` with ``baseline.precision=policy``); ``weights_moved``; ``launch``:
    the framework launcher's ``argv``, ``returncode``, ``timed_out``, ``killed``,
    ``timeout_s`` and ``kill_tag`` (the ``SWEEP_KILL_TAG`` its processes carry);
    ``timings_s``: ``wall``, ``launch`` and per-phase maxima over ranks (s); ``pool``:
    the shared launch that ran it; ``baseline``: where a reused standalone sequence came
    from (``source``: ``cache``, ``file``, ``baseline_command``, or ``framework``: the standalone copy
    trained in the other framework, ``baseline.framework``, with its ``framework``, ``versions`` and
    ``initial_weights``: ``{framework, file, renamed}``); ``engine_notes``: the engine's notes
    (``RankResult.engine_notes``); ``engine``: rank 0's ``RankResult.engine``; ``notes``:
    each a :class:`Note` (code and values) or a plain string: settings of the job that had no
    effect (``sweep.run.judge.effect_notes``), and
    ``nondeterministic: ...`` when its repeats disagree; ``repeats``: with ``repeat=N > 1``,
    one summary per run (``{repeat, status, first_diff_step, first_fail_step,
    max_abs_diff, final_abs_diff, reason}``; repeat 0 is the run whose sequences the
    record holds; ``sweep.run.repeats.run_repeats``), else ``None``; ``nondeterministic``: whether
    the repeats disagree (any loss of any rank, or the outcome), ``None`` without repeats;
    ``repeat_spread``: how far they disagree (``sweep.run.repeats.repeat_spread``);
    ``random_draws``: some copy's training drew random numbers on some rank
    (``RankResult.random_draws``; ``None`` when no rank says); ``replicas``: the ranks
    that hold the same shards, compared step by step (``{"groups": [[rank, ...]],
    "coords": {rank: [..]}, "mesh_dims": [...], "first_step": first step a replica
    disagrees or None, "ranks": the ranks that disagree then}``; ``None`` without digests);
    ``not_observed``: why a field that stays empty (``random_draws``, ``replicas``) was not
    observed (``{"random_draws": "not observed (runner=command): ..."}``), never blank;
    ``first_module``: the first module whose inputs agree and whose output (or
    output gradient) differs, over the tracing rerun's ranks
    (``sweep.analysis.evidence.first_module_over_ranks``), or ``{"description"}`` saying none did,
    or ``None`` when not traced; ``collectives``: rank 0's ledger (``RankResult.collectives``)
    and every rank's ``notes``; ``optimizer``: rank 0's (``RankResult.optimizer``).
    ``envelope``: the job's rounding envelope, measured by the standalone copy's twin
    (``sweep.analysis.envelope.measure``: ``{"measured": True, "source", "dtype", "margin",
    "twin", "envelope": per step, "resolution", "loss": the losses judged against it}``), or
    ``{"measured": False, "why"}``: then no sentence claims rounding.
    ``slurm``: where the job ran as a SLURM job (``{job_id, nodes, partition, restarts}``,
    ``sweep.launch.slurm.job_environment``; ``state``: SLURM's final state, added by
    ``hydra/launcher=slurm`` when the job ended without its own result), else ``None``.
    ``features``: rank 0's ``RankResult.features`` (what both copies ran with); ``reductions``:
    the gradients as they ran (``sweep.run.judge.gradient_notes``: the standalone copy's norms,
    every rank's distributed ones, each rank's ops that ran, ``held``), ``None`` where no rank
    recorded them (``not_observed`` says why). ``not_observed`` also says why every other field
    left empty is empty (``sweep.run.judge.never_silent``).
    ``started``/``finished``: UTC ISO-8601.
    """

    status: str = "error"
    reason: Optional[str] = None
    overrides: List[str] = field(default_factory=list)
    config: Optional[Dict[str, Any]] = None
    world_size: Optional[int] = None
    comparison: Optional[Dict[str, Any]] = None
    rank_comparisons: Optional[List[Dict[str, Any]]] = None
    judged_rank: Optional[int] = None
    first_tensor: Optional[Dict[str, Any]] = None
    ranks_agree: Optional[bool] = None
    ranks_reported: Optional[List[int]] = None
    resolution: Optional[Dict[str, float]] = None
    losses: Optional[Dict[str, List[Loss]]] = None
    dtypes: Optional[Dict[str, Any]] = None
    weights_moved: Optional[Dict[str, float]] = None
    zero_grad_effective: Optional[bool] = None
    engine_notes: List[str] = field(default_factory=list)
    engine: Dict[str, Any] = field(default_factory=dict)
    notes: List[NoteLike] = field(default_factory=list)  # typed notes (Note) and plain strings
    launch: Optional[Dict[str, Any]] = None
    timings_s: Dict[str, float] = field(default_factory=dict)
    versions: Dict[str, str] = field(default_factory=dict)
    pool: Optional[Dict[str, Any]] = None
    baseline: Optional[Dict[str, Any]] = None
    log_tails: Optional[Dict[str, str]] = None
    traceback: Optional[str] = None
    teardown_note: Optional[str] = None
    repeats: Optional[List[Dict[str, Any]]] = None
    nondeterministic: Optional[bool] = None
    repeat_spread: Optional[Dict[str, Any]] = None
    resumed: bool = False
    random_draws: Optional[bool] = None
    replicas: Optional[Dict[str, Any]] = None
    not_observed: Dict[str, str] = field(default_factory=dict)
    first_module: Optional[Dict[str, Any]] = None
    features: Optional[Dict[str, Any]] = None
    collectives: Optional[Dict[str, Any]] = None
    optimizer: Optional[Dict[str, Any]] = None
    envelope: Optional[Dict[str, Any]] = None
    slurm: Optional[Dict[str, Any]] = None
    reductions: Optional[Dict[str, Any]] = None
    started: Optional[str] = None
    finished: Optional[str] = None
    schema_version: int = SCHEMA_VERSION

    @property
    def judged(self) -> bool:
        return self.status in JUDGED

    @classmethod
    def from_dict(cls, data: Any, what: str = "result.json") -> "JobRecord":
        """Check ``data`` against the schema: a dict with a known ``status``; a judged
        job (``ok``/``fail``) has a comparison (``passed`` for an ``ok`` job; a ``fail``
        job may pass against standalone when only its ranks disagree) and two loss
        sequences of one length.

        Raises:
            RecordError: naming the first thing that does not match.
        """
        if not isinstance(data, dict):
            raise RecordError(f"{what} holds a {type(data).__name__}, not a job record")
        _check_version(data, what)
        status = data.get("status")
        if status not in STATUSES:
            raise RecordError(f"{what} has status {status!r}; a job record has one of {', '.join(STATUSES)}")
        if status in JUDGED:
            comparison, losses = data.get("comparison"), data.get("losses")
            if not isinstance(comparison, dict) or not isinstance(comparison.get("passed"), bool):
                raise RecordError(f"{what}: status {status} without a comparison")
            if status == "ok" and not comparison["passed"]:
                raise RecordError(f"{what}: status {status} but comparison.passed={comparison['passed']}")
            if not isinstance(losses, dict):
                raise RecordError(f"{what}: status {status} without loss sequences")
            for key in ("standalone", "distributed"):
                _check_losses(losses.get(key), f"{what} losses[{key!r}]")
            if len(losses["standalone"]) != len(losses["distributed"]):
                raise RecordError(f"{what}: the two loss sequences differ in length")
        for key, kind in (("overrides", list), ("timings_s", dict), ("versions", dict), ("repeats", list),
                          ("repeat_spread", dict)):
            if data.get(key) is None and key in ("repeats", "repeat_spread"):
                continue
            if key in data and not isinstance(data[key], kind):
                raise RecordError(f"{what}: {key} is a {type(data[key]).__name__}, not a {kind.__name__}")
        if data.get("nondeterministic") is not None and not isinstance(data["nondeterministic"], bool):
            raise RecordError(f"{what}: nondeterministic is {data['nondeterministic']!r}, not a bool")
        if any(not isinstance(r, dict) or "status" not in r for r in data.get("repeats") or []):
            raise RecordError(f"{what}: every entry of repeats must be an object with a status")
        return cls(**_known(cls, data))
