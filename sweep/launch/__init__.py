"""The launch wing: processes: starting and supervising a launch, the fork server torch's shared launches come from, and multi-node topology.

May import: ``sweep.config``, the contracts, and ``sweep.train`` (the fork server preloads the rank code and forks ranks from it).
Modules: ``supervise`` (one handle: poll, wait, kill; time limit; clean-up by kill tag), ``interrupts`` (the signal that interrupted the command, checked by every wait loop), ``forkserver``, ``fork_launch`` (torch's ``elastic_launch`` forking a shared launch's ranks), ``topology`` (SLURM nodes, ports, srun), ``slurm`` (the SLURM controller asked: is it up, how did a job end).
"""
