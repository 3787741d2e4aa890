"""Every check a job runs before it launches ranks, in one place and one order.

Validation flows down: the job asks each component to check its own section, and no
component calls back up. First the config alone (``sweep.config.schema.check_fields``:
unknown keys, the top-level scalars, each section's field-local checks, the mesh against
``world_size``), then the components, in this order:

1. the framework (``framework.impl``: launchers, gradient API, device, installed);
2. the engine (``engine.impl[framework]``: its ``engine.options``, its own rules);
3. the model (``model._target_`` imports, runs on the framework, takes ``model.args``);
4. the data (``data._target_`` imports);
5. the training step (a dotted ``train.loss`` imports; what the framework's step cannot run:
   ``Framework.check_train``).
6. with ``baseline.framework`` naming the other framework, the standalone copy there
   (:func:`check_baseline_framework`: its preset, installed, the model's port, its step).

The ``mesh``, ``compare`` and ``execution`` sections have field-local checks only (the
first step).
"""

from __future__ import annotations

import importlib.util
from typing import Any, Optional, Type

from sweep import engines, frameworks, models
from sweep.config import presets
from sweep.config.schema import check_fields
from sweep.config.sections.baseline import foreign_framework
from sweep.errors import ConfigError
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
    loss_of(cfg)
    framework.check_train(cfg)
    check_baseline_framework(cfg)
    return framework


def loss_of(cfg: Any) -> None:
    """A ``train.loss`` given as a dotted path imports (the built-in names need nothing), so a
    misspelt one is one line before launch, not a rank's traceback.

    Raises:
        ConfigError: ``train.loss=<path> does not import: <why>``."""
    from sweep.config import factories
    from sweep.config.sections.train import LOSSES

    loss = str(cfg.train.loss)
    if loss not in LOSSES:
        factories.load("train.loss", loss)


def check_baseline_framework(cfg: Any) -> Optional[Type[Framework]]:
    """With ``baseline.framework`` naming another framework than the job's
    (``sweep.config.sections.baseline.foreign_framework``), what its standalone copy needs:
    a preset of that name (``conf/framework/``), the framework installed, the model ported to
    it (``sweep.models.check``: e.g. ``model=transformer`` is torch's only) and every
    setting of the ``train``/``model`` sections its step runs (``Framework.check_train``:
    e.g. MindSpore's has no ``train.loss=cross_entropy``, ``compile`` or ``model.tie``). The
    optimizers need no check: both frameworks build ``adam``, ``adamw`` and ``sgd``
    (``torch.optim.AdamW``, MindSpore ``nn.AdamWeightDecay``). The clashes with other
    sections are ``sweep.config.schema.SweepConfig.check``'s.

    Returns:
        The other framework's class, or ``None`` without one.

    Raises:
        ConfigError: one line, ``baseline.framework=<name>: `` and what has no counterpart.
    """
    other = foreign_framework(cfg)
    if other is None:
        return None
    cls = frameworks.by_path(str(presets.framework(other).impl))
    if importlib.util.find_spec(cls.module) is None:
        raise ConfigError(f"baseline.framework={other}: {other} is not installed: pip install '.[{cls.extra}]' "
                          "(on CPU machines add -c constraints/cpu.txt)")
    try:
        models.check(cfg, other)
        cls.check_train(cfg)
    except ConfigError as exc:
        why = str(exc).split("; run it with framework=")[0]  # the job's own framework is the one that runs it
        raise ConfigError(f"baseline.framework={other}: {why}") from None
    return cls
