"""One MindSpore rank, in PYNATIVE mode, following the report's reproducer.

Started by msrun (which also runs this file in its scheduler process up to
``init()``; nothing is written before ``init()``). Order, as in the report:
``set_context(mode=PYNATIVE_MODE)``, ``set_deterministic``, ``set_seed(seed)``,
``np.random.seed(seed)``, ``init()``, build the standalone net, build the distributed
net, copy the distributed net's initial weights into the standalone one (an
independent copy: ``set_data(Tensor(copy))``), parallelise, build the optimizers
(standalone first), train standalone, then distributed. A step is
``value_and_grad(forward_fn, None, optimizer.parameters)`` then ``optimizer(grads)``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, List

import numpy as np

from sweep.data import make_samples
from sweep.engines import load_engine
from sweep.train import write_rank_result


def build_mlp(model_cfg: Any) -> Any:
    """The report's ``SimpleMLP``: ``nn.Dense`` x2 with ``weight_init=Normal(init_std)``
    (``"normal"`` is ``Normal(sigma=0.01)``), ``bias_init="zeros"``, ``mint.nn.ReLU``."""
    from mindspore import mint, nn
    from mindspore.common.initializer import Normal

    class SimpleMLP(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.layer0 = nn.Dense(
                model_cfg.in_size, model_cfg.hidden_size, weight_init=Normal(sigma=model_cfg.init_std), bias_init="zeros"
            )
            self.layer1 = nn.Dense(
                model_cfg.hidden_size, model_cfg.out_size, weight_init=Normal(sigma=model_cfg.init_std), bias_init="zeros"
            )

        def construct(self, x: Any) -> Any:
            x = self.layer0(x)
            x = mint.nn.ReLU()(x)
            return self.layer1(x)

    return SimpleMLP()


def build_optimizer(opt_cfg: Any, params: Any) -> Any:
    """``nn.Adam`` / ``nn.AdamWeightDecay`` / ``nn.SGD`` with the config's hyperparameters.

    Raises:
        ValueError: unknown optimizer name.
    """
    from mindspore import nn

    name = opt_cfg.name
    beta1, beta2 = (float(b) for b in opt_cfg.betas)
    if name == "adam":
        return nn.Adam(params, learning_rate=opt_cfg.lr, beta1=beta1, beta2=beta2, eps=opt_cfg.eps,
                       weight_decay=opt_cfg.weight_decay)
    if name == "adamw":
        return nn.AdamWeightDecay(params, learning_rate=opt_cfg.lr, beta1=beta1, beta2=beta2, eps=opt_cfg.eps,
                                  weight_decay=opt_cfg.weight_decay)
    if name == "sgd":
        return nn.SGD(params, learning_rate=opt_cfg.lr, momentum=opt_cfg.momentum, weight_decay=opt_cfg.weight_decay)
    raise ValueError(f"optimizer.name={name!r}; allowed: adam, adamw, sgd")


def copy_weights(dst: Any, src: Any) -> None:
    """Set every parameter of ``dst`` to an independent copy of ``src``'s same-named one."""
    from mindspore import Tensor

    src_params = src.parameters_dict()
    for name, param in dst.parameters_dict().items():
        param.set_data(Tensor(src_params[name].asnumpy().copy()))


def train(net: Any, optimizer: Any, samples: List[Any], apply: Callable[[Any, Any], None]) -> List[float]:
    """The report's ``train_step`` over ``samples``: ``value_and_grad`` of the MSE loss
    w.r.t. ``optimizer.parameters``, then ``apply(optimizer, grads)``."""
    import mindspore as ms
    from mindspore import nn

    loss_fn = nn.MSELoss()

    def forward_fn(inputs: Any, labels: Any) -> Any:
        return loss_fn(net(inputs), labels)

    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters)
    losses = []
    for x, y in samples:
        loss, grads = grad_fn(x, y)
        apply(optimizer, grads)
        losses.append(float(loss.asnumpy()))
    return losses


def run_rank(cfg: Any, job_dir: str) -> None:
    """Train both copies on this rank and write ``ranks/rank_<rank>.json``."""
    t0 = time.perf_counter()
    import mindspore as ms
    from mindspore import Tensor
    from mindspore.communication import get_group_size, get_rank, init

    ms.set_context(mode=ms.PYNATIVE_MODE, device_target=cfg.framework.device_target[cfg.device])
    if cfg.deterministic:
        ms.set_deterministic(True)
    ms.set_seed(cfg.seed)
    np.random.seed(cfg.seed)
    init()
    rank, world = get_rank(), get_group_size()

    standalone = build_mlp(cfg.model)
    distributed = build_mlp(cfg.model)
    copy_weights(standalone, distributed)
    engine = load_engine(cfg, "mindspore", world_size=world)
    distributed = engine.parallelize(distributed)
    samples = [
        (Tensor(x), Tensor(y))
        for x, y in make_samples(
            cfg.steps,
            batch_size=cfg.data.batch_size,
            in_size=cfg.model.in_size,
            out_size=cfg.model.out_size,
            seed_offset=cfg.data.seed_offset,
        )
    ]
    opt_standalone = build_optimizer(cfg.optimizer, standalone.trainable_params())
    opt_distributed = build_optimizer(cfg.optimizer, distributed.trainable_params())
    t1 = time.perf_counter()
    loss_standalone = train(standalone, opt_standalone, samples, lambda opt, grads: opt(grads))
    t2 = time.perf_counter()
    loss_distributed = train(distributed, opt_distributed, samples, engine.optimizer_step)
    t3 = time.perf_counter()
    write_rank_result(
        Path(job_dir),
        rank,
        {
            "rank": rank,
            "world_size": world,
            "framework": "mindspore",
            "versions": {"mindspore": ms.__version__, **_hyper_parallel_version()},
            "standalone": loss_standalone,
            "distributed": loss_distributed,
            "timings_s": {"setup": t1 - t0, "standalone": t2 - t1, "distributed": t3 - t2},
        },
    )


def _hyper_parallel_version() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    for dist_name in ("hyper-parallel", "hyper_parallel"):
        try:
            return {"hyper_parallel": version(dist_name)}
        except PackageNotFoundError:
            continue
    return {}
