"""A MindSpore framework whose rank 1 raises before it joins the others (before
``init()``), as a worker does when CANN and the driver do not match: a test of failing
fast (``framework.impl=tests.helpers.early_exit.EarlyExitMindSpore``), in a job's own
launch and in a shared one."""

import os

from sweep.frameworks.mindspore import MindSporeFramework
from sweep.train import mindspore_rank


class EarlyExitMindSpore(MindSporeFramework):
    rank_module = "tests.helpers.early_exit"


def init_rank(cfg, distributed=True):
    if distributed and os.environ.get("MS_NODE_ID") == "1":  # msrun's worker id
        raise RuntimeError("planted: this worker cannot open its device (a CANN/driver mismatch)")
    return mindspore_rank.init_rank(cfg, distributed)


def run_rank(cfg, job_dir, phase="both"):
    ctx = init_rank(cfg, phase != "standalone")
    mindspore_rank.run_job(cfg, job_dir, ctx, phase)


run_job = mindspore_rank.run_job
close_rank = mindspore_rank.close_rank
