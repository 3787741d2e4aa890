"""The project's error types, importable from anywhere without import cycles."""


class ConfigError(ValueError):
    """A job config that cannot run; the message names the field and the allowed values."""


class RecordError(ValueError):
    """A result file whose content does not match its record schema (``sweep.records``)."""
