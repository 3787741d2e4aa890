"""The launcher plugin of sweep: hydra-submitit-launcher's local launcher, its jobs in waves
the cores can hold (``local_launcher``; ``hydra/launcher=submitit_local``). Hydra instantiates
launchers only from the ``hydra_plugins`` namespace, so it lives here, beside the isolate sweeper."""
