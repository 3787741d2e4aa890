"""A model's weights from one framework's names and layouts to another's, framework-free
(numpy): what ``baseline.framework`` needs to start the standalone copy in the other
framework from the distributed copy's initial weights.

Names are kept in a *canonical* form, PyTorch's: the presets' parameter names match
across the ports (``layer0.weight``, ``layer0.bias``, ...; ``sweep.models.torch_models``),
except the norms', whose last part MindSpore spells otherwise (:data:`MINDSPORE_NAMES`:
``gamma``/``beta`` are ``weight``/``bias``, BatchNorm's ``moving_mean``/``moving_variance``
are ``running_mean``/``running_var``). Layouts: ``nn.Dense``'s weight is ``(out, in)`` as
``nn.Linear``'s, and the norms' tensors are ``(features,)`` in both, so every value keeps
its shape; a tensor whose shape differs is refused, naming it, rather than reshaped.
PyTorch's BatchNorm ``num_batches_tracked`` (int64, 0 before any step) has no MindSpore
counterpart (:data:`TORCH_ONLY`): it is not carried, and a torch copy keeps its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Mapping, Tuple

import numpy as np

# MindSpore's last name part -> PyTorch's (canonical)
MINDSPORE_NAMES = {"gamma": "weight", "beta": "bias", "moving_mean": "running_mean",
                   "moving_variance": "running_var"}
# Each framework's last-name-part renames into the canonical (PyTorch's) spelling, as data:
# a framework not here already spells its names canonically.
RENAMED = {"mindspore": MINDSPORE_NAMES}
# PyTorch buffers with no MindSpore counterpart (last name part); not carried across
TORCH_ONLY = ("num_batches_tracked",)


def canonical_name(name: str, framework: str) -> str:
    """``name`` of a ``framework`` (``"torch"`` or ``"mindspore"``) parameter in PyTorch's
    spelling (``norm0.gamma`` -> ``norm0.weight`` for MindSpore; PyTorch's unchanged)."""
    names = RENAMED.get(framework)
    if not names:
        return name
    head, _, last = name.rpartition(".")
    last = names.get(last, last)
    return f"{head}.{last}" if head else last


def to_canonical(state: Mapping[str, np.ndarray], framework: str) -> Dict[str, np.ndarray]:
    """``state`` (name -> array, ``framework``'s names) under canonical names, without
    the entries of :data:`TORCH_ONLY`.

    Raises:
        ValueError: two names that become one.
    """
    out: Dict[str, np.ndarray] = {}
    for name, value in state.items():
        if name.rpartition(".")[2] in TORCH_ONLY:
            continue
        key = canonical_name(name, framework)
        if key in out:
            raise ValueError(f"{framework} parameters {name} and another both map to {key}")
        out[key] = np.asarray(value)
    return out


def from_canonical(canonical: Mapping[str, np.ndarray], wanted: Mapping[str, Tuple[int, ...]], framework: str,
                   source: str, source_names: Mapping[str, str]) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """The values of ``canonical`` (written by ``source``'s copy, :func:`save`) for each
    parameter and buffer ``wanted`` (name -> shape, ``framework``'s names) names;
    ``source_names``: canonical name -> ``source``'s own. Returns ``(values, renamed)``:
    ``values`` by ``framework``'s names (every wanted name but those of :data:`TORCH_ONLY`),
    ``renamed``: ``{name here: name in source}`` where the two differ.

    Raises:
        ValueError: one line naming the tensor: a wanted name with no counterpart in
            ``canonical``, an entry of ``canonical`` nothing here takes, or a shape that differs.
    """
    values: Dict[str, np.ndarray] = {}
    renamed: Dict[str, str] = {}
    for name, shape in wanted.items():
        if name.rpartition(".")[2] in TORCH_ONLY:
            continue
        key = canonical_name(name, framework)
        if key not in canonical:
            raise ValueError(f"{framework}'s {name} has no counterpart in the {source} copy's weights "
                             f"(it has: {', '.join(sorted(source_names.get(k, k) for k in canonical))})")
        theirs = source_names.get(key, key)
        value = np.asarray(canonical[key])
        if tuple(value.shape) != tuple(shape):
            raise ValueError(f"{framework}'s {name} is {tuple(shape)}, the {source} copy's {theirs} is "
                             f"{tuple(value.shape)}: no layout conversion for it")
        values[name] = value
        if theirs != name:
            renamed[name] = theirs
    unused = sorted(set(canonical) - {canonical_name(n, framework) for n in wanted})
    if unused:
        raise ValueError(f"the {source} copy's {', '.join(sorted(source_names.get(k, k) for k in unused))} "
                         f"{'have' if len(unused) > 1 else 'has'} no counterpart in the {framework} copy")
    return values, renamed


def save(path: Path | str, state: Mapping[str, np.ndarray], framework: str) -> None:
    """Write ``state`` (``framework``'s names -> arrays) to ``path`` (``.npz``) under canonical
    names (:func:`to_canonical`), with the writer's framework (``__framework__``) and its own
    names (``__names__``: pairs ``[canonical, own]``); written to a temporary name first,
    then renamed (a reader never sees half a file).

    Raises:
        ValueError: see :func:`to_canonical`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    canonical = to_canonical(state, framework)
    own = [[canonical_name(n, framework), n] for n in state if canonical_name(n, framework) in canonical]
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, __framework__=np.array(framework), __names__=np.array(own, dtype=str).reshape(-1, 2),
             **canonical)
    tmp.replace(path)


def load(path: Path | str) -> Tuple[Dict[str, np.ndarray], str, Dict[str, str]]:
    """``(canonical state, writer's framework, {canonical name: writer's name})`` of a file
    :func:`save` wrote.

    Raises:
        FileNotFoundError: no such file.
    """
    with np.load(Path(path)) as data:
        state = {k: data[k] for k in data.files if not k.startswith("__")}
        names = {str(c): str(o) for c, o in data["__names__"]}
        return state, str(data["__framework__"]), names
