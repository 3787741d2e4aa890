"""Frozen and tied parameters, applied to both copies alike before sharding
(``model.frozen``, ``model.tie``; torch). PyTorch's FSDP2 parity tests sweep both
(``test_fully_shard_frozen.py``, shared parameters): a unit may mix frozen and trained
parameters, and a tied pair is one ``Parameter`` reached by two names."""

from __future__ import annotations

import fnmatch
from typing import Any, Dict, List, Sequence


def freeze(model: Any, patterns: Sequence[str]) -> List[str]:
    """``requires_grad=False`` on every parameter whose name matches one of ``patterns``
    (``fnmatch``: ``layer0.*``). Returns the frozen names.

    Raises:
        ValueError: a pattern that matches no parameter (names the model's).
    """
    names = [name for name, _ in model.named_parameters()]
    frozen = []
    for pattern in patterns:
        hits = [n for n in names if fnmatch.fnmatchcase(n, str(pattern))]
        if not hits:
            raise ValueError(f"model.frozen: {pattern!r} matches no parameter; the model's: {', '.join(names)}")
        frozen.extend(h for h in hits if h not in frozen)
    params = dict(model.named_parameters())
    for name in frozen:
        params[name].requires_grad_(False)
    return frozen


def tie(model: Any, pairs: Sequence[Sequence[str]]) -> List[List[str]]:
    """For each ``[a, b]``: the module holding ``b`` gets ``a``'s ``Parameter`` under
    ``b``'s name (one tensor, two names; ``named_parameters`` then lists it once, as
    ``a``). Returns the pairs tied.

    Raises:
        ValueError: a pair that is not two names of parameters of one shape.
    """
    params: Dict[str, Any] = dict(model.named_parameters(remove_duplicate=False))
    done = []
    for pair in pairs:
        if len(pair) != 2 or any(name not in params for name in pair):
            raise ValueError(f"model.tie: {list(pair)} must be two parameter names; the model's: {', '.join(params)}")
        a, b = (str(n) for n in pair)
        if tuple(params[a].shape) != tuple(params[b].shape):
            raise ValueError(f"model.tie: {a} {tuple(params[a].shape)} and {b} {tuple(params[b].shape)} differ in shape")
        owner, _, attr = b.rpartition(".")
        setattr(model.get_submodule(owner) if owner else model, attr, params[a])
        done.append([a, b])
    return done


def tied_names(model: Any, known: Sequence[Sequence[str]] = ()) -> List[List[str]]:
    """Every tie that runs in ``model``: the ``known`` pairs (``model.tie``'s, as :func:`tie`
    made them), then each further ``[a, b]`` of two names of one ``Parameter`` (``a`` the first
    name ``named_parameters`` gives it): a model that ties its weights in its own code (a
    language model's embedding and head) is recorded as tied too."""
    out = [list(p) for p in known]
    seen = {frozenset(p) for p in out}
    first: Dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) not in first:
            first[id(param)] = name
        elif frozenset((first[id(param)], name)) not in seen:
            out.append([first[id(param)], name])
    return out
