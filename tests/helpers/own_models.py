"""Factories a new user writes wrong (``model._target_=tests.helpers.own_models.<name>``):
``no_framework`` takes no ``framework`` argument; ``torch_only`` builds a torch module whatever
framework it is asked for; ``tied_chain`` has two children that share a weight (a user's own tied
model)."""

from __future__ import annotations


def no_framework(in_size: int, out_size: int, hidden: int = 16):
    """A torch ``Linear(in_size, out_size)``; no ``framework`` argument (refused before launch)."""
    import torch

    return torch.nn.Linear(in_size, out_size)


def torch_only(*, framework: str, in_size: int, out_size: int):
    """A torch ``Linear(in_size, out_size)`` for every ``framework`` (refused where it is built
    for MindSpore)."""
    return no_framework(in_size, out_size)


def tied_chain(*, framework: str, in_size: int, hidden_size: int, out_size: int):
    """``inp`` -> tanh -> ``mid`` -> tanh -> ``mid2`` -> ``out`` (torch Linears), ``mid2``'s weight
    tied to ``mid``'s, with no ``layers``: ``wrap=per_layer`` takes each child as a unit, and
    two of them share a parameter (as a tied embedding and LM head do)."""
    import torch

    class TiedChain(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = torch.nn.Linear(in_size, hidden_size)
            self.mid = torch.nn.Linear(hidden_size, hidden_size)
            self.mid2 = torch.nn.Linear(hidden_size, hidden_size)
            self.mid2.weight = self.mid.weight
            self.out = torch.nn.Linear(hidden_size, out_size)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(self.mid2(torch.tanh(self.mid(torch.tanh(self.inp(x))))))

    return TiedChain()


def input_in_place(*, framework: str, in_size: int, hidden_size: int, out_size: int):
    """``Linear`` -> tanh -> ``Linear`` whose forward halves its input in place (``x.mul_(0.5)``):
    correct maths, a side effect on the data it is given (a new user's model). Torch."""
    import torch

    class InputInPlace(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = torch.nn.Linear(in_size, hidden_size)
            self.out = torch.nn.Linear(hidden_size, out_size)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x.mul_(0.5)
            return self.out(torch.tanh(self.inp(x)))

    return InputInPlace()


def random_projection(*, framework: str, in_size: int, hidden_size: int, out_size: int, persistent: bool = False):
    """A fixed random projection of the input (a buffer drawn with ``torch.randn`` at
    construction, ``persistent=False`` by default: in no ``state_dict``), then ``Linear`` ->
    tanh -> ``Linear`` (a new user's model). Torch."""
    import torch

    class RandomProjection(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("proj", torch.randn(in_size, in_size) / in_size ** 0.5, persistent=persistent)
            self.inp = torch.nn.Linear(in_size, hidden_size)
            self.out = torch.nn.Linear(hidden_size, out_size)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(torch.tanh(self.inp(x @ self.proj)))

    return RandomProjection()


def synced_centre(*, framework: str, in_size: int, hidden_size: int, out_size: int, ask: bool = True):
    """``Linear`` -> centring by the batch mean averaged over the ranks (``all_reduce``, a
    hand-written SyncBatchNorm) -> tanh -> ``Linear`` (a new user's model). ``ask``: only where
    ``torch.distributed.is_initialized()``, as single-device-and-distributed code does; else
    always. Torch."""
    import torch
    import torch.distributed as dist

    class SyncedCentre(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = torch.nn.Linear(in_size, hidden_size)
            self.out = torch.nn.Linear(hidden_size, out_size)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.inp(x)
            mean = h.mean(0, keepdim=True)
            if not ask or dist.is_initialized():
                mean = mean.clone()
                dist.all_reduce(mean)
                mean = mean / dist.get_world_size()
            return self.out(torch.tanh(h - mean))

    return SyncedCentre()


def item_mse(output, target):
    """The mean squared error as a Python float (``.item()``): a new user's loss that no backward
    can start from. Torch."""
    import torch.nn.functional as F

    return F.mse_loss(output, target).item()


def sum_mse(output, target):
    """``F.mse_loss(..., reduction="sum")``: a loss that sums over the batch (a new user's), where
    ``train.loss`` must average. Torch."""
    import torch.nn.functional as F

    return F.mse_loss(output, target, reduction="sum")


def per_row_mse(output, target):
    """``F.mse_loss(..., reduction="none")``: a loss of one element per value (a new user's). Torch."""
    import torch.nn.functional as F

    return F.mse_loss(output, target, reduction="none")


def renorm_embedding(*, framework: str, vocab_size: int, dim: int = 16, max_norm: float = 0.5):
    """``nn.Embedding(vocab_size, dim, max_norm=max_norm)`` -> ``Linear(dim, vocab_size)``: the
    embedding renorms the rows it looks up in place, in the forward (a new user's tagger). Torch;
    ``train.loss=cross_entropy`` on ``sweep.models.data.tokens``."""
    import torch

    class Tagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(vocab_size, dim, max_norm=max_norm)
            self.head = torch.nn.Linear(dim, vocab_size)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.emb(x))

    return Tagger()


def hand_running_mean(*, framework: str, in_size: int, hidden_size: int, out_size: int):
    """``Linear`` -> tanh -> minus a running mean of the hidden features that the forward updates
    itself in every mode (a hand-written BatchNorm statistic: a torch buffer moved in place, a
    MindSpore ``Parameter(requires_grad=False)`` moved by ``ops.assign``) -> ``Linear``; the loss
    reads the mean (a new user's MindSpore model). Torch or MindSpore."""
    import numpy as np

    if framework == "torch":
        import torch

        class HandRunningMean(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inp = torch.nn.Linear(in_size, hidden_size)
                self.out = torch.nn.Linear(hidden_size, out_size)
                self.register_buffer("run_mean", torch.zeros(hidden_size))

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                h = torch.tanh(self.inp(x))
                with torch.no_grad():
                    self.run_mean.mul_(0.9).add_(0.1 * h.mean(0))
                return self.out(h - self.run_mean)

        return HandRunningMean()
    from mindspore import Parameter, Tensor, nn, ops

    class HandRunningMeanCell(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.inp = nn.Dense(in_size, hidden_size)
            self.out = nn.Dense(hidden_size, out_size)
            self.run_mean = Parameter(Tensor(np.zeros(hidden_size, np.float32)), name="run_mean", requires_grad=False)

        def construct(self, x):
            h = ops.tanh(self.inp(x))
            ops.assign(self.run_mean, self.run_mean * 0.9 + 0.1 * h.mean(axis=0))
            return self.out(h - ops.stop_gradient(self.run_mean))

    return HandRunningMeanCell()


def rank_offset(*, framework: str, in_size: int, hidden_size: int, out_size: int):
    """``Linear`` -> tanh -> ``Linear``, plus 1e-3 on the process whose ``RANK`` is 1 (a model that
    reads its rank from the environment, as launch scripts set it). Torch."""
    import os

    import torch

    class RankOffset(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = torch.nn.Linear(in_size, hidden_size)
            self.out = torch.nn.Linear(hidden_size, out_size)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.out(torch.tanh(self.inp(x)))
            return y + 1e-3 if os.environ.get("RANK") == "1" else y

    return RankOffset()
