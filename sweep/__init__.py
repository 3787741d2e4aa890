"""sweep: configuration-sweep ablation of distributed-training numerics.

Each Hydra job trains one model standalone and distributed (``fully_shard`` or a
data-parallel control) from identical weights and data, and compares the per-step
losses; a multirun over config values isolates which factor makes the loss drift.

The package is laid out in wings, each a subpackage whose docstring says what lives
there and what it may import (``tests/unit/test_layout.py`` holds the rules):

- ``sweep.config``: the schema, the enums, factory calling, and the Hydra tree (``conf/``);
- ``sweep.models``: the models and data both copies train;
- ``sweep.engines``: how the distributed copy is parallelised (FSDP2, hyper-parallel, DDP);
- ``sweep.train``: what every rank runs (the training step of both copies);
- ``sweep.launch``: processes: supervising a launch, the fork server, multi-node topology;
- ``sweep.frameworks``: what the core knows of PyTorch and MindSpore (launchers, checks);
- ``sweep.analysis``: pure numerics: comparison, rounding envelope, first tensor, onset, the grid's evidence, isolation;
- ``sweep.findings``: the verdict as typed findings, one kind a module (codes, rules, sentence templates);
- ``sweep.report``: the report's files, plots, JUnit, sweep against sweep, DataFrames, golden baselines;
- ``sweep.trackers``: experiment trackers (the ``logger`` group);
- ``sweep.run``: one Hydra job and a multirun's fast path, callbacks, resume;

and at the top the contracts every wing shares: ``records`` (rank and job records),
``layout`` (where each file of a job, pool and sweep dir lives), ``errors``, ``io`` and
``lossfile`` (the losses a ``runner=command`` script writes).

Public API: :func:`load`, :func:`load_steps` and :func:`load_trace` (``sweep.report.frame``,
imported on first use so that ``import sweep`` imports neither pandas nor the report code),
and :func:`log_loss` (``sweep.lossfile``, standard library only: for the user's script).
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``sweep.load``, ``sweep.load_steps`` and ``sweep.load_trace`` (:mod:`sweep.report.frame`)
    and ``sweep.log_loss`` (:mod:`sweep.lossfile`), imported on first use."""
    if name in ("load", "load_steps", "load_trace"):
        from sweep.report import frame

        return getattr(frame, name)
    if name == "log_loss":
        from sweep.lossfile import log_loss

        return log_loss
    raise AttributeError(f"module 'sweep' has no attribute {name!r}")
