"""The two engine interfaces: one per framework, each with the steps a rank calls.

An engine receives the whole job config at construction and reads the sections it
needs (``mesh``, ``mp_policy``, ``reshard_after_forward``, ``device``).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

DTYPE_NAMES = ("float32", "bfloat16", "float16")


def dtype_name(value: Any) -> Optional[str]:
    """``DType`` enum, its string or ``None`` -> ``"float32"``-style name or ``None``."""
    if value is None:
        return None
    name = getattr(value, "value", value)
    name = str(name)
    if name not in DTYPE_NAMES:
        raise ValueError(f"unknown dtype {name!r}; allowed: {', '.join(DTYPE_NAMES)}")
    return name


class TorchEngine:
    """Parallelises a ``torch.nn.Module`` on an initialised process group.

    ``device`` is the ``torch.device`` of this rank.
    """

    def __init__(self, cfg: Any, *, device: Any) -> None:
        self.cfg = cfg
        self.device = device

    def parallelize(self, model: Any) -> Any:
        """Return the distributed model (may wrap ``model`` or modify it in place)."""
        raise NotImplementedError

    def optimizer_step(self, optimizer: Any) -> None:
        """One optimizer step after ``loss.backward()``; gradients are already reduced."""
        optimizer.step()

    def info(self) -> Dict[str, Any]:
        """What the rank result records about this engine (after ``parallelize``):
        see :meth:`MindSporeEngine.info`."""
        return {}


class MindSporeEngine:
    """Parallelises a ``mindspore.nn.Cell`` after ``mindspore.communication.init()``."""

    def __init__(self, cfg: Any, *, world_size: int) -> None:
        self.cfg = cfg
        self.world_size = world_size

    def parallelize(self, net: Any) -> Any:
        raise NotImplementedError

    def optimizer_step(self, optimizer: Any, grads: Any) -> None:
        """Apply ``grads`` (a tuple from ``mindspore.value_and_grad``) with ``optimizer(grads)``."""
        optimizer(grads)

    def info(self) -> Dict[str, Any]:
        """What the rank result records about this engine (after ``parallelize``), all keys
        optional: ``versions`` ({package: version}, merged into the record's ``versions``),
        ``api`` (which library entry point ran, and with which arguments), ``notes``
        (workarounds and substitutions, one sentence each) and ``collectives_emulated``
        (collectives computed from others). ``{}`` for an engine with nothing to say."""
        return {}
