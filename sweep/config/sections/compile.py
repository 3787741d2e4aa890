"""The ``compile`` section: ``torch.compile`` of both copies' models."""

from __future__ import annotations

from dataclasses import dataclass

from sweep.config.roles import ALL_NUMERIC, affects


@dataclass
class CompileConfig:
    """``torch.compile`` of both copies' models (after sharding), with ``backend``;
    ``compile=true`` on the command line is ``compile.enabled=true`` (``sweep.__main__``)."""

    enabled: bool = affects(*ALL_NUMERIC, default=False, doc="Compile both copies' models (torch only).")
    backend: str = affects(*ALL_NUMERIC, default="inductor",
                           doc="``torch.compile(backend=)``: ``inductor``, or ``aot_eager`` (no code generation: "
                               "fast on CPU), ``eager``.")
