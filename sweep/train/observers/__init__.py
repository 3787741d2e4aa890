"""What a training step observes, one observer a file (``base`` holds the protocol: the
named points every framework's step calls, and :class:`~sweep.train.observers.base.Copy`,
what the step trains):

========================  ==========================================================
file                      observer: what it records (``RankResult`` field)
========================  ==========================================================
``dtypes.py``             ``TorchDtypes``, ``MindSporeDtypes``: the dtypes that ran
                          in step 0 (``dtypes_observed``)
``tensor_trace.py``       ``TorchTensorTrace``, ``MindSporeTensorTrace``: gradients,
                          weights, buffers per step (``first_tensor``, ``tensors``)
``module_trace.py``       ``ModuleTrace``: every module's input, output, output
                          gradient (``modules``)
``replicas.py``           ``ReplicaDigests``: a digest of the local weights per step
                          (``replica``)
``ledger.py``             ``CollectiveLedger``: the ``torch.distributed`` calls
                          (``collectives``)
``optimizer_log.py``      ``OptimizerLog``: the param groups as step 0 ran them
                          (``optimizer``)
``lr_log.py``             ``LearningRates``: the lr per step (``features.lr``)
``random_draws.py``       ``RandomDraws``: whether training drew random numbers
                          (``random_draws``)
``offload.py``            ``ActivationOffload``: activation offload, a context
``forward_writes.py``     ``ForwardWrites``: parameters the first forward changes
                          (``features["forward_writes"]``)
``single_device.py``      ``SingleDevice``: the standalone copy and the twin see no
                          process group; collectives called anyway
                          (``features["stray_collectives"]``)
========================  ==========================================================
"""

from sweep.train.observers.base import POINTS, SPANS, Copy, Observer, Observers, Step

__all__ = ["POINTS", "SPANS", "Copy", "Observer", "Observers", "Step"]
