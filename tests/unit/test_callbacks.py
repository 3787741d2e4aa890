"""The job count behind the progress line is Hydra's basic-sweeper count."""

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from sweep.run.callbacks import count_jobs
from tests.conftest import CONF


@pytest.mark.parametrize(
    "overrides, jobs",
    [
        ([], 32),  # the default grid: 5 factors x 2 levels
        (["optimizer=adam"], 16),  # a command-line value replaces the grid's
        (["optimizer=adam,sgd,adamw"], 48),
        (["ablation=none", "mesh=dp2,dp4", "seed=1,2,3"], 6),
        (["ablation=none"], 1),
    ],
)
def test_count_jobs_matches_the_basic_sweeper(compose_cfg, overrides, jobs):
    compose_cfg()  # registers the schema
    plain = [o for o in overrides if "," not in o]  # compose() takes no sweeps; the sweeper does
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="config", overrides=plain, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.overrides.task = overrides  # what `python -m sweep -m OVERRIDES` puts there
    assert count_jobs(cfg) == jobs
