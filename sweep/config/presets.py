"""The presets of the Hydra tree (``conf/``) as plain configs, for code that needs one
besides the job's own: the other framework's, where the standalone copy trains in it
(``baseline.framework``: :func:`with_framework`)."""

from __future__ import annotations

from typing import Any, List

from omegaconf import DictConfig, OmegaConf, open_dict

from sweep.config import CONF_DIR
from sweep.errors import ConfigError


def names(group: str) -> List[str]:
    """The options of config group ``group`` (``conf/<group>/*.yaml``), sorted."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def framework(name: str) -> DictConfig:
    """The ``framework`` section of preset ``conf/framework/<name>.yaml`` (its ``name``,
    ``impl``, launchers, ``grad_api``, ``device_map``, ``env``, ``device_env``).

    Raises:
        ConfigError: no such preset, naming the ones there are.
    """
    path = CONF_DIR / "framework" / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"baseline.framework={name}: no framework preset of that name; "
                          f"allowed: {', '.join(names('framework'))}")
    return OmegaConf.load(path)


def with_framework(cfg: Any, name: str) -> DictConfig:
    """A copy of the job config ``cfg`` (a ``DictConfig`` or a plain dict) whose ``framework`` section
    is preset ``name``'s (:func:`framework`), every other value the job's: the config the
    standalone copy trains under when ``baseline.framework`` names another framework
    (``baseline.framework`` stays set, so its ranks know the weights come from the other one).

    Raises:
        ConfigError: see :func:`framework`.
    """
    plain = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True) if isinstance(cfg, DictConfig) else cfg
    copy = OmegaConf.create(plain)  # (a copy: the job's config is left as it is)
    with open_dict(copy):
        copy.framework = framework(name)
    return copy
