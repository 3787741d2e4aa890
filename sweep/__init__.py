"""sweep: configuration-sweep ablation of distributed-training numerics.

Each Hydra job trains one model standalone and distributed (``fully_shard`` or a
data-parallel control) from identical weights and data, and compares the per-step
losses; a multirun over config values isolates which factor makes the loss drift.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``sweep.load`` and ``sweep.load_steps`` (:mod:`sweep.frame`), imported on first use
    so that ``import sweep`` imports neither pandas nor the report code."""
    if name in ("load", "load_steps"):
        from sweep import frame

        return getattr(frame, name)
    raise AttributeError(f"module 'sweep' has no attribute {name!r}")
