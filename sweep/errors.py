"""The project's error types, importable from anywhere without import cycles."""


class ConfigError(ValueError):
    """A job config that cannot run; the message names the field and the allowed values."""


class RecordError(ValueError):
    """A result file whose content does not match its record schema (``sweep.records``)."""


class SchedulerTimeLimit(Exception):
    """The scheduler's warning that the job's time limit is near (SLURM's ``SIGUSR2``,
    ``hydra.launcher.signal_delay_s`` before it, under ``hydra/launcher=slurm``): raised in
    the job process, which stops its ranks and records the job as ``timeout`` with this
    message (``sweep.run.job.run``)."""


def import_reason(exc: BaseException) -> str:
    """An import error from ``hydra.utils.get_method``/``get_class`` in one line: Hydra's
    message and the cause it wraps (e.g. ``ModuleNotFoundError: No module named 'x'``)."""
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:1] + ([f"({type(cause).__name__}: {cause})"] if cause else lines[1:2]))
