"""The project's error types, importable from anywhere without import cycles."""


class ConfigError(ValueError):
    """A job config that cannot run; the message names the field and the allowed values."""


class RecordError(ValueError):
    """A result file whose content does not match its record schema (``sweep.records``)."""


def import_reason(exc: BaseException) -> str:
    """An import error from ``hydra.utils.get_method``/``get_class`` in one line: Hydra's
    message and the cause it wraps (e.g. ``ModuleNotFoundError: No module named 'x'``)."""
    cause = exc.__cause__ or exc.__context__
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:1] + ([f"({type(cause).__name__}: {cause})"] if cause else lines[1:2]))
