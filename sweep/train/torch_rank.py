"""One PyTorch rank: standalone then distributed training of the seed's MLP.

Started by torchrun (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` in the environment).
Order of RNG use, as in the report: seed, build the standalone model, build the
distributed model, copy the distributed model's initial weights into the standalone
one (an independent copy), then parallelise the distributed one.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, List

import numpy as np

from sweep.data import make_samples
from sweep.engines import load_engine
from sweep.train import write_rank_result


def build_mlp(model_cfg: Any) -> Any:
    """Dense(in, hidden) -> ReLU -> Dense(hidden, out); weights ~ N(0, init_std^2), biases 0.

    Parameter names (``layer0.weight``, ...) match the MindSpore model's.
    """
    import torch
    from torch import nn

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer0 = nn.Linear(model_cfg.in_size, model_cfg.hidden_size)
            self.layer1 = nn.Linear(model_cfg.hidden_size, model_cfg.out_size)
            for layer in (self.layer0, self.layer1):
                nn.init.normal_(layer.weight, mean=0.0, std=model_cfg.init_std)
                nn.init.zeros_(layer.bias)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer1(torch.relu(self.layer0(x)))

    return MLP()


def build_optimizer(opt_cfg: Any, params: Any) -> Any:
    """``torch.optim.Adam``/``AdamW``/``SGD`` with the config's hyperparameters.

    Raises:
        ValueError: unknown optimizer name.
    """
    import torch

    name = opt_cfg.name
    if name in ("adam", "adamw"):
        cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
        return cls(params, lr=opt_cfg.lr, betas=tuple(opt_cfg.betas), eps=opt_cfg.eps, weight_decay=opt_cfg.weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=opt_cfg.lr, momentum=opt_cfg.momentum, weight_decay=opt_cfg.weight_decay)
    raise ValueError(f"optimizer.name={name!r}; allowed: adam, adamw, sgd")


def train(model: Any, samples: List[Any], step: Callable[[], None], zero_grad: Callable[[], None]) -> List[float]:
    """Train one pass over ``samples``: forward, MSE loss, ``backward()``, ``step()``,
    ``zero_grad()``. Returns the loss of every step (float)."""
    import torch.nn.functional as F

    losses = []
    for x, y in samples:
        loss = F.mse_loss(model(x), y)
        loss.backward()
        step()
        zero_grad()
        losses.append(float(loss.item()))
    return losses


def _redirect_output(job_dir: Path, rank: int) -> None:
    """Send this rank's stdout/stderr (C level too) to ``JOB_DIR/logs/worker_<rank>.log``."""
    log_dir = job_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_dir / f"worker_{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def run_rank(cfg: Any, job_dir: str) -> None:
    """Train both copies on this rank and write ``ranks/rank_<rank>.json``; then leave with
    ``os._exit(0)`` (gloo ranks can SIGABRT at interpreter shutdown otherwise)."""
    job_dir = Path(job_dir)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    _redirect_output(job_dir, rank)
    t0 = time.perf_counter()

    import torch
    import torch.distributed as dist

    device_name = cfg.device
    if device_name == "npu":
        import torch_npu  # noqa: F401  (registers the npu device and hccl)
    if device_name == "cpu":
        device = torch.device("cpu")
    else:
        device = torch.device(device_name, local_rank)
        getattr(torch, device_name).set_device(device)
    dist.init_process_group(backend=cfg.framework.backend[device_name])
    try:
        torch.manual_seed(cfg.seed)
        np.random.seed(cfg.seed)
        if cfg.deterministic:
            torch.use_deterministic_algorithms(True)
        standalone = build_mlp(cfg.model).to(device)
        distributed = build_mlp(cfg.model).to(device)
        standalone.load_state_dict(distributed.state_dict())
        engine = load_engine(cfg, "torch", device=device)
        distributed = engine.parallelize(distributed)
        opt_standalone = build_optimizer(cfg.optimizer, standalone.parameters())
        opt_distributed = build_optimizer(cfg.optimizer, distributed.parameters())
        samples = [
            (torch.from_numpy(x).to(device), torch.from_numpy(y).to(device))
            for x, y in make_samples(
                cfg.steps,
                batch_size=cfg.data.batch_size,
                in_size=cfg.model.in_size,
                out_size=cfg.model.out_size,
                seed_offset=cfg.data.seed_offset,
            )
        ]
        t1 = time.perf_counter()
        loss_standalone = train(standalone, samples, opt_standalone.step, opt_standalone.zero_grad)
        t2 = time.perf_counter()
        loss_distributed = train(
            distributed, samples, lambda: engine.optimizer_step(opt_distributed), opt_distributed.zero_grad
        )
        t3 = time.perf_counter()
        write_rank_result(
            job_dir,
            rank,
            {
                "rank": rank,
                "world_size": world,
                "framework": "torch",
                "versions": {"torch": torch.__version__},
                "standalone": loss_standalone,
                "distributed": loss_distributed,
                "timings_s": {"setup": t1 - t0, "standalone": t2 - t1, "distributed": t3 - t2},
            },
        )
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
