"""What both torch copies get alike, around the engine: before sharding, the frozen and
tied parameters (``sweep.train.params``) and activation checkpointing
(``sweep.train.activations``); after it, ``torch.compile``. The two copies differ in their
engine and nothing else, so each step here is applied to each copy by the same call."""

from __future__ import annotations

from typing import Any, Dict

from sweep.config.enums import as_str


def prepare(cfg: Any, model: Any) -> Dict[str, Any]:
    """Apply ``model.frozen``, ``model.tie`` and ``activation_checkpoint`` to ``model`` in
    place (in that order: a tied pair is frozen as one parameter, and the wrappers come
    last). Returns what was applied: ``{"frozen": [names], "tied": [[a, b]], "activation_checkpoint":
    {"mode", "wrapped", ...}}``, ``tied`` holding ``model.tie``'s pairs and the model's own
    (``sweep.train.params.tied_names``).

    Raises:
        ValueError: a pattern or a name the model does not have (from ``sweep.train.params``).
    """
    from sweep.train.activations import apply_checkpointing
    from sweep.train.params import freeze, tie, tied_names

    model_cfg = cfg.model
    return {"tied": tied_names(model, tie(model, list(model_cfg.get("tie") or []))),
            "frozen": freeze(model, list(model_cfg.get("frozen") or [])),
            "activation_checkpoint": apply_checkpointing(model, cfg.activation_checkpoint)}


def compile_model(cfg: Any, model: Any) -> Any:
    """``torch.compile(model, backend=compile.backend)`` with ``compile.enabled``, else
    ``model``. The compiled module's parameters are the model's (their names gain
    ``_orig_mod.``, which ``sweep.analysis.trace.canonical_name`` drops). Dynamo guards on the
    modules' hooks (``skip_nnmodule_hook_guards=False``): each copy runs its own observers."""
    if not cfg.compile.enabled:
        return model
    import torch
    import torch._dynamo.config

    # Copies of one class share dynamo's compiled code; without guards on their hooks, a later copy runs
    # an earlier one's (the twin's observers on the standalone copy: its module trace left empty on that rank)
    torch._dynamo.config.skip_nnmodule_hook_guards = False
    return torch.compile(model, backend=str(cfg.compile.backend))


def features_record(cfg: Any, applied: Dict[str, Any]) -> Dict[str, Any]:
    """``RankResult.features``: :func:`prepare`'s record plus the other settings both
    copies ran with (``activation_offload``, ``compile``, ``model.init``, ``lr_scheduler``)."""
    return dict(applied, activation_offload=bool(cfg.activation_offload),
                compile=str(cfg.compile.backend) if cfg.compile.enabled else None,
                init=as_str(cfg.model.init), lr_scheduler=as_str(cfg.train.lr_scheduler))
