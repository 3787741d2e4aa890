"""A reproducer in the report's shape, for PyTorch: every rank trains a standalone copy of a
small MLP, then a ``fully_shard`` (FSDP2) copy from the same weights on the same data, and
prints the report's lines::

    step: 0, standalone loss: 0.0213...
    step: 0, fully_shard loss: 0.0213...

Run it on its own::

    torchrun --standalone --nproc-per-node=2 examples/torch_repro.py --steps 20 --param-dtype bf16

or swept by ``sweep`` (``runner=command``; the preset is ``experiment=example_command``)::

    python -m sweep -m experiment=example_command mp_policy=fp32,bf16 \\
        reshard_after_forward=true,false runner.args.reduce=mean,sum

``--copy standalone`` trains the standalone copy alone, in one process without
``torch.distributed`` (a ``runner.baseline_command``), ``--copy distributed`` the
``fully_shard`` copy alone; ``--report log_loss`` reports through ``sweep.log_loss``
instead of printing (the only use of ``sweep`` here, and it imports no dependency).

``--reduce sum`` is a planted fault: the distributed copy's gradients come out summed over
the ranks instead of averaged (``world_size`` times FSDP2's mean), so with SGD its updates
are ``world_size`` times too large. It needs torch (2.6 or newer) and nothing of ``sweep``.
"""

from __future__ import annotations

import argparse
import copy
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def flag(text: str) -> bool:
    return text.lower() in ("1", "true", "yes")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--param-dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--reshard-after-forward", type=flag, default=True)
    parser.add_argument("--reduce", choices=["mean", "sum"], default="mean")
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--copy", choices=["both", "standalone", "distributed"], default="both")
    parser.add_argument("--report", choices=["lines", "log_loss"], default="lines")
    return parser.parse_args()


def batch(step: int) -> tuple:
    """The same batch on every rank and for both copies: seeded by the step."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(4, 16, generator=g)
    return x, torch.tanh(x[:, :8] * 2.0)


def train(model: nn.Module, steps: int, name: str, args: argparse.Namespace, grad_scale: float | None = None) -> None:
    opt = (torch.optim.SGD(model.parameters(), lr=args.lr) if args.optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=args.lr))
    for step in range(steps):
        x, y = batch(step)
        loss = nn.functional.mse_loss(model(x).float(), y)
        opt.zero_grad()
        loss.backward()
        if grad_scale is not None:
            for p in model.parameters():
                p.grad.mul_(grad_scale)
        opt.step()
        if args.report == "log_loss":
            import sweep

            sweep.log_loss(step, loss.item(), copy="standalone" if name == "standalone" else "distributed")
        else:
            print(f"step: {step}, {name} loss: {loss.item()!r}", flush=True)


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    distributed = copy.deepcopy(net)  # the same initial weights
    if args.copy == "standalone":  # the baseline alone: one process, no torch.distributed
        train(net, args.steps, "standalone", args)
        return

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if args.copy == "both":
        print(f"Rank {rank}: Training standalone model for {args.steps} steps...", flush=True)
        train(net, args.steps, "standalone", args)

    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("dp",))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if args.param_dtype == "bf16" else None)
    for layer in (distributed[0], distributed[2]):
        fully_shard(layer, mesh=mesh, mp_policy=policy, reshard_after_forward=args.reshard_after_forward)
    fully_shard(distributed, mesh=mesh, mp_policy=policy, reshard_after_forward=args.reshard_after_forward)
    print(f"Rank {rank}: Training FSDP model for {args.steps} steps...", flush=True)
    # the fault: the reduced gradients summed over the ranks where FSDP2 averages them
    scale = float(dist.get_world_size()) if args.reduce == "sum" else None
    train(distributed, args.steps, "fully_shard", args, grad_scale=scale)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
