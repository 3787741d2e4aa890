"""Training scripts of shapes nobody here wrote for the tool, under ``torchrun
--nproc-per-node=2``: ``python tests/helpers/report_shapes.py MODE``.

- ``printed``: only rank 0 prints its losses (nanoGPT's ``master_process``), rounded to four
  decimals (``{loss:.4f}``); the distributed copy differs from the standalone one by 2e-5, below
  what four decimals show.
- ``per_rank_data``: every rank draws its own batch (a per-rank seed) and reports exact losses
  with ``sweep.log_loss``; the standalone copy's batch is rank 0's, so the ranks' step-0 losses
  differ from it and from each other before any update.
"""

import sys

import torch
import torch.distributed as dist

from sweep import log_loss

mode = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
weights = torch.nn.Linear(8, 1)
for step in range(steps):
    gen = torch.Generator().manual_seed(step * 100 + (rank if mode == "per_rank_data" else 0))
    x, y = torch.randn(4, 8, generator=gen), torch.randn(4, 1, generator=gen)
    base = torch.Generator().manual_seed(step * 100)
    xs, ys = torch.randn(4, 8, generator=base), torch.randn(4, 1, generator=base)
    with torch.no_grad():
        standalone = float(torch.nn.functional.mse_loss(weights(xs), ys))
        distributed = float(torch.nn.functional.mse_loss(weights(x), y))
    if mode == "printed":
        if rank == 0:
            print(f"step: {step}, standalone loss: {standalone:.4f}", flush=True)
            print(f"step: {step}, fully_shard loss: {distributed + 2e-5:.4f}", flush=True)
    else:
        log_loss(step, standalone, copy="standalone")
        log_loss(step, distributed)
dist.barrier()
dist.destroy_process_group()
