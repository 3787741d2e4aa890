"""A model whose forward branches on the distributed state (a fault class of its own: the
standalone copy takes the distributed branch when it trains inside a rank):
``model._target_=tests.helpers.branchy_model.branchy_mlp``.

``layer0`` Linear(in_size, hidden_size) -> ReLU -> ``layer1`` Linear(hidden_size, out_size),
plus ``0.05 * (world_size - 1)`` added to the output when ``torch.distributed`` is
initialised. Input ``(rows, in_size)`` float32, output ``(rows, out_size)``. The standalone
copy sees one device in either ``order`` (``sweep.train.observers.single_device``: under
``order=standalone_first`` it trains inside the rank, where it added it too and the copies
agreed), so the copies part at step 0, as a single device's run and a distributed one would.
"""

from __future__ import annotations


def branchy_mlp(*, framework: str, in_size: int, hidden_size: int, out_size: int, init_std: float):
    import torch
    import torch.distributed as dist
    from torch import nn

    if framework != "torch":
        raise ValueError(f"branchy_mlp is a torch model, not {framework}")

    class BranchyMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer0 = nn.Linear(in_size, hidden_size)
            self.layer1 = nn.Linear(hidden_size, out_size)
            for layer in (self.layer0, self.layer1):
                nn.init.normal_(layer.weight, std=init_std)
                nn.init.zeros_(layer.bias)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.layer1(torch.relu(self.layer0(x)))
            if dist.is_available() and dist.is_initialized():
                out = out + 0.05 * (dist.get_world_size() - 1)
            return out

    return BranchyMLP()
