"""Config of the ``isolate`` sweeper: ``python -m sweep -m hydra/sweeper=isolate ...``.

Stored in Hydra's ConfigStore as group ``hydra/sweeper``, name ``isolate``; every field
can be set as ``hydra.sweeper.<field>=...``. The endpoints are override lists, quoted
for the shell and for Hydra's grammar, e.g.
``'hydra.sweeper.failing=["weights.transfer=shared","order=standalone_first"]'``.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class IsolateSweeperConf:
    _target_: str = "hydra_plugins.sweep_isolate.isolate_sweeper.IsolateSweeper"

    # The failing config: overrides ("key=value") on top of the command line's fixed ones.
    failing: Optional[List[str]] = None
    # The passing config, likewise; a probe is this config with some of the changes applied.
    passing: Optional[List[str]] = None

    # A finished multirun dir to take the endpoints from: its failing job `failing_job`
    # (default: the first failing one) and that job's nearest passing job (`pick`).
    from_sweep: Optional[str] = None
    failing_job: Optional[int] = None
    # nearest: the passing job that differs in the fewest overrides (fewest probes);
    # farthest: the one that differs in the most (more context, shows interactions).
    pick: str = "nearest"

    # Without endpoints and without from_sweep: the grid (these params plus the command
    # line's comma lists, as for Hydra's basic sweeper) is scouted, `scout_batch` jobs at a
    # time, spread out (each next job the farthest from those run), until one job fails
    # and one passes; they become the endpoints.
    params: Optional[Dict[str, str]] = None
    scout_batch: int = 2

    # Grid and from_sweep modes: after ddmin, probe the minimal failing config with each
    # other grid factor moved to each of its other levels (one batch); a factor under
    # which the failure goes away is reported as a condition (an interaction).
    context: bool = True

    # Run every probe this many times, as separate jobs; if its repeats disagree (pass and
    # fail) the probe is unresolved: never taken as a pass or a fail.
    repeat: int = 1
    # Most jobs to launch in all (null: no limit); when reached, the isolation stops and
    # reports the smallest failing set found so far.
    max_jobs: Optional[int] = None


ConfigStore.instance().store(group="hydra/sweeper", name="isolate", node=IsolateSweeperConf, provider="sweep_isolate")
