"""A stand-in for ``python -m sweep`` in tests of the isolate sweeper: no training, the
job's record is a rule over its 0/1 factors (``config.yaml``). Each job also writes
``job.txt`` (its overrides), ``job.yaml`` (its resolved config) and ``result.json`` (its
record, with its overrides) into its job dir.

    python tests/helpers/fake_app/app.py -m hydra/sweeper=isolate 'cause=[a,c]' a=0,1 c=0,1 ...
"""

import json
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

FACTORS = "abcde"


def _all_one(cfg: DictConfig, keys) -> bool:
    return bool(keys) and all(cfg[k] == 1 for k in keys)


def _exactly(cfg: DictConfig, keys) -> bool:
    return bool(keys) and {k for k in FACTORS if cfg[k] == 1} == set(keys)


@hydra.main(version_base="1.3", config_path=".", config_name="config")
def main(cfg: DictConfig) -> dict:
    hc = HydraConfig.get()
    Path(hc.runtime.output_dir, "job.txt").write_text(" ".join(hc.overrides.task))
    Path(hc.runtime.output_dir, "job.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    if _exactly(cfg, cfg.crash):
        raise RuntimeError("planted crash")
    failing = _all_one(cfg, cfg.cause) or any(cfg[k] == 1 for k in cfg.either)
    if _exactly(cfg, cfg.flaky):
        failing = hc.job.num % 2 == 0
    comparison = {"passed": not failing, "first_fail_step": 0 if failing else None, "n_fail": 3 if failing else 0,
                  "n_steps": 3, "max_abs_diff": 0.5 if failing else 0.0, "mean_signed_diff": -0.5 if failing else 0.0}
    losses = {"standalone": [1.0, 1.0, 1.0], "distributed": [0.5, 0.5, 0.5] if failing else [1.0, 1.0, 1.0]}
    record = {"status": "fail" if failing else "ok", "reason": "planted" if failing else None,
              "comparison": comparison, "losses": losses, "overrides": list(hc.overrides.task)}
    Path(hc.runtime.output_dir, "result.json").write_text(json.dumps(record))
    return record


if __name__ == "__main__":
    main()
