"""Config of the ``bisect`` sweeper: ``python -m sweep -m hydra/sweeper=bisect
hydra.sweeper.repo=PATH hydra.sweeper.good=REV hydra.sweeper.bad=REV ...``.

Stored in Hydra's ConfigStore as group ``hydra/sweeper``, name ``bisect``; every field can
be set as ``hydra.sweeper.<field>=...``. The command line's other overrides make each
probe's job (its comma lists: a small grid per probe, which fails if any of its jobs fails).
"""

from dataclasses import dataclass
from typing import Dict, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class BisectSweeperConf:
    _target_: str = "hydra_plugins.sweep_bisect.bisect_sweeper.BisectSweeper"

    # A git checkout of the library under test (its history is read, never changed).
    repo: Optional[str] = None
    # The revision known to pass and the one known to fail (any git revision: a sha, a tag,
    # HEAD~5); good must be an ancestor of bad.
    good: Optional[str] = None
    bad: Optional[str] = None
    # How a commit becomes runnable. By default its tree is exported (git archive, cached per
    # commit) and the directory `path` inside it ("" : the tree's root) goes first on the
    # ranks' path (runtime.pythonpath). With `install`, a shell command run in the exported
    # tree inside a venv of its own per commit (cached; it sees this interpreter's packages),
    # e.g. "pip install --no-deps ." for a library that must be built; the probe then runs
    # under that venv's python (runtime.python).
    path: str = ""
    install: Optional[str] = None
    # Where the exported trees and venvs are kept (null: <sweep dir>/.bisect); a shared
    # directory keeps them across bisections of one repo.
    cache: Optional[str] = None
    # The default grid (`ablation=...`'s params) is not used: each probe is the command line's
    # job, its comma lists a small grid; kept so that `ablation=none` composes.
    params: Optional[Dict[str, str]] = None


ConfigStore.instance().store(group="hydra/sweeper", name="bisect", node=BisectSweeperConf, provider="sweep_bisect")
