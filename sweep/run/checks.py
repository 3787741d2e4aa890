"""Every check a job runs before it launches ranks, in one place and one order.

Validation flows down: the job asks each component to check its own section, and no
component calls back up. First the config alone (``sweep.config.schema.check_fields``:
unknown keys, the top-level scalars, each section's field-local checks, the mesh against
``world_size``), then the components, in this order:

1. the framework (``framework.impl``: launchers, gradient API, device, installed);
2. the engine (``engine.impl[framework]``: its ``engine.options``, its own rules);
3. the model (``model._target_`` imports, runs on the framework, takes ``model.args``);
4. the data (``data._target_`` imports);
5. the training step (what the framework's step cannot run: ``Framework.check_train``).

The ``mesh``, ``compare`` and ``execution`` sections have field-local checks only (the
first step).
"""

from __future__ import annotations

from typing import Any, Type

from sweep import engines, frameworks, models
from sweep.config.schema import check_fields
from sweep.frameworks.base import Framework
from sweep.models import data


def check(cfg: Any) -> Type[Framework]:
    """Validate a composed job config (a ``DictConfig`` of ``SweepConfig``) before launch.

    Returns:
        The job's framework class (``framework.impl``).

    Raises:
        ConfigError: the first failing check, one line naming the field, the value and
            what is allowed.
    """
    world = check_fields(cfg)
    framework = frameworks.load(cfg)
    framework.check(cfg, world)
    engines.engine_class(cfg, framework.name).check(cfg)
    models.check(cfg, framework.name)
    data.factory_of(cfg)
    framework.check_train(cfg)
    return framework
