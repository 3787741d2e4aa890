"""The engine interface: how the distributed copy is parallelised, and what an engine checks.

Every engine, of any framework, is built as ``Engine(cfg, device=..., world_size=...)``
(the whole job config; this rank's device — a ``torch.device`` for torch, the device
name for MindSpore — and the number of ranks) and offers ``parallelize(model)`` and
``optimizer_step(optimizer, grads)``. Its own settings live in ``engine.options`` and
are checked against its :attr:`Engine.Options` dataclass by :meth:`Engine.check`, which
validation calls on the class actually loaded, so an engine plugged in with
``engine.impl.<framework>=my_pkg.MyEngine`` is checked too.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, ClassVar, ContextManager, Dict, Iterator, List, Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sweep.config.enums import as_str
from sweep.errors import ConfigError

DTYPE_NAMES = ("float32", "bfloat16", "float16")


def dtype_name(value: Any) -> Optional[str]:
    """``DType`` enum, its string or ``None`` -> ``"float32"``-style name or ``None``.

    Raises:
        ValueError: not one of :data:`DTYPE_NAMES`.
    """
    if value is None:
        return None
    name = as_str(value)
    if name not in DTYPE_NAMES:
        raise ValueError(f"unknown dtype {name!r}; allowed: {', '.join(DTYPE_NAMES)}")
    return name


def _reshard_int(cfg: Any) -> bool:
    value = cfg.get("reshard_after_forward", True)
    return isinstance(value, int) and not isinstance(value, bool)


# feature -> (whether the config sets it, the setting as text, which engines run it)
FEATURES: Dict[str, Any] = {
    "reshard_int": (_reshard_int, lambda cfg: f"reshard_after_forward={cfg.reshard_after_forward}",
                    "an int (reshard to a smaller group) is FSDP2's: engine=torch_fsdp2, or true/false"),
    "offload_policy": (lambda cfg: as_str(cfg.get("offload_policy", "none")) != "none",
                       lambda cfg: f"offload_policy={as_str(cfg.offload_policy)}",
                       "CPUOffloadPolicy is FSDP2's: engine=torch_fsdp2"),
    "meta_init": (lambda cfg: as_str((cfg.get("model") or {}).get("init", "eager")) == "meta",
                  lambda cfg: "model.init=meta",
                  "sharding on the meta device, then to_empty: engine=torch_fsdp2"),
}


class Engine:
    """Base of every engine. Subclasses set :attr:`framework` and implement
    :meth:`parallelize`; they may declare :class:`Options` and extend :meth:`check_config`."""

    framework: ClassVar[str] = ""
    # Config fields this engine never reads: a job that sets one gets a note saying it had
    # no effect (sweep.run.judge.effect_notes), so a sweep over it is not mistaken for evidence.
    unused_fields: ClassVar[tuple] = ()
    # Its distributed copy applies mp_policy as torch's fully_shard does, so the standalone
    # copy may run the same policy on one rank (baseline.precision=policy,
    # sweep.engines.torch_fsdp2.StandaloneFSDP2); other engines refuse that before launch.
    policy_baseline: ClassVar[bool] = False
    # Optional features of the config this engine runs (FEATURES); a job that sets one an
    # engine lacks is refused before launch with the reason (check_features).
    supports: ClassVar[frozenset] = frozenset()

    @dataclasses.dataclass
    class Options:
        """The engine's settings in ``engine.options`` (none by default)."""

    def __init__(self, cfg: Any, *, device: Any = None, world_size: int = 1) -> None:
        self.cfg = cfg
        self.device = device
        self.world_size = world_size
        self.options = self.options_of(cfg)
        self.notes: List[str] = []  # what it did besides the library's own behaviour (RankResult.engine_notes)
        self.ledger: List[Dict[str, Any]] = []  # collectives seen by a MindSpore engine's observe_reduce

    @classmethod
    def options_of(cls, cfg: Any) -> Any:
        """``engine.options`` merged into :class:`Options` (defaults filled in).

        Raises:
            ConfigError: an unknown option or a value of the wrong type.
        """
        given = cfg.engine.get("options") or {}
        try:
            return OmegaConf.merge(OmegaConf.structured(cls.Options), given)
        except OmegaConfBaseException as exc:
            allowed = ", ".join(f.name for f in dataclasses.fields(cls.Options)) or "none"
            reason = str(exc).splitlines()[0]
            raise ConfigError(f"engine.options of engine={cfg.engine.name} ({cls.__name__}): {reason}; "
                              f"its options: {allowed}{_other_engine(cls, str(cfg.engine.name))}") from None

    @classmethod
    def check(cls, cfg: Any) -> None:
        """Everything this engine requires of a job config, before launch: its options
        (:meth:`options_of`), then :meth:`check_config`, then :meth:`check_baseline`.

        Raises:
            ConfigError: one line naming the field and what is allowed.
        """
        cls.options_of(cfg)
        cls.check_features(cfg)
        cls.check_config(cfg)
        cls.check_baseline(cfg)

    @classmethod
    def check_features(cls, cfg: Any) -> None:
        """Each optional feature the config sets (:data:`FEATURES`) must be in
        :attr:`supports`.

        Raises:
            ConfigError: naming the setting, the engine and the engines that run it.
        """
        for feature, (is_set, setting, runs_on) in FEATURES.items():
            if is_set(cfg) and feature not in cls.supports:
                raise ConfigError(f"{setting(cfg)}: engine={cfg.engine.name} ({cls.__name__}) does not run it; "
                                  f"{runs_on}")

    @classmethod
    def check_baseline(cls, cfg: Any) -> None:
        """``baseline.precision=policy`` needs an engine that declares
        :attr:`policy_baseline`.

        Raises:
            ConfigError: it does not.
        """
        baseline = cfg.get("baseline") or {}
        if as_str(baseline.get("precision", "float32")) == "policy" and not cls.policy_baseline:
            raise ConfigError(
                f"baseline.precision=policy: engine={cfg.engine.name} ({cls.__name__}) does not declare that it applies "
                "mp_policy as torch's fully_shard does (Engine.policy_baseline), which the standalone copy then runs "
                "on one rank; use engine=torch_fsdp2 or baseline.precision=float32"
            )

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        """Engine-specific rules (e.g. a library that must be installed)."""

    def parallelize(self, model: Any) -> Any:
        """Return the distributed model (may wrap ``model`` or modify it in place)."""
        raise NotImplementedError

    def optimizer_step(self, optimizer: Any, grads: Any = None) -> None:
        """One optimizer step after the gradients are computed (and reduced)."""
        raise NotImplementedError

    def info(self) -> Dict[str, Any]:
        """What the rank result records about this engine (``RankResult.engine``, after
        ``parallelize``), all keys optional: ``versions`` ({package: version}, merged into
        the record's ``versions``), ``api`` (which library entry point ran, and with which
        arguments), ``summary`` (that in a few words, for the report's notes), ``notes``
        (workarounds and substitutions, one sentence each; the report shows the part
        before `` -- ``) and ``collectives_emulated``."""
        return {"notes": list(self.notes)} if self.notes else {}

    # Why this engine's collectives have no contract to check (``expected_collectives``
    # is None), for the record; None: it has one.
    collectives_unchecked: Optional[str] = "the engine declares no collective contract"

    def expected_collectives(self) -> Optional[Dict[str, Any]]:
        """What the config implies for this engine's collectives, checked against the
        ledger by ``sweep.analysis.collectives.ledger_notes``: ``{"mesh_shape",
        "mesh_dim_names", "reduce_scatter" / "all_reduce" / "all_gather": {"dim", "size",
        "dtypes", "why", optional "groups": the group names a call may use, "sizes"} or
        None, "divide": the data-parallel degree, "units", "grad_accum_steps"}``; ``None``:
        no contract (:attr:`collectives_unchecked` says why)."""
        return None


def expected_for(engine: Engine, cfg: Any = None) -> Optional[Dict[str, Any]]:
    """``engine.expected_collectives()`` read against the job's config ``cfg`` (where given),
    not whatever the engine holds as ``self.cfg`` by then: an engine that swaps in a config of
    its own (a reduce dtype it sets itself) is held to what the job asked for."""
    if cfg is None or engine.cfg is cfg:
        return engine.expected_collectives()
    own, engine.cfg = engine.cfg, cfg
    try:
        return engine.expected_collectives()
    finally:
        engine.cfg = own


class TorchEngine(Engine):
    """Parallelises a ``torch.nn.Module`` on an initialised process group; ``device`` is
    this rank's ``torch.device``. Besides :meth:`parallelize`, it owns the parts of the
    training step (``sweep.train.torch_step``) that depend on how the model is
    distributed: gradient sync during accumulation, the global gradient norm, the
    gradient scaler, and the optimizer step."""

    framework = "torch"

    def no_sync(self, model: Any) -> ContextManager[None]:
        """Gradient sync off while entered: the inner micro-steps of gradient accumulation.

        FSDP2 (and hyper-parallel's ``fully_shard``): ``set_requires_gradient_sync(False)``,
        restored on exit; DDP: ``model.no_sync()``; a plain module (the standalone copy)
        has nothing to sync."""
        if hasattr(model, "set_requires_gradient_sync"):
            return _gradient_sync_off(model)
        if hasattr(model, "no_sync"):
            return model.no_sync()
        return contextlib.nullcontext()

    def clip_grad_norm(self, model: Any, max_norm: float) -> float:
        """Scale the gradients so that their global 2-norm is at most ``max_norm``; return
        the norm before clipping. Over sharded gradients (DTensor) the norm is that of the
        full tensors: ``torch.nn.utils.get_total_norm`` then ``DTensor.full_tensor()``,
        then ``clip_grads_with_norm_``, as the PyTorch docs of ``clip_grad_norm_`` and
        torchtitan's ``dist_utils.clip_grad_norm_`` do for FSDP2."""
        import torch

        params = [p for p in model.parameters() if p.grad is not None]
        total = torch.nn.utils.get_total_norm([p.grad for p in params], norm_type=2.0)
        if hasattr(total, "full_tensor"):
            total = total.full_tensor()
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
        return float(total)

    def grad_scaler(self, scaler_cfg: Any) -> Any:
        """``torch.amp.GradScaler`` for this device with ``train.grad_scaler``'s arguments
        (a plain or DDP model: every rank sees the full gradients, so they agree on infs)."""
        import torch

        return torch.amp.GradScaler(self.device.type, **_scaler_kwargs(scaler_cfg))

    def collectives(self) -> Any:
        """A ledger of the collectives this copy issues while it is entered
        (``sweep.engines.collectives.Ledger``)."""
        from sweep.engines.collectives import Ledger

        return Ledger()

    def grad_capture(self, model: Any) -> Any:
        """A context that keeps each parameter's local gradient, before this engine's
        reduction, in its ``grads`` (``sweep.engines.collectives.LocalGrads``: hooks on the
        parameters, which a plain module and DDP differentiate), or ``None`` where the copy
        reduces nothing (the standalone copy: its gradients as the optimizer reads them are
        its local ones)."""
        from sweep.engines.collectives import LocalGrads

        return LocalGrads(model)

    def carried_params(self, model: Any) -> Optional[List[str]]:
        """The parameters whose gradients this engine's reduction carries (``named_parameters``
        names), where the engine keeps a list of them outside the calls the ledger sees (DDP's
        reducer); ``None``: the ledger's calls say (or nothing does)."""
        return None

    def optimizer_step(self, optimizer: Any, grads: Any = None, *, scaler: Any = None) -> None:
        """``optimizer.step()`` after ``loss.backward()`` (``grads`` is unused), or
        ``scaler.step(optimizer)`` (skipped on inf/NaN gradients) with a gradient scaler."""
        if scaler is not None:
            scaler.step(optimizer)
        else:
            optimizer.step()


class _Standalone:
    """The standalone copy's engine takes none of the job engine's ``engine.options``."""

    @classmethod
    def options_of(cls, cfg: Any) -> Any:
        return OmegaConf.structured(Engine.Options)


class StandaloneTorch(_Standalone, TorchEngine):
    """The standalone copy's engine: one process, no parallelism. It runs the same
    training step as the distributed copy; only the engine differs. (With
    ``baseline.precision=policy`` its subclass ``sweep.engines.torch_fsdp2.StandaloneFSDP2``
    runs the job's policy on one rank instead.)"""

    def parallelize(self, model: Any) -> Any:
        return model

    def grad_capture(self, model: Any) -> Any:
        """``None``: one copy on one rank reduces nothing."""
        return None


@contextlib.contextmanager
def _gradient_sync_off(model: Any) -> Iterator[None]:
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def _scaler_kwargs(scaler_cfg: Any) -> Dict[str, Any]:
    return {k: scaler_cfg[k] for k in ("init_scale", "growth_factor", "backoff_factor", "growth_interval")}


class MindSporeEngine(Engine):
    """Parallelises a ``mindspore.nn.Cell`` after ``mindspore.communication.init()``.
    Gradients are functional (``value_and_grad``): :meth:`reduce_grads` gives the ones the
    optimizer applies (reduced over the ranks where the engine reduces them itself),
    :meth:`clip_grad_norm` clips them, :meth:`optimizer_step` applies them."""

    framework = "mindspore"

    def reduce_grads(self, optimizer: Any, grads: Any) -> Any:
        """The gradients after this engine's reduction (none here: a sharding engine
        reduces them in its backward hooks)."""
        return grads

    # The collectives observe_reduce saw (sweep.engines.collectives' entry shape), and why
    # an engine has none to show (RankResult.collectives).
    collectives_unchecked: Optional[str] = ("the MindSpore step's collectives are recorded where the engine sees "
                                            "them, not checked against a contract")

    def observe_reduce(self, observed: Dict[str, str]) -> ContextManager[None]:
        """A context that, while a step's gradients are computed and reduced, records in
        ``observed["reduce"]`` the dtype the gradient reduction ran in (as torch's
        a torch engine's ``collectives()`` ledger). Nothing here: one process reduces nothing."""
        return contextlib.nullcontext()

    def grad_capture(self, net: Any) -> Any:
        """A context that keeps each parameter's local gradient before a reduction this
        engine makes *inside* the backward (hyper-parallel's hooks), in its ``grads`` (name ->
        float32 ndarray); ``None`` where the step's own gradients before ``reduce_grads``
        (``Step.local_grads``) are the local ones (data parallel, the standalone copy)."""
        return None

    def held_grads(self, net: Any) -> Optional[Dict[str, float]]:
        """The norm of each gradient buffer this engine keeps across steps (one that a
        skipped ``zero_grad`` would let accumulate), by parameter name; ``None`` where the
        engine keeps none (``value_and_grad`` returns fresh gradients every step)."""
        return None

    def clip_grad_norm(self, grads: Any, max_norm: float) -> Any:
        """``mindspore.ops.clip_by_global_norm(grads, max_norm)``: every gradient is
        the full tensor here (one process, or after the data-parallel all-reduce)."""
        from mindspore import ops

        return ops.clip_by_global_norm(grads, max_norm)

    def optimizer_step(self, optimizer: Any, grads: Any = None) -> None:
        """Apply ``grads`` (a tuple from ``mindspore.value_and_grad``) with ``optimizer(grads)``."""
        optimizer(grads)


class StandaloneMindSpore(_Standalone, MindSporeEngine):
    """The standalone copy's engine (see :class:`StandaloneTorch`)."""

    def parallelize(self, net: Any) -> Any:
        return net


def _other_engine(cls: type, name: str) -> str:
    """Where ``cls`` (an ``engine.impl`` class refused ``engine=name``'s options) is another preset's
    engine or a subclass of one (``sweep/config/conf/engine/*.yaml``'s ``impl``): that preset, said so
    (a fault planted in a subclass of ``data_parallel``'s class run as ``engine=hyper_parallel``);
    else ``""``."""
    from pathlib import Path

    conf = Path(__file__).resolve().parent.parent / "config" / "conf" / "engine"
    presets = {}
    for path in sorted(conf.glob("*.yaml")):
        for target in (OmegaConf.load(path).get("impl") or {}).values():
            presets.setdefault(str(target), path.stem)
    for base in cls.__mro__:
        preset = presets.get(f"{base.__module__}.{base.__qualname__}")
        if preset is not None and preset != name:
            what = "is" if base is cls else f"subclasses {base.__qualname__},"
            return (f" ({cls.__name__} {what} the engine of engine={preset}, not of engine={name}: run it with "
                    f"engine={preset}, or subclass engine={name}'s class)")
    return ""
