"""``model.init=meta``: the distributed copy built without storage, sharded, materialised
and initialised, as FSDP2's docs and torchtitan initialise large models (build under
``torch.device("meta")``, ``fully_shard``, ``to_empty(device=...)``, ``init_weights()``).

Initialisation after ``to_empty`` (whose storage holds garbage): every module's
``reset_parameters()`` where it has one (norms; BatchNorm also resets its running
statistics), then the model's ``init_weights()`` where it has one (torchtitan's
convention; the presets have it, with their own ``init_std``). A buffer that neither
resets stays uninitialised: a user model on the meta device needs them in one of the
two. On sharded parameters (``DTensor``) the random initialisers draw through DTensor's
random-number tracker, so the values differ from an eager build's; the standalone copy
is then given the distributed copy's initial weights (:func:`full_state`, per
``weights.transfer``), so both start equal.
"""

from __future__ import annotations

from typing import Any, Dict


def materialize(model: Any, device: Any, seed: int) -> Any:
    """``model.to_empty(device=device)``, then the initialisation of the module docstring
    under ``torch.manual_seed(seed)``, without gradient tracking. Returns ``model``."""
    import torch

    model.to_empty(device=device)
    torch.manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if module is not model and hasattr(module, "reset_parameters"):
                module.reset_parameters()
        if hasattr(model, "init_weights"):
            model.init_weights()
    return model


def full_state(model: Any) -> Dict[str, Any]:
    """``model.state_dict()`` with every sharded ``DTensor`` gathered (``full_tensor()``: a
    collective every rank makes at the same point), as plain tensors."""
    return {name: (value.full_tensor() if hasattr(value, "full_tensor") else value).detach().clone()
            for name, value in model.state_dict().items()}
