"""A model whose forward reads the rank (a new user's): ``model._target_=tests.helpers.rank_model.rank_branch_mlp``.

``l0`` Linear(in_size, hidden_size) -> ReLU -> (+1e-3 on rank 1 of an initialised process
group) -> ``l1`` Linear(hidden_size, out_size). Input ``(rows, in_size)`` float32, output
``(rows, out_size)``. The standalone copy trains on rank 0 and its twin on the last rank
(``sweep.train.twin.trains``): at two ranks the twin takes the branch the standalone copy does
not, so its losses would measure the branch, not rounding (``sweep.analysis.envelope.twin_unlike``).
On MindSpore the same, as a Cell (``nn.Dense``; the rank read with ``get_rank()`` where the
process group is up).
"""

from __future__ import annotations

OFFSET = 1e-3


def rank_branch_mlp(*, framework: str, in_size: int, hidden_size: int, out_size: int, **_: object):
    """The model of the module docstring."""
    if framework == "mindspore":
        return _rank_branch_cell(in_size, hidden_size, out_size)
    import torch
    import torch.distributed as dist
    from torch import nn

    class RankBranch(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l0 = nn.Linear(in_size, hidden_size)
            self.l1 = nn.Linear(hidden_size, out_size)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.relu(self.l0(x))
            if dist.is_initialized() and dist.get_rank() == 1:
                h = h + OFFSET
            return self.l1(h)

    return RankBranch()


def _rank_branch_cell(in_size: int, hidden_size: int, out_size: int):
    from mindspore import nn

    try:
        from mindspore.communication import get_rank

        offset = OFFSET if get_rank() == 1 else 0.0
    except Exception:  # no process group (a standalone-only process): rank 0's branch
        offset = 0.0

    class RankBranch(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.l0 = nn.Dense(in_size, hidden_size)
            self.l1 = nn.Dense(hidden_size, out_size)
            self.relu = nn.ReLU()

        def construct(self, x):
            return self.l1(self.relu(self.l0(x)) + offset)

    return RankBranch()


rank_branch_mlp.frameworks = ("torch", "mindspore")
