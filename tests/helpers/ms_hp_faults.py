"""Faults in how hyper-parallel's MindSpore ``hsdp`` is called, planted through test-only
engines (subclasses of ``sweep.engines.hyper_parallel.MindSporeHyperParallel``), each a
class of real bug the losses alone may not show:
``engine.impl.mindspore=tests.helpers.ms_hp_faults.<Name>``.

- ``WorldShardHP``: ``shard_size`` set to the world size whatever the mesh (a mesh mapped
  onto the wrong groups: an HSDP mesh run as plain FSDP over every rank). Its mean is still
  right, so the losses agree; only the ledger shows it.
- ``HalfReduceHP``: gradients reduced in float16 where the policy gives none (a reduce
  dtype passed that the config does not set).
"""

from __future__ import annotations

from typing import Any, Dict

import sweep.engines.hyper_parallel as hp


class _ChangedArguments(hp.MindSporeHyperParallel):
    def change(self, args: Dict[str, Any], world: int) -> Dict[str, Any]:
        raise NotImplementedError

    def parallelize(self, net: Any) -> Any:
        original = hp.hsdp_arguments

        def changed(cfg: Any, world: int) -> Dict[str, Any]:
            return self.change(original(cfg, world), world)

        hp.hsdp_arguments = changed
        try:
            return super().parallelize(net)
        finally:
            hp.hsdp_arguments = original


class WorldShardHP(_ChangedArguments):
    def change(self, args: Dict[str, Any], world: int) -> Dict[str, Any]:
        return dict(args, shard_size=world)


class HalfReduceHP(_ChangedArguments):
    def change(self, args: Dict[str, Any], world: int) -> Dict[str, Any]:
        return dict(args, reduce_dtype="float16")
