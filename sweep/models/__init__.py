"""The models and data both copies train: model presets and the ``model._target_`` contract (here), data factories (``data``), weights between the frameworks' names (``convert``).

May import: ``sweep.config`` and the contracts at the top only.

``model._target_`` names a factory, called through ``hydra.utils.instantiate`` as
``factory(framework=<"torch" | "mindspore">, **kwargs)``. ``kwargs`` are those of
``in_size``, ``hidden_size``, ``out_size``, ``init_std`` the factory's signature names
(all of them if it takes ``**kwargs``), and every entry of ``model.args``. The factory
returns a ``torch.nn.Module`` (``framework="torch"``) or a ``mindspore.nn.Cell``
(``"mindspore"``) in float32; the job then moves it to ``model.init_dtype``. It is
called once per copy under the same seed state, and the standalone copy then takes the
distributed copy's initial weights (``weights.transfer``), so it need not be
deterministic. A factory may declare the frameworks it supports with a ``frameworks``
attribute (a tuple of names); a job on another framework is then refused before launch.

The presets (``conf/model/``) are the factories of this module.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict

from sweep.config.enums import as_str
from sweep.errors import ConfigError

SIZES = ("in_size", "hidden_size", "out_size", "init_std")


def _frameworks(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def mark(factory: Callable[..., Any]) -> Callable[..., Any]:
        factory.frameworks = names  # type: ignore[attr-defined]
        return factory

    return mark


# Each framework's port of the built-in models (one module a framework: the same classes by
# name); a new framework adds its module here, as data: nothing branches on its name.
PORTS = {"torch": "sweep.models.torch_models", "mindspore": "sweep.models.mindspore_models"}


def _port(framework: str) -> Any:
    """The module of ``framework``'s built-in models (:data:`PORTS`).

    Raises:
        ValueError: a framework without built-in models."""
    import importlib

    if framework not in PORTS:
        raise ValueError(f"framework={framework!r}: no built-in models ({', '.join(PORTS)})")
    return importlib.import_module(PORTS[framework])


@_frameworks("torch", "mindspore")
def mlp(*, framework: str, in_size: int, hidden_size: int, out_size: int, init_std: float) -> Any:
    """The report's MLP: ``layer0`` Dense(in_size, hidden_size) -> ReLU -> ``layer1``
    Dense(hidden_size, out_size); weights ~ N(0, init_std^2), biases 0. Input
    ``(rows, in_size)`` float, output ``(rows, out_size)``."""
    return _port(framework).MLP(in_size, hidden_size, out_size, init_std)


@_frameworks("torch", "mindspore")
def mlp_norm(*, framework: str, in_size: int, hidden_size: int, out_size: int, init_std: float) -> Any:
    """``layer0`` Linear(in, hidden) -> ``norm0`` LayerNorm(hidden) -> ReLU -> ``layer1``
    Linear(hidden, out) -> ``norm1`` BatchNorm1d(out) (running statistics as buffers,
    updated in training mode). Linear weights ~ N(0, init_std^2), biases 0; norm weights
    1, biases 0. Input ``(rows, in_size)``, rows >= 2 (batch statistics)."""
    return _port(framework).MLPNorm(in_size, hidden_size, out_size, init_std)


@_frameworks("torch")
def transformer(*, framework: str, hidden_size: int, init_std: float, vocab_size: int = 64, seq_len: int = 16,
                num_layers: int = 2, num_heads: int = 2) -> Any:
    """A tiny causal decoder: ``embed`` (vocab_size x hidden_size), ``layers``:
    ``num_layers`` blocks of RMSNorm -> causal self-attention (``num_heads`` heads,
    ``scaled_dot_product_attention``) + residual, RMSNorm -> MLP (4 x hidden, SiLU) +
    residual; a final RMSNorm and ``head`` Linear(hidden, vocab_size) without bias.
    Input ``(rows, seq_len)`` int64 token ids, output ``(rows, seq_len, vocab_size)``
    logits. torch only."""
    return _port(framework).TinyDecoder(vocab_size, seq_len, hidden_size, num_layers, num_heads, init_std)


def factory_of(cfg: Any) -> Callable[..., Any]:
    """The callable ``model._target_`` names.

    Raises:
        ConfigError: it does not import.
    """
    from sweep.config import factories

    return factories.load("model._target_", str(cfg.model._target_))


def label(cfg: Any) -> str:
    """How messages name the configured model: ``model=NAME`` where ``model._target_`` is still
    that preset's own factory (``sweep.models.NAME``), else ``model._target_=PATH`` (a user's own
    model set by ``model._target_`` alone keeps the preset's ``name``, which would name the wrong
    model)."""
    name, target = as_str(cfg.model.get("name")), str(cfg.model.get("_target_"))
    return f"model={name}" if target == f"{__name__}.{name}" else f"model._target_={target}"


def factory_kwargs(cfg: Any, factory: Callable[..., Any]) -> Dict[str, Any]:
    """The keyword arguments ``factory`` is called with (besides ``framework``): see the
    module docstring."""
    from omegaconf import OmegaConf

    from sweep.config import factories

    kwargs = factories.accepted(factory, {k: cfg.model[k] for k in SIZES})
    kwargs.update(OmegaConf.to_container(cfg.model.args, resolve=True) if cfg.model.args else {})
    return kwargs


def check(cfg: Any, framework: str) -> None:
    """Before launch: the factory imports, supports ``framework`` (its ``frameworks``
    attribute, if any) and accepts ``model.args``.

    Raises:
        ConfigError: naming the model, the framework or the argument.
    """
    factory = factory_of(cfg)
    supported = getattr(factory, "frameworks", None)
    if supported is not None and framework not in supported:
        raise ConfigError(f"{label(cfg)} has no {framework} port; "
                          f"it runs on: {', '.join(supported)}")
    params = inspect.signature(factory).parameters
    if "framework" not in params and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        raise ConfigError(f"model._target_={cfg.model._target_} must take framework= (the framework each copy is "
                          f"built for, 'torch' or 'mindspore', passed by keyword); its signature is "
                          f"{inspect.signature(factory)}")
    try:
        inspect.signature(factory).bind(framework=framework, **factory_kwargs(cfg, factory))
    except TypeError as exc:
        raise ConfigError(f"model._target_={cfg.model._target_} cannot take model.args "
                          f"{dict(cfg.model.args)}: {exc}") from None


def build(cfg: Any, framework: str) -> Any:
    """The model ``cfg.model`` describes, for ``framework``, in ``model.init_dtype``
    (torch: ``module.to(dtype)``; MindSpore: parameters cast with ``set_dtype``).

    Raises:
        ConfigError: see :func:`check`.
    """
    from hydra.utils import instantiate

    factory = factory_of(cfg)
    model = instantiate({"_target_": str(cfg.model._target_), **factory_kwargs(cfg, factory)},
                        framework=framework, _convert_="all")
    _check_built(cfg, framework, model)
    return _port(framework).to_dtype(model, as_str(cfg.model.init_dtype))


MODULE_TYPES = {"torch": ("torch.nn", "Module"), "mindspore": ("mindspore.nn", "Cell")}


def _check_built(cfg: Any, framework: str, model: Any) -> None:
    """That the factory returned a model of ``framework`` (``torch.nn.Module``, ``mindspore.nn.Cell``).

    Raises:
        ConfigError: naming what it returned and what ``framework`` needs (a torch module built for
            ``framework=mindspore`` failed later in the rank on a missing MindSpore attribute)."""
    import importlib

    module, name = MODULE_TYPES.get(framework, (None, None))
    if module is None:
        return
    wanted = getattr(importlib.import_module(module), name)
    if not isinstance(model, wanted):
        got = type(model)
        raise ConfigError(f"model._target_={cfg.model._target_} returned a {got.__module__}.{got.__qualname__} for "
                          f"framework={framework}, which needs a {module}.{name}: the factory is called with "
                          f"framework= and builds that framework's model (or lists the ones it supports in its "
                          f"'frameworks' attribute)")
