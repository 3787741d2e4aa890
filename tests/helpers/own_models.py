"""Factories a new user writes wrong (``model._target_=tests.helpers.own_models.<name>``):
``no_framework`` takes no ``framework`` argument; ``torch_only`` builds a torch module whatever
framework it is asked for."""

from __future__ import annotations


def no_framework(in_size: int, out_size: int, hidden: int = 16):
    """A torch ``Linear(in_size, out_size)``; no ``framework`` argument (refused before launch)."""
    import torch

    return torch.nn.Linear(in_size, out_size)


def torch_only(*, framework: str, in_size: int, out_size: int):
    """A torch ``Linear(in_size, out_size)`` for every ``framework`` (refused where it is built
    for MindSpore)."""
    return no_framework(in_size, out_size)
