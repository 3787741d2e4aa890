"""hydra-submitit-launcher's local launcher, in waves the cores can hold
(``hydra/launcher=submitit_local``, registered by ``sweep.config.launchers``). Hydra
instantiates a launcher only from the ``hydra_plugins`` namespace, hence its place.

The plugin's ``LocalLauncher`` starts every job of a multirun at once: 32 jobs of 2-4
ranks each are about 100 processes on a machine of 2 cores, each rank then a fraction of a
core, past its time limit. :class:`WavedLocalLauncher` is that launcher, given the jobs
in consecutive waves (:func:`waves`): each wave holds as many jobs as the machine's cores
hold ranks for (a job's ranks: its composed config's ``world_size``), at least one, and
at most ``array_parallelism`` (the name of the same cap in the plugin's SLURM launcher;
``null``: the cores decide). Each wave is the plugin's own ``launch``, so every job runs
exactly as it does there; only when it starts differs.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence

try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher
except ImportError:  # without the cluster extra Hydra's discovery still imports this module: no launcher here
    LocalLauncher = None


def waves(ranks: Sequence[int], cores: int, cap: Optional[int] = None) -> List[int]:
    """The sizes of consecutive waves of jobs needing ``ranks[i]`` ranks each: a wave takes
    jobs in order while their ranks add up to at most ``cores`` and it holds fewer than
    ``cap`` jobs (``None``: no cap); every wave holds at least one job (a job larger than
    the machine runs alone). ``waves([2, 2, 4, 2], 4) == [2, 1, 1]``.

    Raises:
        ValueError: ``cores`` or ``cap`` below 1.
    """
    if cores < 1 or (cap is not None and cap < 1):
        raise ValueError(f"cores={cores}, array_parallelism={cap}: each must be >= 1")
    sizes: List[int] = []
    held = count = 0
    for need in ranks:
        if count and (held + need > cores or (cap is not None and count >= cap)):
            sizes.append(count)
            held = count = 0
        held += need
        count += 1
    if count:
        sizes.append(count)
    return sizes


class _Waved:
    """The plugin's ``LocalLauncher``, its jobs started in :func:`waves`. ``cores``:
    the machine's (``os.cpu_count()``) unless set; ``array_parallelism``: at most this many
    jobs at once (``None``: the cores decide)."""

    def __init__(self, array_parallelism: Optional[int] = None, cores: Optional[int] = None, **params: Any) -> None:
        super().__init__(**params)
        self.array_parallelism = array_parallelism
        self.cores = cores

    def _ranks(self, overrides: Sequence[str]) -> int:
        from sweep.config.schema import world_size

        assert self.hydra_context is not None and self.config is not None
        try:
            return world_size(self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides)))
        except Exception:  # a job whose config does not compose: it fails in its own process, alone
            return int(self.cores or os.cpu_count() or 1)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[Any]:
        cores = int(self.cores or os.cpu_count() or 1)
        sizes = waves([self._ranks(o) for o in job_overrides], cores, self.array_parallelism)
        results: List[Any] = []
        start = 0
        for size in sizes:
            results.extend(super().launch(job_overrides[start:start + size], initial_job_idx + start))
            start += size
        return results


if LocalLauncher is not None:
    class WavedLocalLauncher(_Waved, LocalLauncher):
        """The plugin's ``LocalLauncher``, its jobs started in :func:`waves` (see ``_Waved``)."""
