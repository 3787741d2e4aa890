"""The presets' MindSpore cells (``sweep.models``), following the report's reproducer:
``nn.Dense`` with ``weight_init=Normal(init_std)`` (``"normal"`` is ``Normal(sigma=0.01)``),
``bias_init="zeros"``, ``mint.nn.ReLU``."""

from __future__ import annotations

from typing import Any

from mindspore import mint, nn
from mindspore.common.initializer import Normal


def _dense(in_size: int, out_size: int, init_std: float) -> Any:
    return nn.Dense(in_size, out_size, weight_init=Normal(sigma=init_std), bias_init="zeros")


class MLP(nn.Cell):
    """The report's ``SimpleMLP``: ``layer1(relu(layer0(x)))``."""

    def __init__(self, in_size: int, hidden_size: int, out_size: int, init_std: float) -> None:
        super().__init__()
        self.layer0 = _dense(in_size, hidden_size, init_std)
        self.layer1 = _dense(hidden_size, out_size, init_std)

    def construct(self, x: Any) -> Any:
        x = self.layer0(x)
        x = mint.nn.ReLU()(x)
        return self.layer1(x)


class MLPNorm(nn.Cell):
    """``norm1(layer1(relu(norm0(layer0(x)))))``: ``nn.LayerNorm``, then ``nn.BatchNorm1d``
    (``momentum=0.9`` is MindSpore's name for PyTorch's ``momentum=0.1``)."""

    def __init__(self, in_size: int, hidden_size: int, out_size: int, init_std: float) -> None:
        super().__init__()
        self.layer0 = _dense(in_size, hidden_size, init_std)
        self.norm0 = nn.LayerNorm((hidden_size,), epsilon=1e-5)
        self.layer1 = _dense(hidden_size, out_size, init_std)
        self.norm1 = nn.BatchNorm1d(out_size, momentum=0.9, eps=1e-5)

    def construct(self, x: Any) -> Any:
        return self.norm1(self.layer1(mint.nn.ReLU()(self.norm0(self.layer0(x)))))


def to_dtype(net: Any, dtype: str) -> Any:
    """``net`` with parameters in ``dtype`` (``"float32"``: unchanged). Other dtypes are
    refused before launch on MindSpore (``sweep.frameworks.mindspore``)."""
    if dtype == "float32":
        return net
    import mindspore as ms

    for param in net.get_parameters():
        param.set_dtype(getattr(ms, dtype))
    return net
