"""A training script in which rank 1 raises while rank 0 waits in an all_reduce, so rank 0
then fails too with gloo's "Connection closed by peer" (the last exception line of the
log): ``torchrun --nproc-per-node=2 tests/helpers/crash_rank.py``."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise ValueError("planted: rank 1 cannot read its shard")
dist.all_reduce(torch.ones(1))
