"""The config wing: the dataclass schema and its field roles, enums, calling a factory a config names, and the Hydra tree (``conf/``).

May import: the contracts at the top (``sweep.errors``, ``sweep.io``, ``sweep.records``, ``sweep.layout``) only; no framework, engine or model.
Modules: ``sections`` (one module per section: its dataclass, enums, field-local checks, each field's role and
doc), ``roles`` (the field roles, ``affects``), ``schema`` (the composition: the job's config, the checks across
sections, the field lists derived from the roles), ``enums``, ``factories``,
``reference`` (the config reference rendered from the schema: ``python -m sweep.config.reference``),
``presets`` (a ``conf/`` preset as a plain config: another framework's, for ``baseline.framework``).
"""

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent / "conf"  # the Hydra config tree, shipped inside the package
