"""The run wing: one Hydra job (check, launch, collect, compare, record) and a multirun's fast path, callbacks, resume and multi-node tasks.

May import: every wing but ``train`` and ``trackers`` (the ranks run ``train`` in their own processes; trackers are Hydra callbacks of their own).
Modules: ``job``, ``checks`` (every check before launch, in one order), ``pool`` (shared launches), ``baseline`` (baseline reuse), ``callbacks``, ``sweep_dir`` (one grid per dir), ``cluster`` (``python -m sweep.run.cluster``: one node's launcher under SLURM), ``preflight`` (the command line checked before Hydra starts).
"""
