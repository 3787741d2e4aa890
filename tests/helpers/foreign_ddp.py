"""A training script in a format of its own, for runner=command's tests: a hand-written data
parallel (torch.distributed all_reduce of every gradient, gloo) next to a single-process
reference, printed on one line per step and rank::

    [r0] it=3 ref=0.1234 dist=0.1234

Flags: ``--average false`` is its fault (the all-reduced gradients are summed, not averaged);
``--bucket-mb`` changes nothing numerical (it only splits the all-reduce into groups).
Launched with ``torchrun``; knows nothing of sweep.
"""

import argparse
import copy

import torch
import torch.distributed as dist
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=6)
parser.add_argument("--average", default="true")
parser.add_argument("--bucket-mb", type=int, default=4)
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
ref = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))
par = copy.deepcopy(ref)
opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
opt_par = torch.optim.SGD(par.parameters(), lr=0.1)
g = torch.Generator().manual_seed(5)
data = [(torch.randn(4, 6, generator=g), torch.randn(4, 3, generator=g)) for _ in range(args.iters)]
params = list(par.parameters())
groups = [params[i:i + max(1, args.bucket_mb // 2)] for i in range(0, len(params), max(1, args.bucket_mb // 2))]
for it, (x, y) in enumerate(data):
    loss_ref = nn.functional.mse_loss(ref(x), y)
    opt_ref.zero_grad()
    loss_ref.backward()
    opt_ref.step()
    loss_par = nn.functional.mse_loss(par(x), y)
    opt_par.zero_grad()
    loss_par.backward()
    for group in groups:
        for p in group:
            dist.all_reduce(p.grad)
            if args.average == "true":
                p.grad /= world
    opt_par.step()
    print(f"[r{rank}] it={it} ref={loss_ref.item():.10g} dist={loss_par.item():.10g}", flush=True)
dist.destroy_process_group()
