"""The launcher plugin of sweep: hydra-submitit-launcher's local launcher, its jobs in waves
the cores can hold (``local_launcher``; ``hydra/launcher=submitit_local``), and its SLURM
launcher waiting for every job and recording how each ended (``slurm_launcher``;
``hydra/launcher=slurm``). Hydra instantiates launchers only from the ``hydra_plugins``
namespace, so they live here, beside the isolate sweeper."""
