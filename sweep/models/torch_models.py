"""The presets' PyTorch modules (``sweep.models``). Parameter names match the MindSpore
ports (``layer0.weight``, ...), so reports read the same on both frameworks."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def _init_linear(layer: nn.Linear, init_std: float) -> None:
    nn.init.normal_(layer.weight, mean=0.0, std=init_std)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)


class MLP(nn.Module):
    """``layer1(relu(layer0(x)))``."""

    def __init__(self, in_size: int, hidden_size: int, out_size: int, init_std: float) -> None:
        super().__init__()
        self.layer0 = nn.Linear(in_size, hidden_size)
        self.layer1 = nn.Linear(hidden_size, out_size)
        self.init_std = init_std
        self.init_weights()

    def init_weights(self) -> None:
        """Weights ~ N(0, init_std^2), biases zero (also after ``to_empty``: ``model.init=meta``)."""
        for layer in (self.layer0, self.layer1):
            _init_linear(layer, self.init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer1(torch.relu(self.layer0(x)))


class MLPNorm(nn.Module):
    """``norm1(layer1(relu(norm0(layer0(x)))))``: LayerNorm, then BatchNorm1d."""

    def __init__(self, in_size: int, hidden_size: int, out_size: int, init_std: float) -> None:
        super().__init__()
        self.layer0 = nn.Linear(in_size, hidden_size)
        self.norm0 = nn.LayerNorm(hidden_size)
        self.layer1 = nn.Linear(hidden_size, out_size)
        self.norm1 = nn.BatchNorm1d(out_size)
        self.init_std = init_std
        self.init_weights()

    def init_weights(self) -> None:
        """Linear weights ~ N(0, init_std^2), biases zero; the norms' defaults."""
        for layer in (self.layer0, self.layer1):
            _init_linear(layer, self.init_std)
        for norm in (self.norm0, self.norm1):
            norm.reset_parameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm1(self.layer1(torch.relu(self.norm0(self.layer0(x)))))


class Block(nn.Module):
    """Pre-norm decoder block: causal self-attention and an MLP, each with a residual."""

    def __init__(self, dim: int, num_heads: int, init_std: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.attn_norm = nn.RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp_norm = nn.RMSNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)
        self.init_std = init_std
        self.init_weights()

    def init_weights(self) -> None:
        """Linear weights ~ N(0, init_std^2), biases zero; the norms' defaults."""
        for layer in (self.qkv, self.proj, self.up, self.down):
            _init_linear(layer, self.init_std)
        for norm in (self.attn_norm, self.mlp_norm):
            norm.reset_parameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows, seq, dim = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).split(dim, dim=-1)
        q, k, v = (t.view(rows, seq, self.num_heads, dim // self.num_heads).transpose(1, 2) for t in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(rows, seq, dim))
        return x + self.down(F.silu(self.up(self.mlp_norm(x))))


class TinyDecoder(nn.Module):
    """``head(norm(layers(embed(tokens))))``: logits ``(rows, seq_len, vocab_size)``."""

    def __init__(self, vocab_size: int, seq_len: int, hidden_size: int, num_layers: int, num_heads: int,
                 init_std: float) -> None:
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"hidden_size={hidden_size} is not a multiple of num_heads={num_heads}")
        self.seq_len = seq_len
        self.embed = nn.Embedding(vocab_size, hidden_size)
        nn.init.normal_(self.embed.weight, mean=0.0, std=init_std)
        self.layers = nn.ModuleList(Block(hidden_size, num_heads, init_std) for _ in range(num_layers))
        self.norm = nn.RMSNorm(hidden_size)
        self.head = nn.Linear(hidden_size, vocab_size, bias=False)
        _init_linear(self.head, init_std)
        self.init_std = init_std

    def init_weights(self) -> None:
        """The construction's initialisation in its order (embedding, each block, head): for
        ``model.init=meta``, after ``to_empty``."""
        nn.init.normal_(self.embed.weight, mean=0.0, std=self.init_std)
        for block in self.layers:
            block.init_weights()
        self.norm.reset_parameters()
        _init_linear(self.head, self.init_std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.layers:
            x = block(x)
        return self.head(self.norm(x))


def to_dtype(model: Any, dtype: str) -> Any:
    """``model`` with parameters and floating buffers in ``dtype`` (``"float32"``: unchanged)."""
    return model if dtype == "float32" else model.to(getattr(torch, dtype))
