"""The floor of ``benchmarks/scale.py``: the least a script can do to train the transformer
preset's model standalone and under FSDP2, as a job does, with nothing observed.

Run by ``torchrun --nproc-per-node WORLD benchmarks/scale_floor.py HIDDEN LAYERS HEADS STEPS
DEVICE [DETERMINISTIC]``: every rank turns torch's deterministic algorithms on or off as a job's
``deterministic`` does (``true``, the jobs' default: ``torch.use_deterministic_algorithms``),
seeds torch, builds the model twice (``sweep.models.torch_models.TinyDecoder``, vocab 64,
sequences of 16, batch 4: the preset's), gives the second the first's weights, shards it with
``fully_shard`` on a one-dimensional mesh of every rank (the job's default ``wrap=root``,
``reshard_after_forward=true``), and trains the standalone copy then the sharded one for STEPS
steps of Adam (lr 1e-4, the ``optimizer=adam`` preset) on the preset's token data
(``sweep.models.data.tokens``), cross-entropy. Prints the last losses.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from sweep.models.data import tokens
from sweep.models.torch_models import TinyDecoder


def train(model: torch.nn.Module, samples: list, device: torch.device) -> float:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
    loss = torch.zeros(())
    for x, y in samples:
        x, y = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return float(loss.item())


def main() -> None:
    if len(sys.argv) < 5 or any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(__doc__)  # a torchrun worker: its arguments are positional (the docstring's usage)
        sys.exit(0 if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help") else 2)
    hidden, layers, heads, steps = (int(v) for v in sys.argv[1:5])
    device_type = sys.argv[5] if len(sys.argv) > 5 else "cpu"
    torch.use_deterministic_algorithms((sys.argv[6] if len(sys.argv) > 6 else "true") == "true")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if device_type == "cpu":
        device = torch.device("cpu")
    else:
        device = torch.device(device_type, int(os.environ.get("LOCAL_RANK", rank)))
        getattr(torch, device_type).set_device(device)
    dist.init_process_group("gloo" if device_type == "cpu" else "nccl")
    torch.manual_seed(42)
    standalone = TinyDecoder(64, 16, hidden, layers, heads, 0.02).to(device)
    sharded = TinyDecoder(64, 16, hidden, layers, heads, 0.02).to(device)
    sharded.load_state_dict(standalone.state_dict())
    fully_shard(sharded, mesh=init_device_mesh(device_type, (world,)), reshard_after_forward=True)
    samples = tokens(steps, batch_size=4, seed_offset=42, vocab_size=64, seq_len=16)
    began = time.perf_counter()
    alone = train(standalone, samples, device)
    middle = time.perf_counter()
    losses = (alone, train(sharded, samples, device))
    seconds = (middle - began, time.perf_counter() - middle)
    if rank == 0:
        print(f"floor: last losses standalone {losses[0]:.6f} sharded {losses[1]:.6f}; training loops "
              f"standalone {seconds[0]:.1f} s, sharded {seconds[1]:.1f} s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
