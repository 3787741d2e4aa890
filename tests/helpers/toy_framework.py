"""A third framework and its engine, each defined in this one module: what the core
needs to accept them (and a model built for it) is a config (here given as overrides; in the tree it would be one
``conf/framework/toy.yaml``), never an edit of the core."""

from sweep.engines.base import Engine
from sweep.frameworks.base import Framework


class ToyFramework(Framework):
    name = "toy"
    module = "json"  # "installed": any importable module
    extra = "toy"
    rank_module = __name__
    launchers = ("toyrun",)
    pool_launchers = ("toyrun",)
    multi_node_launchers = ("toyrun",)
    grad_apis = ("backward",)
    launch_fields = ("seed",)

    @classmethod
    def argv(cls, launcher, nproc, run_dir, *, topology=None, python="python"):
        if launcher != "toyrun":
            raise ValueError(f"launcher={launcher!r}; framework=toy has: toyrun")
        return ["toyrun", f"-n{nproc}", str(run_dir)]


class ToyEngine(Engine):
    framework = "toy"

    def parallelize(self, model):
        return model


def toy_model(*, framework, in_size, out_size):
    """The toy framework's model (a model factory names the frameworks it builds for)."""
    return {"framework": framework, "shape": (in_size, out_size)}


toy_model.frameworks = ("toy",)

OVERRIDES = [
    "framework.name=toy", "framework.impl=tests.helpers.toy_framework.ToyFramework", "framework.launcher=toyrun",
    "framework.pool_launcher=toyrun", "+engine.impl.toy=tests.helpers.toy_framework.ToyEngine",
    "model.name=toy", "model._target_=tests.helpers.toy_framework.toy_model",
]
