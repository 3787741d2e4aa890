"""A model factory that raises in the standalone-only process of ``order=separate`` (no
msrun or torchrun rank variables there) and builds the report's MLP everywhere else."""

import os

import sweep.models as models

RANK_VARIABLES = ("RANK_ID", "MS_WORKER_NUM", "RANK", "LOCAL_RANK")


def mlp(**kwargs):
    if not any(name in os.environ for name in RANK_VARIABLES):
        raise RuntimeError("planted: the standalone process fails")
    return models.mlp(**kwargs)
