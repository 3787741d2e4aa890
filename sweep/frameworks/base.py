"""The framework interface: everything the core asks of a framework.

A subclass sets the class attributes and, where its launchers differ, overrides
:meth:`Framework.argv` and :meth:`Framework.start_shared`. Nothing here imports the
framework itself: the job process only checks and launches; the ranks import it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Optional, Tuple

from sweep.config.enums import as_str
from sweep.errors import ConfigError
from sweep.launch import runtime, supervise
from sweep.launch.topology import Topology, srun_argv
from sweep.layout import JobDir, PoolDir


class Framework:
    """One framework. Class attributes:

    - ``name``: as in ``framework.name``;
    - ``module``: the importable top-level module that must be installed;
    - ``extra``: the pip extra of this project that installs it;
    - ``rank_module``: the module with the per-rank functions ``init_rank``,
      ``run_job``, ``close_rank``, ``run_rank`` (``sweep.train``);
    - ``launchers``: names allowed in ``framework.launcher`` (a job's own launch);
    - ``pool_launchers``: names allowed in ``framework.pool_launcher`` (shared launches);
    - ``multi_node_launchers``: launchers that can span nodes (``sweep.run.cluster``);
    - ``grad_apis``: values allowed in ``framework.grad_api``;
    - ``launch_fields``: config fields, besides those with the ``launch`` role, that a
      shared launch fixes once per process (e.g. a switch settable once).
    """

    name: ClassVar[str]
    module: ClassVar[str]
    extra: ClassVar[str]
    rank_module: ClassVar[str]
    launchers: ClassVar[Tuple[str, ...]]
    pool_launchers: ClassVar[Tuple[str, ...]]
    multi_node_launchers: ClassVar[Tuple[str, ...]] = ()
    grad_apis: ClassVar[Tuple[str, ...]] = ("backward",)
    launch_fields: ClassVar[Tuple[str, ...]] = ()
    # Its ranks record gradients and weights in a tracing rerun (compare.trace_until): the
    # first differing tensor (sweep.analysis.trace).
    traces_tensors: ClassVar[bool] = False
    # Its launcher's log lines that say a rank died while the others wait for it: the job
    # ends then, as error with that line, not at its time limit (sweep.launch.supervise).
    early_exit_patterns: ClassVar[Tuple[str, ...]] = ()
    # Its standalone copy can run the job's mp_policy (baseline.precision=policy).
    policy_baselines: ClassVar[bool] = False
    # Its gradients stay on the parameters from one step to the next unless cleared (torch's
    # .grad): zero_grad's effect is observed every step (sweep.run.judge); else they are
    # functional and only an engine's own buffers can hold them.
    grads_persist: ClassVar[bool] = False
    # Engines whose gradient reduction runs where the collective ledger watches no call, and
    # why (``{engine name: why}``): the reduce dtype stays unknown for that reason.
    unwatched_reduce: ClassVar[Dict[str, str]] = {}

    # --- checks -------------------------------------------------------------------
    @classmethod
    def check(cls, cfg: Any, world: int) -> None:
        """Everything about the framework a job needs before launch: its launchers, its
        gradient API, the device (in ``framework.device_map`` and present on this host),
        the framework installed, and the baseline it can train (:meth:`check_baseline`). What its step cannot run of the ``train`` and
        ``model`` sections is :meth:`check_train`'s (``sweep.run.checks`` asks it after the
        model and the data).

        Raises:
            ConfigError: one line naming the field and what is allowed.
        """
        for key, allowed in (("launcher", cls.launchers), ("pool_launcher", cls.pool_launchers)):
            if cfg.framework[key] not in allowed:
                raise ConfigError(
                    f"framework.{key}={cfg.framework[key]} does not start framework={cls.name} ranks; "
                    f"allowed: {', '.join(allowed)}"
                )
        grad_api = as_str(cfg.framework.grad_api)
        if grad_api not in cls.grad_apis:
            raise ConfigError(
                f"framework.grad_api={grad_api} is not framework={cls.name}'s; allowed: {', '.join(cls.grad_apis)}"
            )
        device = as_str(cfg.device)
        if device not in cfg.framework.device_map:
            raise ConfigError(
                f"device={device} has no entry in framework.device_map for framework={cls.name} "
                f"(it has: {', '.join(cfg.framework.device_map)})"
            )
        cls.check_device(device, world)
        if importlib.util.find_spec(cls.module) is None:
            raise ConfigError(
                f"framework={cls.name} is not installed: pip install '.[{cls.extra}]' "
                "(on CPU machines add -c constraints/cpu.txt)"
            )
        cls.check_installed(cfg)
        cls.check_baseline(cfg)

    @classmethod
    def check_baseline(cls, cfg: Any) -> None:
        """``baseline.precision=policy`` needs a framework whose standalone copy can run the
        policy (:attr:`policy_baselines`).

        Raises:
            ConfigError: it cannot.
        """
        if as_str((cfg.get("baseline") or {}).get("precision", "float32")) == "policy" and not cls.policy_baselines:
            raise ConfigError(f"baseline.precision=policy is not implemented for framework={cls.name} (its standalone "
                              "copy trains in the parameters' dtype only); use baseline.precision=float32")

    @classmethod
    def check_train(cls, cfg: Any) -> None:
        """Parts of the ``train``/``model`` sections this framework's step does not run
        (none here).

        Raises:
            ConfigError: naming the field and why.
        """

    @classmethod
    def check_device(cls, device: str, world: int) -> None:
        """Raises: ConfigError: ``device`` is not present on this host for ``world`` ranks."""

    @classmethod
    def check_installed(cls, cfg: Any) -> None:
        """Checks that need the installed framework (run after it was found)."""

    @classmethod
    def device_name(cls, cfg: Any) -> str:
        """What the framework calls the job's ``device`` (``framework.device_map``)."""
        return str(cfg.framework.device_map[as_str(cfg.device)])

    # --- launching ----------------------------------------------------------------
    @classmethod
    def argv(
        cls, launcher: str, nproc: int, run_dir: Path, *, topology: Optional[Topology] = None,
        python: str = sys.executable,
    ) -> List[str]:
        """The command line of ``launcher`` starting ``nproc`` ranks that run
        ``run_dir`` (a job dir, or a pool dir for a shared launch); with a ``topology``
        of several nodes, this node's launcher of its ranks.

        Raises:
            ValueError: a launcher this framework does not have.
        """
        raise NotImplementedError

    @classmethod
    def job_launch(
        cls, launcher: str, nproc: int, job_dir: Path, *, env: Dict[str, str], timeout_s: float,
        topology: Optional[Topology] = None,
    ) -> supervise.LaunchSpec:
        """A job's own launch. On a ``topology`` of several nodes (``sweep.launch.topology``):
        ``srun`` starts one task per node, which runs that node's launcher
        (``python -m sweep.run.cluster``), with ``MASTER_ADDR``/``MASTER_PORT`` in the
        environment so that every node uses the same rendezvous.

        Raises:
            ValueError: a launcher this framework has not, or one that cannot span nodes.
            ConfigError: several nodes, but this process is one of several srun tasks.
        """
        if topology is not None and topology.multi_node:
            if launcher not in cls.multi_node_launchers:
                raise ValueError(
                    f"launcher={launcher!r} cannot start ranks on several nodes; framework={cls.name} has: "
                    + ", ".join(cls.multi_node_launchers)
                )
            per_node(nproc, topology)
            argv = srun_argv(topology, launcher, nproc, job_dir, python=runtime.interpreter(env))
            env = dict(env, MASTER_ADDR=str(topology.master_addr), MASTER_PORT=str(topology.master_port))
        else:
            argv = cls.argv(launcher, nproc, job_dir, python=runtime.interpreter(env))
        return supervise.LaunchSpec(argv=argv, env=env, log_path=JobDir(job_dir).launcher_log, timeout_s=timeout_s,
                                    fail_patterns=cls.early_exit_patterns)

    @classmethod
    def start_shared(cls, launcher: str, nproc: int, pool_dir: Path, env: Dict[str, str]) -> supervise.Launch:
        """Start a shared launch of ``nproc`` ranks serving ``pool_dir`` (``sweep.run.pool``)."""
        spec = supervise.LaunchSpec(
            argv=cls.argv(launcher, nproc, pool_dir, python=runtime.interpreter(env)), env=env,
            log_path=PoolDir(pool_dir).launcher_log,
            timeout_s=float("inf"), fail_patterns=cls.early_exit_patterns,
        )
        return supervise.start(spec)

    @classmethod
    def prestart(cls, cfg: Any, sweep_dir: Path, env: Dict[str, str]) -> None:
        """At the start of a multirun that shares launches: start what they need early."""

    @classmethod
    def rank_functions(cls) -> Any:
        """The imported :attr:`rank_module`."""
        return importlib.import_module(cls.rank_module)


def npu_count(env: Optional[Dict[str, str]] = None, dev: Path = Path("/dev")) -> int:
    """The Ascend NPUs this host lets a job use, without starting a framework: the devices
    ``ASCEND_RT_VISIBLE_DEVICES`` lists (CANN's own restriction, comma-separated ids) when
    it is set, else the ``/dev/davinci<N>`` device files the driver creates, one per NPU
    (``davinci_manager`` and the like are not devices)."""
    env = os.environ if env is None else env
    visible = env.get("ASCEND_RT_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    return len([p for p in dev.glob("davinci*") if p.name[len("davinci"):].isdigit()])


def check_npus(world: int) -> None:
    """Raises: ConfigError: fewer NPUs than ``world`` ranks (:func:`npu_count`)."""
    found = npu_count()
    if found < world:
        raise ConfigError(f"device=npu needs {world} NPUs for this mesh, this host has {found} "
                          "(/dev/davinci*, or ASCEND_RT_VISIBLE_DEVICES where set)")


def rank_script() -> str:
    """The path of ``sweep/train/__main__.py``, for launchers that take a script (msrun)."""
    return str(Path(__file__).resolve().parent.parent / "train" / "__main__.py")


def per_node(nproc: int, topology: Topology) -> int:
    """Ranks per node of a job of ``nproc`` ranks on ``topology``'s nodes.

    Raises:
        ValueError: ``topology`` holds another number of ranks.
    """
    if topology.world_size != nproc:
        raise ValueError(f"{nproc} ranks but topology has {topology.nnodes} nodes x {topology.nproc_per_node} ranks")
    return topology.nproc_per_node

