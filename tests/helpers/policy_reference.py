"""The standalone copy of ``baseline.precision=policy`` against PyTorch's own reference for
FSDP2 mixed precision, in one process:
``python -m tests.helpers.policy_reference OVERRIDE...`` prints one JSON line
``{"standalone": [loss per step], "reference": [loss per step], "observed": {...}}``.

``standalone``: the job's model (``sweep.models.build``) ``fully_shard``-ed on a one-rank
mesh by ``sweep.engines.torch_fsdp2.StandaloneFSDP2``, trained by sweep's own step
(``sweep.train.torch_step.train``) in a default process group of one rank (gloo,
``HashStore``), as the standalone-only process of ``order=separate`` runs it.

``reference``: no FSDP at all, the recipe of PyTorch's
``test/distributed/_composable/fsdp/test_fully_shard_mixed_precision.py``
(``_test_reduce_dtype_fp32_reduce``): a copy of the model in ``param_dtype`` runs forward
(inputs cast to ``param_dtype``) and backward; its gradients, cast to ``reduce_dtype``
and then to float32, become the float32 master copy's; the optimizer steps the master
copy, whose weights are copied back into the ``param_dtype`` copy. Only for a policy
with ``param_dtype`` set, ``output_dtype`` unset, ``wrap=root``, no overrides,
``grad_accum_steps=1``, no clipping or scaler (the helper refuses others).
"""

from __future__ import annotations

import copy
import json
import sys

from hydra import compose, initialize_config_dir


def main(overrides: list) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from sweep import models
    from sweep.config.schema import register_configs
    from sweep.engines.torch_fsdp2 import StandaloneFSDP2
    from sweep.train import rank_samples
    from sweep.train.torch_rank import build_optimizer
    from sweep.train.observers import Copy
    from sweep.train.observers.dtypes import TorchDtypes
    from sweep.train.observers.ledger import CollectiveLedger
    from sweep.train.torch_step import train
    from tests.conftest import CONF

    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="config", overrides=list(overrides))
    policy = cfg.mp_policy
    if policy.param_dtype is None or policy.output_dtype is not None or policy.overrides or str(cfg.wrap.value) != "root":
        raise SystemExit("policy_reference: a param_dtype policy, output_dtype unset, wrap=root, no overrides")
    if cfg.train.grad_accum_steps != 1 or cfg.train.clip_grad_norm is not None or cfg.train.grad_scaler.enabled:
        raise SystemExit("policy_reference: grad_accum_steps=1, no clipping, no scaler")
    param_dtype = getattr(torch, policy.param_dtype.value)
    reduce_dtype = getattr(torch, (policy.reduce_dtype or policy.param_dtype).value)

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    torch.manual_seed(cfg.seed)
    torch.use_deterministic_algorithms(True)
    model = models.build(cfg, "torch")
    master = copy.deepcopy(model)  # the reference's float32 master weights
    engine = StandaloneFSDP2(cfg, device=torch.device("cpu"), world_size=1)
    model = engine.parallelize(model)
    samples, _ = rank_samples(cfg, 0)
    samples = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in samples]
    dtypes = TorchDtypes(CollectiveLedger(engine, keep=False))
    copy_ = Copy(model=model, engine=engine, optimizer=build_optimizer(cfg.optimizer, model.parameters()),
                 input_dtype=torch.float32)
    standalone = train(copy_, samples, cfg.train, [dtypes.ledger, dtypes])
    observed = dtypes.observed

    compute = copy.deepcopy(master).to(param_dtype)
    optimizer = build_optimizer(cfg.optimizer, master.parameters())
    reference = []
    for x, y in samples:
        loss = F.mse_loss(compute(x.to(param_dtype)), y)
        loss.backward()
        for p32, p_low in zip(master.parameters(), compute.parameters()):
            p32.grad = p_low.grad.to(reduce_dtype).to(p32.dtype)
            p_low.grad = None
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():
            for p32, p_low in zip(master.parameters(), compute.parameters()):
                p_low.copy_(p32)
        reference.append(float(loss.item()))
    dist.destroy_process_group()
    print(json.dumps({"standalone": standalone, "reference": reference, "observed": observed}))


if __name__ == "__main__":
    main(sys.argv[1:])
