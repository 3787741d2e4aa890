"""The ``runner`` section (``conf/runner/``): what a job runs, the tool's own ranks or
the user's command (:class:`RunnerName`), and where a command's losses are found
(``runner.parse``, :class:`ParseConfig`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from sweep.config.roles import ALL_NUMERIC, BASELINE, affects
from sweep.config.sections._checks import _value
from sweep.errors import ConfigError


class RunnerName(str, enum.Enum):
    """What a job runs (:class:`RunnerConfig`)."""

    builtin = "builtin"
    command = "command"


COMMAND_KEYS = ("command", "baseline_command")  # the keys that hold shell commands with ${...} interpolations


@dataclass
class ParseConfig:
    """Where a ``runner=command`` job finds its losses (``sweep.run.loss_lines``).

    First the JSON-lines file the command writes at ``$SWEEP_LOSS_FILE`` (through
    ``sweep.log_loss``); if it holds nothing, the regexes, matched (``re.search``) against
    every line of the command's output (``logs/command.log``) and of the ``files``. Each
    regex has the named groups ``step`` and ``loss`` and may have ``rank``; a line
    without a rank takes it from its file's path (``rank_from_path``), else it stands for
    every rank (equal values printed by several ranks count once). The preset
    ``runner/parse=report`` reads the report's own lines (``step: 0, standalone loss:
    ...``, ``step: 0, fully_shard loss: ...``, torchrun's ``[default0]:`` prefix and
    msrun's ``worker_<rank>.log`` files).
    """

    standalone: Optional[str] = affects(
        *ALL_NUMERIC, default=None,
        doc="A regex with the named groups ``step`` and ``loss`` (and optionally ``rank``) matching a line that "
            "reports the standalone copy's loss; ``null``: the command reports none (a ``baseline_command`` or "
            "``baseline.file`` gives it).")
    distributed: Optional[str] = affects(
        *ALL_NUMERIC, default=None,
        doc="The same for the distributed copy's loss lines.")
    files: List[str] = affects(
        *ALL_NUMERIC, default_factory=list,
        doc="Glob patterns of further files the regexes read (relative to the job's dir, or absolute), e.g. "
            "msrun's ``msrun_log/worker_*.log`` under ``--log_dir=$SWEEP_JOB_DIR/msrun_log``; the command's own "
            "output is always read.")
    rank_from_path: Optional[str] = affects(
        *ALL_NUMERIC, default=None,
        doc="A regex with the named group ``rank``, searched in each file's path: the rank of the lines in it "
            "that name none (msrun: ``worker_(?P<rank>\\d+)\\.log``).")


@dataclass
class RunnerConfig:
    """What a job runs: the tool's own ranks (``builtin``), or the user's command.

    ``runner=command`` (``sweep.run.command``): the job runs ``command`` in a shell, in the
    directory ``sweep`` was started from, with the job's config interpolated (``${...}``,
    ``${world_size}`` included) and also given as the JSON file ``$SWEEP_JOB_CONFIG`` and
    as ``SWEEP_*`` environment variables (``SWEEP_MP_POLICY_NAME``,
    ``SWEEP_RUNNER_ARGS_<KEY>``, ...), and reads the losses back (:class:`ParseConfig`).
    The script's own factors are free keys under ``args`` (``+runner.args.reduce=mean,sum``):
    swept, isolated and attributed like the built-in ones. The comparison, the verdict, the
    repeats, the gate and the report are the built-in jobs'; what cannot be seen from
    outside (tensors, dtypes, modules, collectives) is recorded as not observed.
    """

    name: RunnerName = affects(*ALL_NUMERIC, default=RunnerName.builtin,
                               doc="``builtin``: the tool's ranks train both copies; ``command``: the user's "
                                   "command does (``sweep.run.command``).")
    command: Optional[str] = affects(
        *ALL_NUMERIC, default=None,
        doc="``runner=command``: the shell command of one job, with ``${...}`` interpolations of the job config, "
            "e.g. ``torchrun --standalone --nproc-per-node=${world_size} --tee 3 repro.py --steps ${steps}``.")
    baseline_command: Optional[str] = affects(
        BASELINE, default=None,
        doc="The standalone run, if the command does not report the standalone copy itself; run once per "
            "distinct resolved command and ``baseline_keys`` values in a multirun and reused.")
    baseline_keys: List[str] = affects(
        BASELINE, default_factory=list,
        doc="Dotted config keys the ``baseline_command``'s losses depend on besides what its command line "
            "interpolates (read from ``$SWEEP_JOB_CONFIG`` or the environment): its cache key, and what a "
            "golden file must match (``baseline.file``).")
    args: Dict[str, Any] = affects(
        *ALL_NUMERIC, default_factory=dict,
        doc="The script's own factors, free keys (``+runner.args.reduce=sum``): interpolate them in the command "
            "(``${runner.args.reduce}``) or read ``SWEEP_RUNNER_ARGS_REDUCE``.")
    parse: ParseConfig = field(default_factory=ParseConfig)
    cwd: Optional[str] = affects(
        default=None, doc="The command's working directory; ``null``: the directory ``sweep`` was started from.")

    @staticmethod
    def check(runner: Any) -> None:
        """Raises: ConfigError: ``runner=command`` without a ``command``; a ``parse`` regex
        that does not compile or lacks its named groups (``step`` and ``loss``;
        ``rank_from_path``: ``rank``)."""
        import re

        if _value(runner.name) != RunnerName.command.value:
            return
        if not runner.command or not str(runner.command).strip():
            raise ConfigError("runner=command needs runner.command: the shell command of one job, e.g. "
                              "runner.command='torchrun --nproc-per-node=${world_size} repro.py'")
        for key, groups in (("standalone", ("step", "loss")), ("distributed", ("step", "loss")),
                            ("rank_from_path", ("rank",))):
            pattern = runner.parse[key]
            if pattern is None:
                continue
            try:
                compiled = re.compile(str(pattern))
            except re.error as exc:
                raise ConfigError(f"runner.parse.{key}={pattern!r}: not a regex ({exc})") from None
            lacking = [g for g in groups if g not in compiled.groupindex]
            if lacking:
                raise ConfigError(f"runner.parse.{key}={pattern!r}: needs the named group"
                                  f"{'s' if len(lacking) > 1 else ''} {', '.join(f'(?P<{g}>...)' for g in lacking)}")
