"""sweep: configuration-sweep ablation of distributed-training numerics.

Each Hydra job trains one model standalone and distributed (``fully_shard`` or a
data-parallel control) from identical weights and data, and compares the per-step
losses; a multirun over config values isolates which factor makes the loss drift.
"""

__version__ = "0.1.0"
