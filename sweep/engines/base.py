"""The engine interface: how the distributed copy is parallelised, and what an engine checks.

Every engine, of any framework, is built as ``Engine(cfg, device=..., world_size=...)``
(the whole job config; this rank's device — a ``torch.device`` for torch, the device
name for MindSpore — and the number of ranks) and offers ``parallelize(model)`` and
``optimizer_step(optimizer, grads)``. Its own settings live in ``engine.options`` and
are checked against its :attr:`Engine.Options` dataclass by :meth:`Engine.check`, which
validation calls on the class actually loaded, so an engine plugged in with
``engine.impl.<framework>=my_pkg.MyEngine`` is checked too.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Dict, List, Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sweep.errors import ConfigError

DTYPE_NAMES = ("float32", "bfloat16", "float16")


def dtype_name(value: Any) -> Optional[str]:
    """``DType`` enum, its string or ``None`` -> ``"float32"``-style name or ``None``.

    Raises:
        ValueError: not one of :data:`DTYPE_NAMES`.
    """
    if value is None:
        return None
    name = str(getattr(value, "value", value))
    if name not in DTYPE_NAMES:
        raise ValueError(f"unknown dtype {name!r}; allowed: {', '.join(DTYPE_NAMES)}")
    return name


class Engine:
    """Base of every engine. Subclasses set :attr:`framework` and implement
    :meth:`parallelize`; they may declare :class:`Options` and extend :meth:`check_config`."""

    framework: ClassVar[str] = ""
    # Config fields this engine never reads: a job that sets one gets a note saying it had
    # no effect (sweep.job.effect_notes), so a sweep over it is not mistaken for evidence.
    unused_fields: ClassVar[tuple] = ()

    @dataclasses.dataclass
    class Options:
        """The engine's settings in ``engine.options`` (none by default)."""

    def __init__(self, cfg: Any, *, device: Any = None, world_size: int = 1) -> None:
        self.cfg = cfg
        self.device = device
        self.world_size = world_size
        self.options = self.options_of(cfg)
        self.notes: List[str] = []  # what it did besides the library's own behaviour (RankResult.engine_notes)

    @classmethod
    def options_of(cls, cfg: Any) -> Any:
        """``engine.options`` merged into :class:`Options` (defaults filled in).

        Raises:
            ConfigError: an unknown option or a value of the wrong type.
        """
        given = cfg.engine.get("options") or {}
        try:
            return OmegaConf.merge(OmegaConf.structured(cls.Options), given)
        except OmegaConfBaseException as exc:
            allowed = ", ".join(f.name for f in dataclasses.fields(cls.Options)) or "none"
            reason = str(exc).splitlines()[0]
            raise ConfigError(f"engine.options of engine={cfg.engine.name} ({cls.__name__}): {reason}; "
                              f"its options: {allowed}") from None

    @classmethod
    def check(cls, cfg: Any) -> None:
        """Everything this engine requires of a job config, before launch: its options
        (:meth:`options_of`), then :meth:`check_config`.

        Raises:
            ConfigError: one line naming the field and what is allowed.
        """
        cls.options_of(cfg)
        cls.check_config(cfg)

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        """Engine-specific rules (e.g. a library that must be installed)."""

    def parallelize(self, model: Any) -> Any:
        """Return the distributed model (may wrap ``model`` or modify it in place)."""
        raise NotImplementedError

    def optimizer_step(self, optimizer: Any, grads: Any = None) -> None:
        """One optimizer step after the gradients are computed (and reduced)."""
        raise NotImplementedError

    def info(self) -> Dict[str, Any]:
        """What the rank result records about this engine (``RankResult.engine``, after
        ``parallelize``), all keys optional: ``versions`` ({package: version}, merged into
        the record's ``versions``), ``api`` (which library entry point ran, and with which
        arguments), ``summary`` (that in a few words, for the report's notes), ``notes``
        (workarounds and substitutions, one sentence each; the report shows the part
        before `` -- ``) and ``collectives_emulated``."""
        return {"notes": list(self.notes)} if self.notes else {}


class TorchEngine(Engine):
    """Parallelises a ``torch.nn.Module`` on an initialised process group; ``device`` is
    this rank's ``torch.device``."""

    framework = "torch"

    def optimizer_step(self, optimizer: Any, grads: Any = None) -> None:
        """``optimizer.step()`` after ``loss.backward()`` (``grads`` is unused)."""
        optimizer.step()


class MindSporeEngine(Engine):
    """Parallelises a ``mindspore.nn.Cell`` after ``mindspore.communication.init()``."""

    framework = "mindspore"

    def optimizer_step(self, optimizer: Any, grads: Any = None) -> None:
        """Apply ``grads`` (a tuple from ``mindspore.value_and_grad``) with ``optimizer(grads)``."""
        optimizer(grads)
