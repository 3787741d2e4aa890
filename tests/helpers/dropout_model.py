"""A model whose forward draws random numbers from torch's global generator, nothing
reseeded by the model itself: ``model._target_=tests.helpers.dropout_model.dropout_mlp``.

``layer0`` Linear(in_size, hidden_size) -> ``drop`` Dropout(0.1) -> ``norm`` LayerNorm
-> ReLU -> ``layer1`` Linear(hidden_size, out_size). Input ``(rows, in_size)`` float32,
output ``(rows, out_size)``. Each training forward draws a Bernoulli mask of shape
``(rows, hidden_size)``, so the two copies match only if they draw the same masks.
"""

from __future__ import annotations

P = 0.1


def dropout_mlp(*, framework: str, in_size: int, hidden_size: int, out_size: int, init_std: float):
    import torch
    from torch import nn

    if framework != "torch":
        raise ValueError("dropout_mlp is torch only")

    class DropoutMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer0 = nn.Linear(in_size, hidden_size)
            self.drop = nn.Dropout(P)
            self.norm = nn.LayerNorm(hidden_size)
            self.layer1 = nn.Linear(hidden_size, out_size)
            for layer in (self.layer0, self.layer1):
                nn.init.normal_(layer.weight, std=init_std)
                nn.init.zeros_(layer.bias)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer1(torch.relu(self.norm(self.drop(self.layer0(x)))))

    return DropoutMLP()


dropout_mlp.frameworks = ("torch",)
