"""MindSpore: ranks started by ``msrun``, in PYNATIVE mode."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, List, Optional

from sweep.config.enums import as_str
from sweep.errors import ConfigError
from sweep.frameworks.base import Framework, check_npus, per_node, rank_script
from sweep.launch import supervise
from sweep.launch.topology import DEFAULT_PORT, Topology
from sweep.layout import JobDir


def msrun_argv(
    nproc: int, run_dir: Path, port: int, python: str = sys.executable, *, topology: Optional[Topology] = None
) -> List[str]:
    """``msrun --worker_num=N --local_worker_num=N --master_port=P --log_dir=DIR/logs --join=True
    .../sweep/train/__main__.py DIR``; msrun takes a script path, not a module, and is
    the one next to ``python``.

    With a ``topology`` of several nodes (``nproc`` ranks in all), this node's launcher:
    ``--worker_num=N --local_worker_num=N/NODES --master_addr=MASTER_ADDR --master_port=P
    --node_rank=R`` (node ``R`` holds global ranks ``R*N/NODES ...``).
    """
    msrun = str(Path(python).parent / "msrun")
    if topology is not None and topology.multi_node:
        return [
            msrun, f"--worker_num={nproc}", f"--local_worker_num={per_node(nproc, topology)}",
            f"--master_addr={topology.master_addr}", f"--master_port={port}", f"--node_rank={topology.node_rank}",
            f"--log_dir={JobDir(run_dir).logs}", "--join=True", rank_script(), str(run_dir),
        ]
    return [
        msrun, f"--worker_num={nproc}", f"--local_worker_num={nproc}", f"--master_port={port}",
        f"--log_dir={JobDir(run_dir).logs}", "--join=True", rank_script(), str(run_dir),
    ]


class MindSporeFramework(Framework):
    name = "mindspore"
    module = "mindspore"
    extra = "mindspore"
    rank_module = "sweep.train.mindspore_rank"
    launchers = ("msrun",)
    pool_launchers = ("msrun",)
    multi_node_launchers = ("msrun",)
    grad_apis = ("value_and_grad", "backward")
    # mindspore.set_deterministic may be called once per process: a shared launch runs
    # jobs of one setting only.
    launch_fields = ("deterministic",)
    traces_tensors = True
    # msrun (--join=True) logs a worker that died, then waits for the others, which wait in
    # init() for it: without this a worker failing at start (a CANN/driver mismatch) is a timeout
    early_exit_patterns = (r"Worker process \d+ exit with exception",)

    @classmethod
    def check_device(cls, device: str, world: int) -> None:
        """``npu`` needs the Ascend toolkit's environment (``ASCEND_HOME_PATH`` or
        ``ASCEND_TOOLKIT_HOME``, set by its ``set_env.sh``) and ``world`` NPUs
        (``sweep.frameworks.base.npu_count``).

        Raises:
            ConfigError: the toolkit's environment or NPUs are missing.
        """
        if device == "npu" and not (os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME")):
            raise ConfigError(
                "device=npu with framework=mindspore needs the Ascend toolkit: source its set_env.sh "
                "(ASCEND_HOME_PATH is not set on this host)"
            )
        if device == "npu":
            check_npus(world)

    @classmethod
    def check_train(cls, cfg: Any) -> None:
        """sweep's MindSpore step (``sweep.train.mindspore_step``) runs float32 parameters,
        the MSE loss, gradient accumulation and clipping, frozen parameters, full
        recompute and the lr schedules; not a gradient scaler, selective recompute,
        activation offload, compile or tied parameters.

        Raises:
            ConfigError: ``model.init_dtype`` other than float32, ``train.loss`` other than
                mse, ``train.grad_scaler.enabled``, or a setting listed above it does not run.
        """
        dtype = as_str(cfg.model.init_dtype)
        if dtype != "float32":
            raise ConfigError(f"model.init_dtype={dtype}: sweep's MindSpore step creates float32 parameters only; "
                              "run it with framework=torch")
        if str(cfg.train.loss) != "mse":
            raise ConfigError(f"train.loss={cfg.train.loss}: sweep's MindSpore step has the mse loss only; "
                              "run it with framework=torch")
        if cfg.train.grad_scaler.enabled:
            raise ConfigError("train.grad_scaler.enabled=true: sweep's MindSpore step has no loss scaler "
                              "(mindspore.amp.DynamicLossScaler is not wired); run it with framework=torch")
        unsupported = {
            "activation_checkpoint.mode=selective": as_str(cfg.activation_checkpoint.mode) == "selective",
            "activation_offload=true": bool(cfg.activation_offload),
            "compile.enabled=true": bool(cfg.compile.enabled),
            "model.tie": bool(list(cfg.model.get("tie") or [])),
        }
        for setting, is_set in unsupported.items():
            if is_set:
                raise ConfigError(f"{setting}: sweep's MindSpore step does not run it (its recompute is full only: "
                                  "Cell.recompute(); no activation offload, compile or tied parameters); run it with "
                                  "framework=torch")

    @classmethod
    def check_installed(cls, cfg: Any) -> None:
        """``framework.grad_api=backward`` needs a MindSpore whose ``Tensor`` has ``backward``.

        Raises:
            ConfigError: it has not.
        """
        if as_str(cfg.framework.grad_api) == "backward":
            import mindspore  # only for this check: ~3 s

            if not hasattr(mindspore.Tensor, "backward"):
                raise ConfigError(
                    f"framework.grad_api=backward: MindSpore {mindspore.__version__} has no Tensor.backward; "
                    "allowed here: value_and_grad"
                )

    @classmethod
    def argv(
        cls, launcher: str, nproc: int, run_dir: Path, *, topology: Optional[Topology] = None,
        python: str = sys.executable,
    ) -> List[str]:
        if launcher != "msrun":
            raise ValueError(f"launcher={launcher!r}; framework=mindspore has: msrun")
        if topology is not None and topology.multi_node:
            return msrun_argv(nproc, run_dir, topology.master_port or DEFAULT_PORT, python, topology=topology)
        return msrun_argv(nproc, run_dir, supervise.free_port(), python)
