"""The report's shape on MindSpore, small, for runner=command's tests: every msrun worker
trains a standalone Dense and a data-parallel copy (gradients all-reduced and averaged over
the workers) from the same weights on the same data and prints the report's lines,
``step: N, standalone loss: X`` and ``step: N, fully_shard loss: Y`` (a MindSpore Tensor's
text); msrun writes them to worker_<rank>.log. Knows nothing of sweep."""

import sys

import mindspore as ms
import numpy as np
from mindspore import nn, ops
from mindspore.communication import get_group_size, init

ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
init()
steps = int(sys.argv[1])
np.random.seed(42)
x = ms.Tensor(np.random.randn(2, 8).astype(np.float32))
y = ms.Tensor(np.random.randn(2, 4).astype(np.float32))
for name in ("standalone", "fully_shard"):
    ms.set_seed(42)
    net = nn.Dense(8, 4)
    opt = nn.Adam(net.trainable_params(), learning_rate=1e-3)
    loss_fn = nn.MSELoss()
    grad_fn = ms.value_and_grad(lambda a, b: loss_fn(net(a), b), None, opt.parameters)
    allreduce = ops.AllReduce() if name == "fully_shard" else None
    for step in range(steps):
        loss, grads = grad_fn(x, y)
        if allreduce is not None:
            grads = tuple(allreduce(g) / get_group_size() for g in grads)
        opt(grads)
        print(f"step: {step}, {name} loss: {loss}", flush=True)
