"""hyper-parallel's sharding on either platform (torch or MindSpore).

hyper-parallel is not on PyPI; it is imported only here, lazily, after
``HYPER_PARALLEL_PLATFORM`` is set (it picks its platform at first import).
The engines' ``check_config`` (:func:`check_release`) runs before launch (from
``sweep.run.checks``) and reads the
installed release without importing it.

API generations (checked against commit fdd0a80 of its public repository):

* torch: early-2026 releases export ``fully_shard`` from ``hyper_parallel.core.fully_shard``
  (defined in its ``api`` module) and ``MixedPrecisionPolicy`` from
  ``hyper_parallel.platform.torch.fully_shard.utils``; later ones export ``fully_shard`` at
  the top level and ``MixedPrecisionPolicy`` from ``hyper_parallel.core.fully_shard.utils``.
* MindSpore: early-2026 releases (fdd0a80) have no working MindSpore ``fully_shard``:
  there is no ``hyper_parallel.platform.mindspore.fully_shard``, and the core one imports
  torch and calls an older MindSpore scheduler signature (TypeError). Their entry
  point is ``hsdp(cell, shard_size, threshold, optimizer_level, ...)`` (ZeRO levels). Later
  releases have ``fully_shard`` (with ``MixedPrecisionPolicy``): the report's API. The
  config is mapped onto ``hsdp`` (:func:`hsdp_arguments`), and values it cannot express
  are rejected before launch.

The entry point is chosen by where ``fully_shard`` is, not by text: the first of
:data:`FULLY_SHARD_ENTRY_POINTS` that binds it, and on MindSpore only if the platform
implements it; else ``hsdp``. :func:`locate_fully_shard` (and :func:`mindspore_api`) find
it in the installed source without importing it, for the checks before launch;
:func:`resolve_fully_shard` imports it in the rank. The record names the one that ran
(``engine.api.name`` and ``engine.api.entry_point``).

On CPU, MindSpore has no reduce-scatter or all-gather-into-tensor kernels: they are
computed from all-reduce at hyper-parallel's platform layer (``_hp_mindspore_cpu``) and
the rank result says so (``engine.collectives_emulated``). On torch with gloo, one
library fault is worked around narrowly (``_hp_torch``), named in ``engine.notes``.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import subprocess
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Dict, Iterator, List, Optional, Tuple

from sweep.config.enums import as_str
from sweep.engines.base import MindSporeEngine, TorchEngine, dtype_name
from sweep.errors import ConfigError

INSTALL_HINT = (
    "pip install --no-deps -e <checkout of mindspore-ai/hyper-parallel> (needs numpy<2, pyyaml)"
)
MISSING_MESSAGE = (
    "engine=hyper_parallel needs hyper-parallel, which is not installed and not on PyPI: " + INSTALL_HINT
)
ADAM_OPS = ("lerp_",)  # the op torch.optim.Adam/AdamW's step dispatches first on a DTensor (fdd0a80: no layout infer)


def package_dir() -> Optional[Path]:
    """Directory of the installed ``hyper_parallel`` package, without importing it; ``None`` if absent."""
    spec = importlib.util.find_spec("hyper_parallel")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


COMMIT_FILE = "COMMIT"  # at the root of an exported source tree: the commit it was exported from
COMMIT_ENV = "HYPER_PARALLEL_COMMIT"


def installed_version() -> Dict[str, Any]:
    """``{"hyper_parallel": version, "hyper_parallel_commit": sha or None,
    "hyper_parallel_commit_from": where it was read, "hyper_parallel_source": dir}`` of the
    installed release (``{}`` if not installed). The commit is read, first found:

    * ``git``: the git checkout the package lives in (an editable install of a clone);
    * ``direct_url``: pip's record of a VCS install (PEP 610 ``direct_url.json``,
      ``vcs_info.commit_id``: ``pip install git+https://...@<sha>``);
    * ``COMMIT file``: a file :data:`COMMIT_FILE` at the source tree's root, holding the sha
      (an export: ``git archive <sha> | tar -x -C DIR && echo <sha> > DIR/COMMIT``; the
      archive itself keeps the sha only in its tar header, ``git get-tar-commit-id``);
    * ``env``: the environment variable :data:`COMMIT_ENV`.

    ``None`` (and ``hyper_parallel_commit_from`` ``None``) when none has it."""
    from importlib.metadata import PackageNotFoundError, distribution

    pkg = package_dir()
    if pkg is None:
        return {}
    out: Dict[str, Any] = {"hyper_parallel": None, "hyper_parallel_commit": None, "hyper_parallel_commit_from": None,
                           "hyper_parallel_source": str(pkg.parent)}
    dist = None
    for dist_name in ("hyper_parallel", "hyper-parallel"):
        try:
            dist = distribution(dist_name)
            out["hyper_parallel"] = dist.version
            break
        except PackageNotFoundError:
            continue
    for source, read in (("git", lambda: _git_commit(pkg)), ("direct_url", lambda: _direct_url_commit(dist)),
                         ("COMMIT file", lambda: _file_commit(pkg.parent / COMMIT_FILE)),
                         ("env", lambda: os.environ.get(COMMIT_ENV, "").strip() or None)):
        commit = read()
        if commit:
            out.update(hyper_parallel_commit=commit, hyper_parallel_commit_from=source)
            break
    return out


def _git_commit(pkg: Path) -> Optional[str]:
    try:
        top = subprocess.run(["git", "-C", str(pkg), "rev-parse", "--show-toplevel", "HEAD"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = top.stdout.split()
    if top.returncode == 0 and len(lines) == 2 and Path(lines[0]).resolve() == pkg.parent.resolve():
        return lines[1]
    return None


def _direct_url_commit(dist: Any) -> Optional[str]:
    import json

    try:
        text = dist.read_text("direct_url.json") if dist is not None else None
        return (json.loads(text).get("vcs_info") or {}).get("commit_id") if text else None
    except (ValueError, AttributeError):
        return None


def _file_commit(path: Path) -> Optional[str]:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    sha = text.split()[0] if text else ""
    return sha if len(sha) >= 7 and all(c in "0123456789abcdef" for c in sha.lower()) else None


def describe_version(info: Optional[Dict[str, Any]] = None) -> str:
    """``hyper-parallel 0.1.0 (commit fdd0a80)`` or ``hyper-parallel 0.1.0 (<dir>, not a git checkout)``."""
    info = installed_version() if info is None else info
    where = (f"commit {info['hyper_parallel_commit'][:7]}" if info.get("hyper_parallel_commit")
             else f"{info.get('hyper_parallel_source')}, commit unknown: not a git checkout, no {COMMIT_FILE} file")
    return f"hyper-parallel {info.get('hyper_parallel')} ({where})"


FULLY_SHARD_ENTRY_POINTS = (
    "hyper_parallel.fully_shard",  # later releases: exported at the top level
    "hyper_parallel.core.fully_shard.api.fully_shard",  # releases whose top level exports none
    "hyper_parallel.core.fully_shard.fully_shard",  # the package exporting it
)
HSDP_ENTRY_POINT = "hyper_parallel.hsdp"
PLATFORM_FULLY_SHARD = {"mindspore": "hyper_parallel.platform.mindspore.fully_shard"}
_FOLLOW_DEPTH = 8


def _find_module(name: str) -> Optional[importlib.machinery.ModuleSpec]:
    """The spec of ``hyper_parallel`` or one of its submodules, looked up on disk from
    :func:`package_dir` one component at a time (``PathFinder`` on the parent's search
    locations), so that no package on the way is imported; ``None`` if there is none."""
    parts = name.split(".")
    pkg = package_dir()
    if pkg is None or parts[0] != "hyper_parallel":
        return None
    spec = importlib.machinery.PathFinder.find_spec("hyper_parallel", [str(pkg.parent)])
    for i in range(1, len(parts)):
        if spec is None or not spec.submodule_search_locations:
            return None
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), list(spec.submodule_search_locations))
    return spec


def _module_body(spec: importlib.machinery.ModuleSpec) -> Optional[List[ast.stmt]]:
    """The top-level statements of a module's source (``[]`` for a namespace package);
    ``None`` where there is no source to read (an extension module, bytecode only)."""
    if spec.origin is None or spec.origin == "namespace":
        return []
    if not spec.origin.endswith(".py"):
        return None
    try:
        return ast.parse(Path(spec.origin).read_bytes(), filename=spec.origin).body
    except (OSError, SyntaxError, ValueError):
        return None


def _bindings(body: List[ast.stmt], name: str) -> Iterator[ast.stmt]:
    """The module-level statements of ``body`` that bind ``name`` (or star-import), in
    source order, looking into ``if``/``try``/``with`` blocks but not ``if TYPE_CHECKING``."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            yield node
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            yield node
        elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name) \
                and node.target.id == name:
            yield node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name or a.name == "*" for a in node.names):
                yield node
        elif isinstance(node, ast.If):
            if not ast.unparse(node.test).endswith("TYPE_CHECKING"):
                yield from _bindings(node.body, name)
            yield from _bindings(node.orelse, name)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                yield from _bindings(block, name)
        elif isinstance(node, ast.With):
            yield from _bindings(node.body, name)


def _binds_function(module: str, name: str, depth: int = 0) -> Tuple[bool, str]:
    """Whether ``module``'s source binds ``name`` to something that is not a module (a
    ``def``, a class, an assignment, or an import of one, followed into hyper-parallel's own
    modules), read without importing anything; ``(False, why not)`` otherwise."""
    spec = _find_module(module)
    if spec is None:
        return False, f"no module {module}"
    body = _module_body(spec)
    if body is None:
        return False, f"{module} has no source to read ({spec.origin})"
    is_package = bool(spec.submodule_search_locations)
    verdict: Optional[Tuple[bool, str]] = None
    for node in _bindings(body, name):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            verdict = True, f"{module} defines {name}"
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            constant = isinstance(node.value, ast.Constant)
            verdict = (not constant), f"{module} assigns {name}" + (" a constant" if constant else "")
        elif isinstance(node, ast.Import):
            verdict = False, f"{module}.{name} is an imported module, not the function"
        else:  # ImportFrom
            base = module.split(".") if is_package else module.split(".")[:-1]
            if node.level > 1:
                base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else [])) if node.level else (node.module or "")
            for alias in node.names:
                if alias.name == "*":
                    if depth < _FOLLOW_DEPTH and source.split(".")[0] == "hyper_parallel":
                        found, why = _binds_function(source, name, depth + 1)
                        if found:
                            verdict = True, f"{module} star-imports it from {source} ({why})"
                    continue
                if (alias.asname or alias.name) != name:
                    continue
                if source.split(".")[0] != "hyper_parallel":
                    verdict = True, f"{module} imports {name} from {source}"
                elif depth >= _FOLLOW_DEPTH:
                    verdict = False, f"{module} imports {name} through more than {_FOLLOW_DEPTH} modules"
                else:
                    found, why = _binds_function(source, alias.name, depth + 1)
                    verdict = found, f"{module} imports {alias.name} from {source}" + ("" if found else f" ({why})")
    if verdict is not None:
        return verdict
    if is_package and _find_module(f"{module}.{name}") is not None:
        return False, f"{module}.{name} is a module, not the function"
    return False, f"{module} defines or imports no {name}"


def locate_fully_shard(platform: str) -> Tuple[Optional[str], str]:
    """Where the installed hyper-parallel's ``fully_shard`` for ``platform`` lives, found
    without importing hyper-parallel: ``(dotted path, "")`` or ``(None, why not)``.

    The candidates (:data:`FULLY_SHARD_ENTRY_POINTS`) are tried in order; each module is
    found on disk (``importlib.machinery.PathFinder``, one package at a time, none of them
    imported) and its source parsed (``ast``) for a ``def fully_shard``, an assignment, or an
    import of one, followed through hyper-parallel's own modules; a sub-package named
    ``fully_shard`` is not the function. On MindSpore the platform's implementation
    (:data:`PLATFORM_FULLY_SHARD`) must also exist: releases whose ``fully_shard`` is torch
    only have none. Parsing instead of importing keeps the job process (which checks configs
    before launch) free of MindSpore and of ``HYPER_PARALLEL_PLATFORM``, which hyper-parallel
    fixes at its first import; :func:`resolve_fully_shard` imports, in the rank process."""
    own = PLATFORM_FULLY_SHARD.get(platform)
    if own is not None and _find_module(own) is None:
        return None, f"no module {own}: this release has no {platform} fully_shard"
    why = []
    for path in FULLY_SHARD_ENTRY_POINTS:
        module, name = path.rsplit(".", 1)
        found, reason = _binds_function(module, name)
        if found:
            return path, ""
        why.append(f"{path}: {reason}")
    return None, "; ".join(why)


def resolve_fully_shard(platform: str) -> Tuple[Optional[Any], Optional[str], str]:
    """``(fully_shard, dotted path, "")`` imported from the first of
    :data:`FULLY_SHARD_ENTRY_POINTS` that holds a callable (a module of that name is not
    it), or ``(None, None, why not)``. On MindSpore the platform's implementation
    (:data:`PLATFORM_FULLY_SHARD`) must be importable first (``importlib.util.find_spec``),
    so that no torch-only ``fully_shard`` module is imported there. This imports
    hyper-parallel: call it in the rank process, after ``HYPER_PARALLEL_PLATFORM`` is set
    (:func:`import_api`)."""
    own = PLATFORM_FULLY_SHARD.get(platform)
    if own is not None:
        try:
            spec = importlib.util.find_spec(own)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            return None, None, f"no module {own}: this release has no {platform} fully_shard"
    why = []
    for path in FULLY_SHARD_ENTRY_POINTS:
        module, name = path.rsplit(".", 1)
        try:
            obj = getattr(importlib.import_module(module), name, None)
        except Exception as exc:  # noqa: BLE001 -- any failure to import is a reason to try the next
            why.append(f"{path}: import {module} failed ({type(exc).__name__}: {exc})")
            continue
        if obj is None:
            why.append(f"{path}: {module} has no {name}")
        elif isinstance(obj, ModuleType):
            why.append(f"{path}: a module, not the function")
        elif not callable(obj):
            why.append(f"{path}: not callable ({type(obj).__name__})")
        else:
            return obj, path, ""
    return None, None, "; ".join(why)


def mindspore_api() -> Optional[str]:
    """Which MindSpore sharding API the installed hyper-parallel offers: ``"fully_shard"``
    where :func:`locate_fully_shard` finds one for MindSpore (a candidate entry point and
    ``hyper_parallel.platform.mindspore.fully_shard``), else ``"hsdp"`` (early-2026
    releases); ``None`` if hyper-parallel is not installed. Read from the installed source
    without importing it (no MindSpore in the job process; see :func:`locate_fully_shard`)."""
    if package_dir() is None:
        return None
    path, _ = locate_fully_shard("mindspore")
    return "fully_shard" if path else "hsdp"


def hsdp_arguments(cfg: Any, world: int) -> Dict[str, Any]:
    """The config mapped onto ``hsdp(cell, **arguments)`` (early-2026 MindSpore API):

    * ``shard_size``: ``mesh.mesh_shape[-1]`` (1-D mesh: all ranks; ``hsdp2x2``: shard
      within 2 consecutive ranks, replicate across the 2 groups, as FSDP2's HSDP does);
    * ``optimizer_level``: ``level3`` (parameters resharded after forward and gathered
      again for backward) for ``reshard_after_forward=true``, ``level2`` (parameters
      kept gathered from forward to backward; gradients and optimizer state sharded)
      for ``false``;
    * ``threshold=0``: shard every parameter (its default, 64 KB, would shard none of the
      seed MLP's: the largest is 8 KB);
    * ``grad_scale=1/world``: hsdp sums gradients over all ranks; FSDP and the
      standalone baseline average (``1/world`` is exact for 2 and 4);
    * ``reduce_dtype``: ``mp_policy.reduce_dtype`` (a dtype name, mapped by the caller);
    * ``enable_grad_accumulation=False``, ``comm_async=False``, ``comm_fusion=False``,
      ``use_eager_hook=True`` (PyNative).

    Raises:
        ValueError: the mesh has more than 2 dims, or its last dim does not divide ``world``.
    """
    shape = [int(n) for n in cfg.mesh.mesh_shape]
    if len(shape) > 2:
        raise ValueError(f"mesh.mesh_shape={shape}: hsdp expresses 1-D (shard) and 2-D (replicate x shard) meshes only")
    shard = shape[-1]
    if world % shard:
        raise ValueError(f"mesh.mesh_shape={shape}: shard size {shard} does not divide world_size={world}")
    return dict(
        shard_size=shard,
        threshold=0,
        optimizer_level="level3" if cfg.reshard_after_forward else "level2",
        enable_grad_accumulation=False,
        use_eager_hook=True,
        grad_scale=1.0 / world,
        reduce_dtype=dtype_name(cfg.mp_policy.reduce_dtype),
        comm_async=False,
        comm_fusion=False,
    )


def _hp_missing_lerp() -> List[str]:
    """:data:`ADAM_OPS` the installed release has no layout infer for (see ``_hp_torch``)."""
    from sweep.engines._hp_torch import missing_layout_infer_ops

    return missing_layout_infer_ops(list(ADAM_OPS))


@dataclasses.dataclass
class HyperParallelOptions:
    """``engine.options`` of the hyper_parallel engines."""

    # Run the optimizer step inside SkipDTensorDispatch(), as hyper-parallel's own tests do
    # on both platforms. false (the report's reproducer) makes torch Adam fail on releases
    # without a layout infer for lerp_ (fdd0a80): rejected before launch there.
    skip_dtensor_dispatch: bool = True


def check_release(cfg: Any, framework: str, world: int) -> None:
    """Reject, before launch, what the installed hyper-parallel cannot run or express.

    Raises:
        sweep.config.schema.ConfigError: hyper-parallel missing (says how to install it); torch
            with Adam/AdamW and ``engine.options.skip_dtensor_dispatch=false`` on a release with no
            layout infer for ``lerp_``; MindSpore ``hsdp`` API with ``mp_policy.param_dtype``
            or ``output_dtype`` set, or a mesh it cannot express.
    """
    from sweep.errors import ConfigError

    pkg = package_dir()
    if pkg is None:
        raise ConfigError(MISSING_MESSAGE)
    if framework == "torch":
        optimizer = as_str(cfg.optimizer.name)
        skip = (cfg.engine.get("options") or {}).get("skip_dtensor_dispatch", HyperParallelOptions.skip_dtensor_dispatch)
        if optimizer in ("adam", "adamw") and not skip:
            missing = _hp_missing_lerp()
            if missing:
                raise ConfigError(
                    f"engine.options.skip_dtensor_dispatch=false with optimizer={optimizer}: {describe_version()} has no "
                    f"parallel layout-infer function for {', '.join(missing)} (the step fails with 'Operator "
                    f"{missing[0]} dose not contain parallel layout infer func.'); use engine.options.skip_dtensor_dispatch=true "
                    "(as hyper-parallel's own tests do) or optimizer=sgd"
                )
        return
    if mindspore_api() == "hsdp":
        policy = cfg.mp_policy
        for key in ("param_dtype", "output_dtype"):
            if policy[key] is not None:
                raise ConfigError(
                    f"mp_policy.{key}={dtype_name(policy[key])}: {describe_version()} offers MindSpore sharding only "
                    "through hsdp(), which has no parameter or output dtype (only reduce_dtype); "
                    "use mp_policy=fp32 or cast_forward_inputs"
                )
        try:
            hsdp_arguments(cfg, world)
        except ValueError as exc:
            raise ConfigError(f"{exc} ({describe_version()}, hsdp API)") from None


def import_api(platform: str) -> SimpleNamespace:
    """Import hyper-parallel for ``platform`` ("mindspore" or "torch").

    Returns a namespace with ``init_device_mesh``, ``fully_shard`` (``None`` where the
    platform's entry point is ``hsdp``), ``entry_point`` (the dotted path of the one that
    runs: :func:`resolve_fully_shard`'s, or ``hyper_parallel.hsdp``), ``fully_shard_why_not``
    (why MindSpore falls back to ``hsdp``; ``""`` otherwise), ``hsdp``,
    ``MixedPrecisionPolicy`` (``None`` with ``hsdp``) and ``SkipDTensorDispatch`` (``None``
    if absent). On MindSpore the choice is :func:`mindspore_api`'s, the one the config was
    checked against before launch; ``fully_shard`` is then imported by :func:`resolve_fully_shard`.

    Raises:
        ImportError: hyper-parallel is missing (message says what to install), it was
            already imported for another platform, or the ``fully_shard`` chosen cannot be
            imported (message lists each candidate and why).
    """
    current = os.environ.setdefault("HYPER_PARALLEL_PLATFORM", platform)
    if current != platform:
        raise ImportError(f"HYPER_PARALLEL_PLATFORM={current} but the job runs framework={platform}")
    try:
        import hyper_parallel
    except ImportError as exc:
        raise ImportError(MISSING_MESSAGE) from exc
    fully_shard = policy = None
    entry_point, why_not = HSDP_ENTRY_POINT, ""
    if platform == "mindspore":
        _, why_not = locate_fully_shard(platform)
    if platform == "torch" or not why_not:
        fully_shard, entry_point, why = resolve_fully_shard(platform)
        if fully_shard is None:
            raise ImportError(f"hyper-parallel's fully_shard for {platform} cannot be imported: {why}")
        for module in ("hyper_parallel.core.fully_shard.utils", f"hyper_parallel.platform.{platform}.fully_shard.utils",
                       "hyper_parallel.platform.torch.fully_shard.utils"):
            try:
                policy = importlib.import_module(module).MixedPrecisionPolicy
                break
            except (ImportError, AttributeError):
                continue
        else:
            raise ImportError(f"hyper-parallel has fully_shard ({entry_point}) but no MixedPrecisionPolicy")
    return SimpleNamespace(
        init_device_mesh=hyper_parallel.init_device_mesh,
        fully_shard=fully_shard,
        entry_point=entry_point,
        fully_shard_why_not=why_not,
        hsdp=getattr(hyper_parallel, "hsdp", None),
        MixedPrecisionPolicy=policy,
        SkipDTensorDispatch=getattr(hyper_parallel, "SkipDTensorDispatch", None),
    )


def _fully_shard(api: SimpleNamespace, model: Any, cfg: Any, mp_policy: Any, mesh: Any, **extra: Any) -> Any:
    kwargs = dict(mesh=mesh, reshard_after_forward=bool(cfg.reshard_after_forward), mp_policy=mp_policy)
    params = inspect.signature(api.fully_shard).parameters
    kwargs.update({k: v for k, v in extra.items() if k in params})
    out = api.fully_shard(model, **kwargs)
    return model if out is None else out


def _group_ranks(group: Any) -> List[int]:
    """The ranks of a hyper-parallel MindSpore group from its name: ``_create_group``'s
    ``"<size>-<rank>-<rank>-..."``, or the ranks its sharding appends to a name
    (``"hsdp_sharded_dp_group_0_1"``); ``[]`` for another name."""
    name = str(getattr(group, "group_name", group) or "")
    parts = name.split("-")
    if len(parts) > 1 and all(p.isdigit() for p in parts) and int(parts[0]) == len(parts) - 1:
        return [int(p) for p in parts[1:]]
    tail: List[int] = []
    for token in reversed(name.split("_")):
        if not token.isdigit():
            break
        tail.insert(0, int(token))
    return tail if tail and len(tail) < len(name.split("_")) else []


def _skip_dispatch(engine: Any) -> contextlib.AbstractContextManager:
    """``SkipDTensorDispatch()`` when ``engine.options.skip_dtensor_dispatch`` is true, else a no-op.

    Raises:
        ImportError: asked for, but the installed hyper-parallel has no ``SkipDTensorDispatch``.
    """
    if not engine.options.skip_dtensor_dispatch:
        return contextlib.nullcontext()
    if engine.api.SkipDTensorDispatch is None:
        raise ImportError("engine.options.skip_dtensor_dispatch=true but this hyper-parallel has no SkipDTensorDispatch")
    return engine.api.SkipDTensorDispatch()


class _HyperParallel:
    """What both platforms' engines share: their options, their pre-launch check of the
    installed release (:func:`check_release`), and the record they keep (``info()``)."""

    Options = HyperParallelOptions
    framework: str
    notes: List[str]

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        from sweep.config.schema import world_size

        check_release(cfg, cls.framework, world_size(cfg))

    def __init__(self, cfg: Any, **kwargs: Any) -> None:
        super().__init__(cfg, **kwargs)  # type: ignore[call-arg]
        # the entry point this engine is configured for: fully_shard (the report's); what ran is api.name
        self._info: Dict[str, Any] = {"versions": installed_version(), "notes": self.notes,
                                      "api_configured": "fully_shard"}


class MindSporeHyperParallel(_HyperParallel, MindSporeEngine):
    """hyper-parallel's MindSpore sharding: ``hsdp`` (early-2026 releases) or
    ``fully_shard`` (later releases, the report's), whichever is installed. On CPU its
    all-gather and reduce-scatter are emulated from all-reduce (module docstring)."""

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        """Also refuses the parts of the ``train`` step and of the wrapping this engine does
        not run on MindSpore: it shards the whole net in one call (no per-layer units or
        per-module policies), its gradients are reduced inside the backward and returned as
        local shards (no accumulation with sync off, no global-norm clipping here).

        Raises:
            ConfigError: ``wrap=per_layer``, ``mp_policy.overrides``, ``train.grad_accum_steps``
                > 1 or ``train.clip_grad_norm``.
        """
        super().check_config(cfg)
        why = "engine=hyper_parallel on framework=mindspore"
        if as_str(cfg.wrap) != "root" or cfg.mp_policy.get("overrides"):
            raise ConfigError(f"{why} shards the whole net in one call (hsdp/fully_shard on the root cell): "
                              "wrap=per_layer and mp_policy.overrides are not wired for it; use framework=torch")
        if cfg.train.grad_accum_steps > 1:
            raise ConfigError(f"{why}: train.grad_accum_steps={cfg.train.grad_accum_steps} needs sync off on the "
                              "inner micro-steps; its set_requires_grad_sync accumulates in its own buffers, which "
                              "sweep's functional MindSpore step does not drive yet; use framework=torch")
        if cfg.train.clip_grad_norm is not None:
            raise ConfigError(f"{why}: train.clip_grad_norm needs the norm over all ranks' gradient shards, which "
                              "sweep's MindSpore step does not compute yet; use framework=torch")

    def __init__(self, cfg: Any, **kwargs: Any) -> None:
        super().__init__(cfg, **kwargs)
        self._calls: Optional[Dict[str, int]] = None
        self._calls_before: Dict[str, int] = {}
        self._carrying: Optional[List[str]] = None  # the parameter whose gradient hook runs
        self._local: Optional[Dict[str, Any]] = None  # its local gradient, kept while grad_capture is entered
        self._net: Any = None

    @contextlib.contextmanager
    def _watched_hooks(self) -> Iterator[None]:
        """While entered (around the ``hsdp``/``fully_shard`` call that builds them), every
        gradient hook hyper-parallel builds (``HSDPGradHook.get_hook``, one per parameter) is
        wrapped: while it runs, :attr:`_carrying` names its parameter (the ledger's calls made
        inside carry it), and, while :meth:`grad_capture` is entered, its input (the local
        gradient, before the cast, the reduction and ``grad_scale``) is kept. The hook's
        values go through unchanged."""
        import numpy as np

        classes = []
        for module in ("hyper_parallel.core.hsdp.hsdp_grad_hook", "hyper_parallel.core.fully_shard.hsdp_grad_hook"):
            try:
                cls = getattr(importlib.import_module(module), "HSDPGradHook")
            except (ImportError, AttributeError):
                continue
            classes.append((cls, cls.__dict__.get("get_hook")))
        engine = self

        def patched(original: Any) -> Any:
            def get_hook(hook_self: Any, hsdp_param: Any) -> Any:
                hook = original(hook_self, hsdp_param)
                name = str(getattr(getattr(hsdp_param, "param", None), "name", "?"))

                def watched(grad: Any) -> Any:
                    if engine._local is not None:
                        engine._local[name] = np.array(grad.asnumpy(), np.float32)
                    outer, engine._carrying = engine._carrying, [name]
                    try:
                        return hook(grad)
                    finally:
                        engine._carrying = outer

                return watched

            return get_hook

        for cls, original in classes:
            if original is not None:
                cls.get_hook = patched(original)
        try:
            yield
        finally:
            for cls, original in classes:
                if original is not None:
                    cls.get_hook = original

    def grad_capture(self, net: Any) -> Any:
        """A context keeping each parameter's local gradient as hyper-parallel's hook receives
        it (before its reduction), ``grads``: name -> float32 ndarray (:meth:`_watched_hooks`)."""
        engine = self

        class Capture:
            grads: Dict[str, Any] = {}

            def __enter__(self) -> "Capture":
                self.grads = engine._local = {}
                return self

            def __exit__(self, *exc: Any) -> None:
                engine._local = None

        return Capture()

    def held_grads(self, net: Any) -> Optional[Dict[str, float]]:
        """The norm of each gradient buffer hyper-parallel accumulates into across micro-steps
        (``acc_grad`` of its parameters, with gradient accumulation on), by parameter name;
        ``None`` where it keeps none (``enable_grad_accumulation=False``: the hooks return
        fresh gradients)."""
        import numpy as np

        state = getattr(getattr(net, "hsdp_scheduler", None), "hsdp_state", None)
        held = {}
        for hp in getattr(state, "hsdp_params", None) or []:
            acc = getattr(hp, "acc_grad", None)
            if acc is not None:
                held[str(hp.param.name)] = float(np.linalg.norm(np.asarray(acc.asnumpy(), np.float64)))
        return held or None

    def parallelize(self, net: Any) -> Any:
        import mindspore as ms

        self.api = api = import_api("mindspore")
        device = as_str(self.cfg.device)
        if device == "cpu":
            from sweep.engines import _hp_mindspore_cpu

            self._info["collectives_emulated"] = _hp_mindspore_cpu.install_cpu_collectives()
            self._calls = _hp_mindspore_cpu.CALLS
            self._calls_before = dict(self._calls)
            self._info["notes"].append(
                "collectives emulated: reduce_scatter_tensor, all_gather_into_tensor from all_reduce -- MindSpore has "
                "no kernels for them on CPU; hyper-parallel's MindSporePlatform static methods substituted"
            )

        def to_dtype(value: Any) -> Any:
            name = dtype_name(value)
            return None if name is None else getattr(ms, name)

        if api.fully_shard is None:
            args = hsdp_arguments(self.cfg, self.world_size)
            self._info["api"] = {"name": "hsdp", "entry_point": api.entry_point,
                                 "fully_shard_why_not": api.fully_shard_why_not, **args}
            args["reduce_dtype"] = to_dtype(args["reduce_dtype"])
            if self.cfg.mp_policy.cast_forward_inputs:
                self._info["notes"].append(
                    "cast_forward_inputs not passed (no hsdp argument) -- with param_dtype unset it casts nothing "
                    "(FSDP semantics), so it is a no-op here"
                )
            with self._watched_hooks():
                out = api.hsdp(net, **args)
            net = net if out is None else out
            self._info["api"]["effective_shard_size"] = {
                p.name: getattr(p, "hsdp_effective_shard_size", 1) for p in net.trainable_params()
            }
            return net

        device_type = {"npu": "npu", "cpu": "cpu", "cuda": "gpu"}[device]
        if device == "cpu":
            from sweep.engines._hp_mindspore_cpu import mccl_backend_default

            self._info["notes"].append(mccl_backend_default())
        mesh = api.init_device_mesh(
            device_type=device_type,
            mesh_shape=tuple(int(n) for n in self.cfg.mesh.mesh_shape),
            mesh_dim_names=tuple(self.cfg.mesh.mesh_dim_names),
        )
        p = self.cfg.mp_policy
        policy = api.MixedPrecisionPolicy(
            param_dtype=to_dtype(p.param_dtype),
            reduce_dtype=to_dtype(p.reduce_dtype),
            output_dtype=to_dtype(p.output_dtype),
            cast_forward_inputs=bool(p.cast_forward_inputs),
        )
        self._info["api"] = {"name": "fully_shard", "entry_point": api.entry_point,
                             "reshard_after_forward": bool(self.cfg.reshard_after_forward)}
        with self._watched_hooks():
            return _fully_shard(api, net, self.cfg, policy, mesh)

    @contextlib.contextmanager
    def observe_reduce(self, observed: Dict[str, str]) -> Iterator[None]:
        """While entered, record in ``observed["reduce"]`` the dtype of the first tensor
        hyper-parallel reduces: ``MindSporePlatform.reduce_scatter_tensor`` (the shard dim)
        or ``all_reduce`` (the replicate dim), the calls its gradient hooks and buffers
        make (``hyper_parallel/core/fully_shard``); and every such call, and
        ``all_gather_into_tensor``, in :attr:`ledger` (op, dtype, element count, the group's
        ranks as its name ``N-r0-r1-...`` gives them, ``reduce_op`` ``SUM``: the platform
        reduces with MindSpore's default op; ``sweep.engines.collectives``' entry shape). It only looks: each call goes through
        unchanged (on CPU, to the emulation above), and the methods are restored on exit."""
        from hyper_parallel.platform.mindspore.platform import MindSporePlatform

        names = ("reduce_scatter_tensor", "all_reduce", "all_gather_into_tensor")
        saved = {name: inspect.getattr_static(MindSporePlatform, name) for name in names}
        own = {name for name in names if name in vars(MindSporePlatform)}

        def watch(name: str, original: Any) -> Any:
            def wrapper(data: Any, *args: Any, **kwargs: Any) -> Any:
                if hasattr(data, "dtype") and name != "all_gather_into_tensor":
                    observed.setdefault("reduce", str(data.dtype).lower())
                group = kwargs.get("group_info", args[0] if args else None)
                self.ledger.append({"op": name, "dtype": str(getattr(data, "dtype", "")).lower() or None,
                                    "numel": int(getattr(data, "size", 0) or 0), "group": _group_ranks(group),
                                    "group_name": str(getattr(group, "group_name", group)),
                                    "reduce_op": None if name.startswith("all_gather") else "SUM", "step": 0,
                                    "span": "grads", "params": list(self._carrying) if self._carrying else
                                    (None if name.startswith("all_gather") else [])})
                return original(data, *args, **kwargs)

            return staticmethod(wrapper)

        for name in names:
            setattr(MindSporePlatform, name, watch(name, getattr(MindSporePlatform, name)))
        try:
            yield
        finally:
            for name in names:
                if name in own:
                    setattr(MindSporePlatform, name, saved[name])
                else:
                    delattr(MindSporePlatform, name)

    collectives_unchecked = None

    def expected_collectives(self) -> Optional[Dict[str, Any]]:
        """hyper-parallel's contract on this config, from its gradient hooks
        (``hyper_parallel/core/fully_shard/hsdp_grad_hook.py``, ``hsdp_async_grad_hook.py``):
        a sharded parameter is all-gathered over the shard group (the mesh's last dim) in
        ``param_dtype`` (``fully_shard``; ``hsdp`` has none: the master dtype) and its
        gradient reduce-scattered over it in ``reduce_dtype`` (else the gradient's dtype),
        then, on a 2-D mesh, all-reduced over the replicate dim; a parameter too small to
        shard (dim 0 not divisible by the shard size: the seed MLP's 1-element bias) is
        all-reduced over every rank of the mesh. Its gradients are summed and scaled by
        ``grad_scale`` inside the hook, out of the ledger's sight: no ``divide`` entries
        (a wrong scale shows in the traced gradients, ``sweep.analysis.collectives.scale_causes``)."""
        shape = [int(n) for n in self.cfg.mesh.mesh_shape]
        dims = [str(d) for d in self.cfg.mesh.mesh_dim_names]
        master = dtype_name(self.cfg.model.get("init_dtype")) or "float32"
        p = self.cfg.mp_policy
        gather = dtype_name(p.param_dtype) or master
        reduce = dtype_name(p.reduce_dtype) or dtype_name(p.param_dtype) or master
        why_reduce = (f"mp_policy.reduce_dtype, else param_dtype, else model.init_dtype: reduce_dtype="
                      f"{dtype_name(p.reduce_dtype)}, param_dtype={dtype_name(p.param_dtype)}")
        # (a 1-D mesh's only dim is the world: group_name calls it by the dim's name)
        replicate = {"dim": dims[0], "size": shape[0] if len(shape) == 2 else 1, "dtypes": [reduce],
                     "why": why_reduce, "groups": [dims[0], "world"]}
        return {
            "mesh_shape": shape, "mesh_dim_names": dims,
            "all_gather": {"dim": dims[-1], "size": shape[-1], "dtypes": [gather],
                           "why": f"mp_policy.param_dtype={dtype_name(p.param_dtype)}, else model.init_dtype"},
            "reduce_scatter": {"dim": dims[-1], "size": shape[-1], "dtypes": [reduce], "why": why_reduce},
            "all_reduce": replicate,
            "divide": None, "units": 0, "grad_accum_steps": int(self.cfg.train.grad_accum_steps),
        }

    def optimizer_step(self, optimizer: Any, grads: Any = None) -> None:
        with _skip_dispatch(self):
            optimizer(grads)

    def info(self) -> Dict[str, Any]:
        """Also, on CPU, ``emulated_calls``: how often hyper-parallel called each substituted
        collective for this job (its hooks, in forward and backward)."""
        if self._calls is not None:
            self._info["emulated_calls"] = {k: v - self._calls_before.get(k, 0) for k, v in self._calls.items()}
        api = self._info.get("api") or {}
        if api.get("name") == "hsdp":
            self._info["summary"] = f"hsdp({api.get('optimizer_level')}, shard_size={api.get('shard_size')})"
        return self._info


class TorchHyperParallel(_HyperParallel, TorchEngine):
    """``fully_shard`` on hyper-parallel's torch platform (gloo on CPU works with the
    early-2026 release: the process group is initialised by the rank before this).

    With ``reshard_after_forward=true``, on a release whose re-gather does not preserve the
    autograd version counter, that re-gather is wrapped (``_hp_torch``) and ``info()``
    names the workaround."""

    def parallelize(self, model: Any) -> Any:
        from sweep.engines import _hp_torch
        from sweep.engines.torch_fsdp2 import torch_mp_policy

        self.api = import_api("torch")
        mesh = self.api.init_device_mesh(
            device_type=self.device.type,
            mesh_shape=tuple(int(n) for n in self.cfg.mesh.mesh_shape),
            mesh_dim_names=tuple(self.cfg.mesh.mesh_dim_names),
        )
        from sweep.engines import wrapping

        def shard(module: Any, policy_cfg: Any) -> Any:
            fsdp = torch_mp_policy(policy_cfg)
            policy = self.api.MixedPrecisionPolicy(
                param_dtype=fsdp.param_dtype,
                reduce_dtype=fsdp.reduce_dtype,
                output_dtype=fsdp.output_dtype,
                cast_forward_inputs=fsdp.cast_forward_inputs,
            )
            return _fully_shard(self.api, module, self.cfg, policy, mesh, device=self.device)

        model, units = wrapping.shard(model, self.cfg, shard, self.cfg.mp_policy, self.notes)
        if units:
            self._info["units"] = units
        self._info["api"] = {"name": "fully_shard", "entry_point": self.api.entry_point,
                             "reshard_after_forward": bool(self.cfg.reshard_after_forward)}
        if self.cfg.reshard_after_forward and _hp_torch.needs_version_counter_workaround(model):
            if _hp_torch.preserve_all_gather_version_counter(model):
                self._info["notes"].append(_hp_torch.VERSION_COUNTER_WORKAROUND)
        self._model = model
        return model

    def collectives(self) -> Any:
        """The ledger, its gradient reductions naming the parameter each carries
        (``_hp_torch.carrying_patches``: hyper-parallel reduces one parameter per call)."""
        from sweep.engines import _hp_torch
        from sweep.engines.collectives import Ledger

        model = getattr(self, "_model", None)

        class HPLedger(Ledger):
            def __enter__(self) -> "HPLedger":
                self._carried = _hp_torch.carrying_patches(model, self) if model is not None else []
                return super().__enter__()

            def __exit__(self, *exc: Any) -> None:
                _hp_torch.undo_carrying(self._carried)
                super().__exit__(*exc)

        return HPLedger()

    def grad_capture(self, model: Any) -> Any:
        """hyper-parallel's unsharded local gradients as its post-backward reduces them
        (``_hp_torch.HPLocalGrads``)."""
        from sweep.engines._hp_torch import HPLocalGrads

        return HPLocalGrads(model)

    def optimizer_step(self, optimizer: Any, grads: Any = None, *, scaler: Any = None) -> None:
        with _skip_dispatch(self):
            super().optimizer_step(optimizer, grads, scaler=scaler)

    def clip_grad_norm(self, model: Any, max_norm: float) -> float:
        """The global 2-norm from the local shards, then every shard scaled by
        ``min(1, max_norm / (norm + 1e-6))`` (``torch.nn.utils.clip_grads_with_norm_``'s
        coefficient). This release has no clipping of its own and its DTensor has no
        layout rule for ``linalg_vector_norm`` ("dose not contain parallel layout infer
        func"), so the norm is computed as DTensor's rule for a sharded tensor does: the
        sum of squares of each rank's shard (zero padding adds nothing), all-reduced
        (SUM) over the world, divided by the replicate degree (HSDP: each shard is held by
        ``mesh_shape[0]`` ranks), square root."""
        import torch
        import torch.distributed as dist

        shards = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                  for p in model.parameters() if p.grad is not None]
        squares = torch.zeros((), dtype=torch.float32, device=self.device)
        for shard in shards:
            squares += shard.detach().float().pow(2).sum()
        dist.all_reduce(squares)
        shape = [int(n) for n in self.cfg.mesh.mesh_shape]
        total = torch.sqrt(squares / (shape[0] if len(shape) > 1 else 1))
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for shard in shards:
            shard.mul_(coef.to(shard.dtype))
        if "clip_grad_norm" not in self._info.setdefault("api", {}):
            self._info["api"]["clip_grad_norm"] = "local shards' squares all-reduced (no library clipping)"
        return float(total)

    def info(self) -> Dict[str, Any]:
        return self._info
