"""A model whose forward draws random numbers, nothing reseeded by the model itself:
``model._target_=tests.helpers.dropout_model.dropout_mlp``.

``layer0`` Linear(in_size, hidden_size) -> ``drop`` Dropout(0.1) -> ``norm`` LayerNorm
-> ReLU -> ``layer1`` Linear(hidden_size, out_size). Input ``(rows, in_size)`` float32,
output ``(rows, out_size)``. Each training forward draws a Bernoulli mask of shape
``(rows, hidden_size)``, so the two copies match only if they draw the same masks.
On torch the mask comes from torch's global generator; on MindSpore from ``nn.Dropout``'s
kernel, whose seeds are fixed when the Cell is built (``mindspore.common.seed``).
"""

from __future__ import annotations

P = 0.1


def dropout_mlp(*, framework: str, in_size: int, hidden_size: int, out_size: int, init_std: float):
    """``layer0`` -> ``drop`` Dropout(0.1) -> ``norm`` LayerNorm -> ReLU -> ``layer1`` (module
    docstring)."""
    return _built(framework, "norm", "layer_norm", in_size, hidden_size, out_size, init_std)


dropout_mlp.frameworks = ("torch", "mindspore")


def dropout_bn_mlp(*, framework: str, in_size: int, hidden_size: int, out_size: int, init_std: float):
    """``layer0`` -> ``drop`` Dropout(0.1) -> ``bn`` BatchNorm1d -> ReLU -> ``layer1``: a model
    that both draws random numbers and keeps running statistics (issue 51: a correct model of
    this kind names nothing)."""
    return _built(framework, "bn", "batch_norm", in_size, hidden_size, out_size, init_std)


dropout_bn_mlp.frameworks = ("torch", "mindspore")


def _built(framework: str, norm_name: str, norm: str, in_size: int, hidden_size: int, out_size: int,
           init_std: float):
    """The model on ``framework``: ``layer0``, ``drop``, the norm (``norm``: ``layer_norm`` or
    ``batch_norm``) as ``norm_name``, ReLU, ``layer1``."""
    if framework == "mindspore":
        return _mindspore(norm_name, norm, in_size, hidden_size, out_size, init_std)
    import torch
    from torch import nn

    class DropoutMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer0 = nn.Linear(in_size, hidden_size)
            self.drop = nn.Dropout(P)
            setattr(self, norm_name, nn.LayerNorm(hidden_size) if norm == "layer_norm" else nn.BatchNorm1d(hidden_size))
            self.layer1 = nn.Linear(hidden_size, out_size)
            for layer in (self.layer0, self.layer1):
                nn.init.normal_(layer.weight, std=init_std)
                nn.init.zeros_(layer.bias)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer1(torch.relu(getattr(self, norm_name)(self.drop(self.layer0(x)))))

    return DropoutMLP()


def _mindspore(norm_name: str, norm: str, in_size: int, hidden_size: int, out_size: int, init_std: float):
    from mindspore import mint, nn
    from mindspore.common.initializer import Normal

    class DropoutMLP(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.layer0 = nn.Dense(in_size, hidden_size, weight_init=Normal(sigma=init_std), bias_init="zeros")
            self.drop = nn.Dropout(p=P)
            setattr(self, norm_name, nn.LayerNorm((hidden_size,), epsilon=1e-5) if norm == "layer_norm"
                    else nn.BatchNorm1d(hidden_size))
            self.layer1 = nn.Dense(hidden_size, out_size, weight_init=Normal(sigma=init_std), bias_init="zeros")

        def construct(self, x):
            return self.layer1(mint.nn.ReLU()(getattr(self, norm_name)(self.drop(self.layer0(x)))))

    return DropoutMLP()
