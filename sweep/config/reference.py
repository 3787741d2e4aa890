"""The config reference, rendered from the schema: ``python -m sweep.config.reference``.

One table per section of :class:`sweep.config.schema.SweepConfig` (the top-level keys
first, then each section in schema order), one row per field: its dotted key, its type
(an enum's values), its value in the default job (``python -m sweep`` composed from
``conf/config.yaml``), its roles (what it affects, :func:`sweep.config.schema.affects`)
and its help text (the field's ``doc``). A section's class docstring introduces its
table; a section that a config group fills (``framework=...``) lists the group's options
from the ``conf/`` tree. The docs site renders this into ``docs/config-reference.md`` at
every build (``docs/hooks.py``), so the reference cannot drift from the code.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import typing
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from sweep.config import CONF_DIR, schema

__all__ = ["Field", "Section", "sections", "leaves", "undocumented", "default_job", "render", "MARKER"]

# The line of docs/config-reference.md that the docs build replaces with render().
MARKER = "<!-- config-reference: generated from sweep/config/schema.py by docs/hooks.py -->"

ROLE_WORDS = {
    schema.BASELINE: "baseline",
    schema.DISTRIBUTED: "distributed",
    schema.VERDICT: "verdict",
    schema.LAUNCH: "launch",
    schema.POLICY_BASELINE: "policy_baseline",
    schema.WORKLOAD: "workload",
}


@dataclass
class Field:
    """One leaf of the schema: ``key`` is its dotted path."""

    key: str
    type: Any
    roles: frozenset
    doc: Optional[str]
    field: dataclasses.Field


@dataclass
class Section:
    """A dataclass of the schema (``prefix`` ``""`` for the top level) and its own leaves."""

    prefix: str
    cls: type
    fields: List[Field]


def _hints(cls: type) -> Dict[str, Any]:
    # each class's annotations resolve in its own module (a section's: sweep.config.sections.*)
    return typing.get_type_hints(cls)


def _section_of(tp: Any) -> Optional[type]:
    return tp if dataclasses.is_dataclass(tp) and isinstance(tp, type) else None


def sections(cls: type = schema.SweepConfig, prefix: str = "") -> List[Section]:
    """The schema's sections, in schema order: ``cls``'s own leaves first, then each
    sub-section (and its sub-sections) where ``cls`` declares it."""
    hints = _hints(cls)
    own: List[Field] = []
    subs: List[Section] = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        sub = _section_of(tp)
        if sub is not None and "affects" not in f.metadata:
            subs.extend(sections(sub, prefix + f.name + "."))
        else:
            own.append(Field(prefix + f.name, tp, f.metadata.get("affects", frozenset()), f.metadata.get("doc"), f))
    return [Section(prefix.rstrip("."), cls, own)] + subs


def leaves() -> List[Field]:
    """Every leaf field of the schema, in the order of :func:`sections`."""
    return [f for section in sections() for f in section.fields]


def undocumented(cls: type = schema.SweepConfig) -> List[str]:
    """Dotted keys of the leaves of ``cls`` that have no ``doc``."""
    return [f.key for section in sections(cls) for f in section.fields if not (f.doc or "").strip()]


def _type(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        return f"{_type(inner[0])} or `null`"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " / ".join(f"`{m.value}`" for m in tp)
    if origin in (list, List):
        return f"list[{_plain(args[0])}]"
    if origin in (dict, Dict):
        return f"dict[{_plain(args[0])}, {_plain(args[1])}]"
    return f"`{_plain(tp)}`"


def _plain(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return "any"
    if origin in (list, List):
        return f"list[{_plain(args[0])}]"
    if origin in (dict, Dict):
        return f"dict[{_plain(args[0])}, {_plain(args[1])}]"
    return getattr(tp, "__name__", str(tp))


def _value(value: Any) -> str:
    """A config value as it is written on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return str(value.value if isinstance(value, enum.Enum) else value)


def default_job() -> tuple:
    """``(config, choices)`` of the default job: the plain resolved config that
    ``python -m sweep`` runs with no override, and the option Hydra chose per config group."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    schema.register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = compose(config_name="config", return_hydra_config=True)
    choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    return schema.to_container(cfg), choices


def group_options(group: str) -> List[str]:
    """The options of a config group in the ``conf/`` tree (its YAML files' names)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def _lookup(config: Dict[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        node = node[part]
    return node


def _markdown(text: str) -> str:
    """A docstring's reST-ish markup as Markdown: ````x```` -> `x`, ``:class:`X``` -> `X`."""
    text = re.sub(r":(?:class|func|meth|data|mod):`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _cell(text: str) -> str:
    return _markdown(text).replace("|", "\\|").replace("\n", " ")


def _paragraphs(doc: Optional[str]) -> str:
    return _markdown(inspect.cleandoc(doc)) if doc else ""


def render(default: Optional[tuple] = None) -> str:
    """The reference as Markdown: a table of the config groups, then one section per
    schema section. ``default``: :func:`default_job`'s answer (composed when not given)."""
    missing = undocumented()
    if missing:
        raise ValueError(f"fields without a doc (sweep.config.schema.affects(..., doc=...)): {', '.join(missing)}")
    config, choices = default if default is not None else default_job()
    groups = sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra")
    out = [
        "## Config groups",
        "",
        "Each group is a folder of presets under `sweep/config/conf/`; `GROUP=OPTION` picks one.",
        "",
        "| group | options | default |",
        "|---|---|---|",
    ]
    for group in groups:
        chosen = choices.get(group)
        options = ", ".join(f"`{o}`" for o in group_options(group))
        out.append(f"| `{group}` | {options} | `{_value(chosen)}` |")
    out.append("")
    for section in sections():
        title = f"`{section.prefix}`" if section.prefix else "Top level"
        out += [f"## {title}", ""]
        intro = _paragraphs(section.cls.__doc__)
        if intro:
            out += [intro, ""]
        if section.prefix in groups:
            out += [f"Filled by the config group `{section.prefix}` (`{section.prefix}=OPTION`; options: "
                    + ", ".join(f"`{o}`" for o in group_options(section.prefix))
                    + f"; default `{_value(choices.get(section.prefix))}`); any key can be overridden too.", ""]
        out += ["| key | type | default | affects | doc |", "|---|---|---|---|---|"]
        for f in section.fields:
            roles = ", ".join(ROLE_WORDS[r] for r in schema.ROLES if r in f.roles) or "no number"
            value = _value(_lookup(config, f.key))
            out.append(f"| `{f.key}` | {_cell(_type(f.type))} | `{_cell(value)}` | {roles} | {_cell(f.doc or '')} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(render())
