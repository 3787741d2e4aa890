"""Which sub-modules become ``fully_shard`` units, and with which policy (``wrap``,
``mp_policy.overrides``), for the engines that call a ``fully_shard``: PyTorch FSDP2 and
hyper-parallel on torch.

FSDP2's usual pattern (the ``fully_shard`` docs, torchtitan's ``apply_fsdp``): shard each
layer, then the root, which takes the parameters no layer holds. A module named in
``mp_policy.overrides`` becomes a unit of its own with the job's policy merged with its
override, e.g. a BatchNorm kept in float32 under a float16 policy. Units are sharded
innermost first (a nested unit before the one that contains it), as ``fully_shard``
requires.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from omegaconf import OmegaConf

from sweep import models
from sweep.config.enums import as_str

POLICY_KEYS = ("param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs")


def layer_names(model: Any) -> List[str]:
    """The layers of ``wrap=per_layer``: each entry of the model's ``layers`` (torchtitan's
    convention: ``layers.0``, ...; a ``ModuleDict``'s keys) if it has that attribute, else each
    direct child that holds parameters; a child that is a container (``ModuleList``,
    ``ModuleDict``: no ``forward`` of its own, which ``fully_shard`` needs to hook) gives its
    entries instead (``blocks.0``, ``blocks.1``, ...)."""
    layers = getattr(model, "layers", None)
    if layers is not None and hasattr(layers, "named_children"):
        return [f"layers.{name}" for name, _ in layers.named_children()]
    if layers is not None and hasattr(layers, "__iter__"):
        return [f"layers.{i}" for i, _ in enumerate(layers)]
    names = []
    for name, child in model.named_children():
        if not _holds_parameters(child):
            continue
        if _container(child):
            names += [f"{name}.{entry}" for entry, module in child.named_children() if _holds_parameters(module)]
        else:
            names.append(name)
    return names


def _holds_parameters(module: Any) -> bool:
    return any(True for _ in module.parameters())


def _container(module: Any) -> bool:
    """A ``ModuleList`` or ``ModuleDict`` (torch's containers, whose ``forward`` is not
    implemented)."""
    import torch

    return isinstance(module, (torch.nn.ModuleList, torch.nn.ModuleDict))


def policy_for(mp_cfg: Any, override: Any) -> Any:
    """The job's ``mp_policy`` with ``override``'s keys replaced (a DictConfig)."""
    base = {k: mp_cfg[k] for k in POLICY_KEYS}
    merged = OmegaConf.merge(OmegaConf.create({k: getattr(v, "value", v) for k, v in base.items()}),
                             OmegaConf.create(dict(override or {})))
    return merged


def tied_apart(model: Any, names: List[str]) -> Dict[str, str]:
    """The modules of ``names`` that share a parameter (tied embeddings: ``wte`` and ``head``)
    with a module that neither contains nor lies inside them: ``{name: "shares mid.weight
    with mid2"}``. ``fully_shard`` refuses a parameter already managed by another unit, the
    root's included (``ValueError: Parameter ... is shared with a parameter already managed
    by another FSDP group``)."""
    canonical = {}
    for pname, param in model.named_parameters(remove_duplicate=False):
        canonical.setdefault(id(param), pname)
    out: Dict[str, str] = {}
    for name in names:
        own = {id(p) for p in model.get_submodule(name).parameters()}
        for other, module in model.named_modules(remove_duplicate=False):
            if other == name or other.startswith(name + ".") or (other and name.startswith(other + ".")):
                continue  # itself, inside it, or a module that holds it (the root's own parameters do count)
            shared = sorted(canonical[id(p)] for p in module.parameters(recurse=False) if id(p) in own)
            if shared:
                out[name] = f"shares {', '.join(shared)} with {other}"
                break
    return out


def units(model: Any, cfg: Any, notes: Optional[List[str]] = None) -> List[Tuple[str, Any, Any]]:
    """``(name, module, policy)`` for every unit below the root, innermost first. A key of
    ``mp_policy.overrides`` names a module (``norm1``, ``layers.0.attn_norm``) or a module
    class (``BatchNorm1d``: every module of that class, as FSDP1's mixed precision kept
    batch norms in float32).

    Units that share a parameter with another unit (:func:`tied_apart`) are left to the root,
    with a line in ``notes`` where given (the engine's notes).

    Raises:
        ValueError: an override key that is neither a module nor a module class of the model,
            or one naming a module that shares a parameter with another unit.
    """
    overrides = dict(cfg.mp_policy.get("overrides") or {})
    modules = {name: module for name, module in model.named_modules() if name}
    chosen: Dict[str, Any] = {}
    for key, override in overrides.items():
        matches = [key] if key in modules else [n for n, m in modules.items() if type(m).__name__ == key]
        if not matches:
            classes = sorted({type(m).__name__ for m in modules.values()})
            raise ValueError(f"mp_policy.overrides.{key}: {models.label(cfg)} has no module or module class "
                             f"of that name; its modules: {', '.join(modules)}; classes: {', '.join(classes)}")
        for name in matches:
            chosen[name] = override
    names = set(chosen)
    if as_str(cfg.wrap) == "per_layer":
        names.update(layer_names(model))
    for name, why in tied_apart(model, sorted(names)).items():
        if name in chosen:
            raise ValueError(f"mp_policy.overrides: {name} {why}, so it cannot be a fully_shard unit of its own "
                             "with a policy of its own (FSDP2 manages a tied parameter in one unit)")
        names.discard(name)
        if notes is not None:
            notes.append(f"a tied unit left to the root (wrap={as_str(cfg.wrap)}): {name} {why}, so it is no "
                         "fully_shard unit of its own: the root's unit holds it (FSDP2 manages a tied parameter in one "
                         "unit)")
    ordered = sorted(names, key=lambda n: (-n.count("."), n))
    return [(name, model.get_submodule(name), policy_for(cfg.mp_policy, chosen.get(name))) for name in ordered]


def shard(model: Any, cfg: Any, fully_shard: Callable[[Any, Any], Any], root_policy: Any,
          notes: Optional[List[str]] = None) -> Tuple[Any, Dict[str, Any]]:
    """Apply ``fully_shard(module, policy_cfg)`` to every unit of :func:`units`, then to the
    root with ``root_policy``. Returns the (root) model and a record of the units:
    ``{name: {policy key: value}}`` (``RankResult.engine["units"]``)."""
    record = {}
    for name, module, policy in units(model, cfg, notes):
        fully_shard(module, policy)
        record[name] = {k: policy[k] for k in POLICY_KEYS}
    out = fully_shard(model, root_policy)
    return (model if out is None else out), record
