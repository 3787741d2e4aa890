"""``runner=command``: a job that runs the user's own training command and judges its losses.

The job runs ``runner.command`` (``sweep.config.schema.RunnerConfig``) in a shell, in
``runner.cwd`` (default: where ``sweep`` was started), supervised like the built-in
launches (``sweep.launch.supervise``: its own session, every process tagged and killed at
the time limit, on Ctrl-C and at exit; output in ``logs/command.log``). The command sees
the job's config three ways: interpolated into its text (``${world_size}``,
``${mp_policy.name}``, ``${runner.args.reduce}``), as the JSON file
``$SWEEP_JOB_CONFIG``, and as ``SWEEP_*`` variables (:func:`job_env`). It reports losses
through ``sweep.log_loss`` (``$SWEEP_LOSS_FILE``) or in lines the ``runner.parse``
regexes read (``sweep.run.loss_lines``).

The standalone sequence comes from, in this order: ``baseline.file`` (a golden file),
``runner.baseline_command`` (run once per distinct resolved command and
``runner.baseline_keys`` values in a multirun, ``sweep.run.baseline``), or the command's
own standalone lines (the report's script trains both copies). Each rank the command
reports is judged as a built-in job's ranks are (``sweep.run.judge``), and
``repeat=N`` reruns the command. What cannot be seen from outside the command, its
tensors, modules, dtypes, collectives and optimizer, is recorded as not observed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

from sweep.config.schema import check_fields, select
from sweep.errors import ConfigError
from sweep.io import write_json
from sweep.launch import supervise
from sweep.layout import JobDir
from sweep.lossfile import ENV_COPY, ENV_FILE
from sweep.records import JobRecord, RankResult
from sweep.run import baseline, failures, judge, repeats
from sweep.run.failures import CANNOT_START, first_failure
from sweep.run.loss_lines import LossError, as_ranks, entries, expected_line, matched_files, sequences

COMMAND_LOG = "command.log"            # in logs/: the command's output
BASELINE_LOG = "baseline_command.log"  # in logs/: the baseline command's
LOSS_FILE = "losses.jsonl"             # in the job dir: $SWEEP_LOSS_FILE of the command
BASELINE_LOSS_FILE = "losses_standalone.jsonl"
CONFIG_JSON = "job.json"               # in the job dir: $SWEEP_JOB_CONFIG
NOT_OBSERVED = "not observed (runner=command)"
ENV_PREFIX = "SWEEP_"
_SKIP = ("runner.command", "runner.baseline_command", "runner.parse", "runner.cwd", "runner.baseline_keys")


def _flatten(node: Any, prefix: str = "") -> Iterator[Tuple[str, Any]]:
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _flatten(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1], node


def _env_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def job_env(config: Dict[str, Any], run_dir: Path, loss_file: Path, copy: str) -> Dict[str, str]:
    """The environment a command adds: ``SWEEP_JOB_CONFIG`` (the resolved config as JSON),
    ``SWEEP_LOSS_FILE``, ``SWEEP_COPY`` (``sweep.log_loss``'s default copy),
    ``SWEEP_JOB_DIR``, ``SWEEP_MASTER_PORT`` (a free port, for a launcher's rendezvous),
    ``OMP_NUM_THREADS`` (``execution.omp_num_threads``), ``framework.env``, and every
    leaf of the config as ``SWEEP_<DOTTED_KEY>`` (dots and other non-alphanumerics as
    ``_``, upper case; lists and dicts as JSON, ``null`` as empty, booleans as
    ``true``/``false``), e.g. ``SWEEP_MP_POLICY_NAME=bf16``, ``SWEEP_RUNNER_ARGS_REDUCE=sum``;
    the runner's own fields (the command, the parse regexes) are left out."""
    env = {str(k): str(v) for k, v in (config.get("framework") or {}).get("env", {}).items()}
    for path, value in _flatten(config):
        if not path or any(path == s or path.startswith(s + ".") for s in _SKIP):
            continue
        name = ENV_PREFIX + "".join(c if c.isalnum() else "_" for c in path).upper()
        env[name] = _env_value(value)
    env.update({
        "SWEEP_JOB_CONFIG": str(run_dir / CONFIG_JSON), ENV_FILE: str(loss_file), ENV_COPY: copy,
        "SWEEP_JOB_DIR": str(run_dir), "SWEEP_MASTER_PORT": str(supervise.free_port()),
        "OMP_NUM_THREADS": str(config["execution"]["omp_num_threads"]),
    })
    return env


@dataclass
class RunResult:
    """What one run of a command (:func:`run_once`) left: its launch, its outcome, its log
    and the loss entries it reported (or why none could be read)."""

    log: Path
    loss_file: Path
    spec: supervise.LaunchSpec
    limit: float  # its time limit, s
    outcome: supervise.LaunchOutcome
    entries: List[Dict[str, Any]] = field(default_factory=list)
    error: Optional[str] = None  # the entries could not be read: why
    source: Optional[Any] = None  # where the entries came from (loss_lines.entries)
    parsed_files: List[Path] = field(default_factory=list)  # runner.parse.files as matched (msrun's worker logs)
    rank_from_path: Optional[str] = None  # runner.parse.rank_from_path: a per-rank file's rank

    def failure(self, what: str) -> Tuple[str, str]:
        """``(status, reason)`` of a run that gave no usable losses (``what``: why not)."""
        if self.outcome.timed_out:
            return "timeout", (f"the command ran past its limit of {self.limit:.0f} s and was stopped "
                               f"({self.outcome.killed} processes killed); {what}")
        if self.outcome.returncode == 0:  # it ran to the end and said nothing we could read
            tail = self.ends(3)
            return "error", f"the command exited with code 0; {what}" + (f"; {tail}" if tail else "")
        # (a command that crashed: what it would have had to print is no help beside why it crashed)
        return "error", f"{self.crash()}; {what.split('; expected ')[0]}"

    def crash(self) -> str:
        """The command's exit code and the exception of the process that failed first
        (``sweep.run.failures.first_failure``: torchrun's root-cause rank, else the earliest
        exception that is no survivor's follow-on error), from anywhere in its log and in
        the files ``runner.parse.files`` names (msrun's worker logs), else its last line
        (``SystemExit("...")``, a shell's message)."""
        cause = f"the command exited with code {self.outcome.returncode}"
        logs = [(path, path.read_text(errors="replace").splitlines()) for path in [self.log, *self.parsed_files]
                if path.is_file()]
        by_path = re.compile(self.rank_from_path) if self.rank_from_path else None
        ranks = [int(m.group("rank")) if m else None
                 for m in ((by_path.search(str(path)) if by_path and path != self.log else None) for path, _ in logs)]
        found = first_failure([lines for _, lines in logs], ranks)
        if found is not None:
            where = next((path.name for path, lines in logs
                          if any(e["line"] == found["line"] for e in failures.exceptions(lines))), self.log.name)
            who = f"rank {found['rank']}: " if found["rank"] is not None else ""
            return f"{cause}; {where}: {who}{str(found['line'])[:300]}"
        for path, lines in logs:  # no exception anywhere: a script that never started says why
            start = next((line.strip() for line in lines if CANNOT_START.search(line)), None)
            if start:
                return f"{cause}; {path.name}: {start[:300]}"
        return f"{cause}; {self.ends()}" if self.ends() else cause

    def ends(self, n: int = 1) -> str:
        """The last ``n`` lines of the command's log (``"command.log ends: ..."``), or ``""``."""
        text = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        last = [line.strip() for line in text if line.strip() and not line.startswith("$ ")
                and not set(line.strip()) <= set("=-_*#~ ")][-n:]  # (a rule of a launcher's box says nothing)
        return f"{self.log.name} ends: {' | '.join(x[:200] for x in last)}" if last else ""

    def sequences(self, cfg: DictConfig, copy: str) -> Dict[int, List[float]]:
        """Raises: LossError: with the line that was expected."""
        if self.error:
            raise LossError(self.error)
        try:
            return as_ranks(sequences(self.entries, copy, int(cfg.steps)))
        except LossError as exc:
            raise LossError(f"{exc}; expected {expected_line(cfg.runner.parse, copy)} in "
                            f"{self.log.relative_to(self.log.parent.parent)}") from None


def run_once(cfg: DictConfig, config: Dict[str, Any], run_dir: Path, command: str, copy: str,
             limit: float) -> RunResult:
    """Run ``command`` once into ``run_dir`` (``copy``: ``standalone`` for the baseline
    command, its own log and loss file; ``distributed`` for the command) and read the loss
    entries it reported."""
    log = JobDir(run_dir).logs / (BASELINE_LOG if copy == "standalone" else COMMAND_LOG)
    loss_file = run_dir / (BASELINE_LOSS_FILE if copy == "standalone" else LOSS_FILE)
    for stale in (log, loss_file):
        stale.unlink(missing_ok=True)
    spec = supervise.LaunchSpec(argv=["/bin/sh", "-c", command], env=job_env(config, run_dir, loss_file, copy),
                                log_path=log, timeout_s=limit, safe_path=False, ask_stacks=False,
                                cwd=str(cfg.runner.cwd) if cfg.runner.cwd else None)
    result = RunResult(log=log, loss_file=loss_file, spec=spec, limit=limit, outcome=supervise.run(spec))
    result.parsed_files = [p for p in matched_files(run_dir, list(cfg.runner.parse.files or []), log) if p != log]
    result.rank_from_path = cfg.runner.parse.rank_from_path or None
    try:
        result.entries, result.source = entries(run_dir, loss_file, log, cfg.runner.parse)
    except LossError as exc:
        result.error = str(exc)
    return result


def command_templates(cfg: DictConfig) -> Dict[str, Optional[str]]:
    """``runner.command`` and ``runner.baseline_command`` as written, before interpolation
    (``${steps}`` stays ``${steps}``): what two jobs of one script share whatever their
    swept values, so a golden file made by another command (a flag written into it that
    differs) is told apart (``sweep.run.baseline.from_file``)."""
    raw = OmegaConf.to_container(cfg.runner, resolve=False)
    return {key: (str(raw[key]) if raw.get(key) is not None else None) for key in ("command", "baseline_command")}


def environment_versions(cfg: DictConfig) -> Dict[str, str]:
    """The versions a command job's framework would import in the sweep's own environment
    (``importlib.metadata``, nothing imported): ``{"torch": "2.13.0", "numpy": ...,
    "versions_from": "the sweep's environment"}``. The command may run under another
    interpreter; then these say what this one has, as the key says."""
    from importlib import metadata

    from sweep.frameworks import load

    out = {}
    for name in (load(cfg).module, "numpy", "hyper_parallel"):  # the framework's import name
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return dict(out, versions_from="the sweep's environment") if out else {}


def _resolved(config: Dict[str, Any], key: str) -> str:
    return str(config["runner"][key])


def _standalone(cfg: DictConfig, config: Dict[str, Any], run_dir: Path, record: JobRecord,
                sweep_dir: Optional[Path], limit: float, use_cache: bool
                ) -> Tuple[Optional[List[Any]], Optional[Tuple[str, str]]]:
    """The standalone sequence from outside the command, or ``(None, None)`` when the
    command reports it itself; returns ``(losses, None)``, or ``(None, (status, reason))``
    when the baseline command gave none (``error`` or ``timeout``).

    Raises:
        ConfigError: a golden file that does not match; a ``baseline_keys`` key the config lacks.
    """
    if cfg.baseline.file:
        entry = baseline.from_file(config, str(cfg.baseline.file), commands=command_templates(cfg))
        record.baseline = {"source": "file", "file": entry["file"], "job_dir": entry["job_dir"],
                           "versions": entry["versions"]}
        return entry["standalone"], None
    if not cfg.runner.baseline_command:
        return None, None
    keys = list(cfg.runner.baseline_keys)
    try:
        fields = {"runner.baseline_command": _resolved(config, "baseline_command"), **select(config, keys),
                  "steps": config["steps"]}
    except (KeyError, TypeError):
        raise ConfigError(f"runner.baseline_keys={keys}: every key must be in the job config") from None
    # the sweep dir whose baseline cache this job reads and fills (none: it runs the baseline command)
    cache_dir = sweep_dir if use_cache and cfg.execution.reuse_baselines else None
    cached = baseline.lookup(cache_dir, fields) if cache_dir else None
    if cached:
        record.baseline = {"source": "cache", "job_dir": cached["job_dir"]}
        return cached["standalone"], None
    began = time.perf_counter()
    run = run_once(cfg, config, run_dir, _resolved(config, "baseline_command"), "standalone", limit)
    record.timings_s["standalone_launch"] = time.perf_counter() - began
    try:
        seq = run.sequences(cfg, "standalone")
    except LossError as exc:
        status, reason = run.failure(str(exc))
        return None, (status, f"runner.baseline_command: {reason}")
    standalone = seq[min(seq)]
    if cache_dir:
        baseline.store(cache_dir, fields, standalone, run_dir)
    record.baseline = {"source": "baseline_command", "log": str(run.log)}
    return standalone, None


def _ranks(cfg: DictConfig, run: RunResult, world: int, standalone: Optional[List[Any]]
           ) -> Tuple[List[RankResult], List[Any], List[str]]:
    """Every reported rank as a ``RankResult``, the standalone sequence they are judged
    against (the lowest rank's, when the command reports it) and notes.

    Raises:
        LossError: a copy's losses missing or not fitting ``steps``.
    """
    dist = run.sequences(cfg, "distributed")
    notes: List[str] = []
    own = None if standalone is not None else run.sequences(cfg, "standalone")
    if own is not None:
        standalone = own[min(own)]
        differ = [r for r, seq in sorted(own.items()) if seq != standalone]
        if differ:
            notes.append(f"the command's standalone losses differ between ranks (rank {min(own)} and rank"
                         f"{'s' if len(differ) > 1 else ''} {', '.join(map(str, differ))}): each rank is judged "
                         f"against rank {min(own)}'s")
    assert standalone is not None
    unranked = all(e.get("rank") is None for e in run.entries if e.get("copy") == "distributed")
    if len(dist) < world and unranked:  # lines without a rank: one sequence, whoever printed it
        notes.append(f"ranks reported: the lines name no rank, so they are read as one sequence (as rank 0's) of "
                     f"{world} ranks, and which ranks printed them, and whether those agree, is not known: give "
                     "each rank's lines a rank (a rank group, runner.parse.rank_from_path or sweep.log_loss)")
    elif len(dist) < world:  # e.g. a script that logs on rank 0 only (nanoGPT's master_process)
        silent = sorted(set(range(world)) - set(dist))
        notes.append(f"ranks reported: only rank{'s' if len(dist) > 1 else ''} {', '.join(map(str, sorted(dist)))} of "
                     f"{world} reported losses (rank{'s' if len(silent) > 1 else ''} "
                     f"{', '.join(map(str, silent))} none), so the job is judged on "
                     f"{'them' if len(dist) > 1 else 'it'} and whether the ranks agree is not known")
    apart = _different_data(own, dist, standalone)
    if apart:
        notes.append(apart)
    name = str(cfg.framework.name)
    ranks = [RankResult(rank=r, world_size=world, framework=name, distributed=seq,
                        standalone=(own or {}).get(r, standalone)) for r, seq in sorted(dist.items())]
    return ranks, standalone, notes


def _different_data(own: Optional[Dict[int, List[Any]]], dist: Dict[int, List[Any]],
                    standalone: List[Any]) -> Optional[str]:
    """A note when the ranks computed on inputs of their own: before any update (step 0) the
    ranks of a data-parallel run hold the same weights, so their step-0 losses differ from
    each other only if their batches (or their initial weights) do; then the ranks whose
    step-0 loss differs from the standalone copy's cannot match it (per-rank seeds, sharded
    sampling: nanoGPT seeds each rank with ``1337 + rank``). ``None`` for one rank, or step-0
    losses the ranks share."""
    firsts = {rank: seq[0] for rank, seq in dist.items() if seq}
    if len(firsts) < 2 or len({float(v) for v in firsts.values()}) < 2:
        return None
    apart = [r for r in sorted(firsts) if firsts[r] != (own or {}).get(r, standalone)[0]]
    if not apart:
        return None
    return ("different inputs: before any update the ranks' step-0 losses differ from each other "
            f"({', '.join(f'rank {r} {float(v):.6g}' for r, v in sorted(firsts.items()))}) and rank"
            f"{'s' if len(apart) > 1 else ''} {', '.join(map(str, apart))} from the standalone copy's: each rank "
            "computed on data (or initial weights) of its own, per-rank seeds or sharded sampling, which the "
            "standalone copy does not share")


def _again(cfg: DictConfig, config: Dict[str, Any], world: int, limit: float) -> repeats.Again:
    """A command job's repeat (``sweep.run.repeats.run_repeats``): the baseline command (if
    any, never from the cache) and the command again, in the repeat's dir."""
    def again(rep_dir: Path, scratch: JobRecord) -> Tuple[Optional[List[RankResult]], Optional[List[Any]],
                                                          Optional[str], str]:
        write_json(rep_dir / CONFIG_JSON, config)
        standalone, failed = _standalone(cfg, config, rep_dir, scratch, None, limit, use_cache=False)
        if failed:
            status, reason = failed
            return None, None, status, reason
        run = run_once(cfg, config, rep_dir, _resolved(config, "command"), "distributed", limit)
        try:
            ranks, standalone, _ = _ranks(cfg, run, world, standalone)
        except LossError as exc:
            status, reason = run.failure(str(exc))
            return None, None, status, reason
        return ranks, standalone, None, ""

    return again


def _not_observed(record: JobRecord) -> None:
    """What a command job cannot see, said so in the record (never left blank)."""
    record.first_tensor = {"note": NOT_OBSERVED}
    record.first_module = {"note": f"{NOT_OBSERVED}: the modules run inside the command"}
    record.collectives = {"unchecked": f"{NOT_OBSERVED}: the collectives run inside the command", "notes": []}
    record.optimizer = {"unchecked": f"{NOT_OBSERVED}: the optimizer runs inside the command", "notes": []}
    record.dtypes = dict(record.dtypes or {}, observed={}, observed_standalone={},
                         not_observed=f"{NOT_OBSERVED}: the dtypes the command ran")
    record.weights_moved = None
    record.not_observed.update(random_draws=f"{NOT_OBSERVED}: the command's generators",
                               replicas=f"{NOT_OBSERVED}: the command's ranks and their shards")


def run(cfg: DictConfig, job_dir: Path, record: JobRecord, sweep_dir: Optional[Path]) -> None:
    """Run one ``runner=command`` job into ``job_dir`` and fill ``record`` (see the module
    docstring); a failure of the command becomes ``status`` ``error`` or ``timeout`` with
    its cause and the log tails.

    Raises:
        ConfigError: a field check fails (``sweep.config.schema.check_fields``: no
            command, a regex without its groups, ...), or a golden file does not match.
    """
    world = check_fields(cfg)
    config = record.config or {}
    record.world_size = world
    paths = JobDir(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(config), paths.config)
    write_json(job_dir / CONFIG_JSON, config)
    shutil.rmtree(paths.ranks, ignore_errors=True)
    limit = failures.timeout_s(cfg)
    record.engine = {"runner": "command", "command": _resolved(config, "command"), "cwd": str(cfg.runner.cwd or
                                                                                               os.getcwd()),
                     "templates": command_templates(cfg)}
    record.versions.update(environment_versions(cfg))
    standalone, failed = _standalone(cfg, config, job_dir, record, sweep_dir, limit, use_cache=True)
    if failed:
        record.status, record.reason = failed
        record.log_tails = failures.log_tails(job_dir)
        return
    run_ = run_once(cfg, config, job_dir, _resolved(config, "command"), "distributed", limit)
    outcome = run_.outcome
    record.launch = {"kill_tag": run_.spec.kill_tag, "argv": run_.spec.argv, "returncode": outcome.returncode,
                     "timed_out": outcome.timed_out, "killed": outcome.killed, "timeout_s": limit,
                     "losses_from": run_.source.kind if run_.source else None}
    record.timings_s["launch"] = outcome.wall_s
    try:
        if outcome.timed_out:
            raise LossError("no complete losses")
        ranks, standalone, notes = _ranks(cfg, run_, world, standalone)
    except LossError as exc:
        record.status, record.reason = run_.failure(str(exc))
        record.log_tails = failures.log_tails(job_dir)
        return
    for r in ranks:
        r.write(paths.rank_result(r.rank))
    engine = record.engine
    judge.judge(cfg, record, ranks, standalone)
    record.engine = engine  # (the built-in judge takes the ranks' engine record: a command has none)
    record.notes.extend(notes)
    _not_observed(record)
    repeats.run_repeats(cfg, job_dir, record, repeats.run_sequences(cfg, ranks, standalone),
                        _again(cfg, config, world, limit))
    if outcome.returncode not in (0, None):  # judged by its losses, as a built-in job whose launcher fails at exit
        record.teardown_note = f"{run_.crash()}, after reporting every loss: judged by the losses"
        record.notes.append(record.teardown_note)
    if cfg.baseline.file and not list(cfg.runner.baseline_keys):
        record.notes.append("baseline.file: only its steps and its command as written were checked against this "
                            "job (runner.baseline_keys names none of the keys its standalone losses depend on)")
