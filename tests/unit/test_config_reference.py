"""The config reference is generated from the schema: every field has a doc, and the
rendered page names every field, with its type, its default and its roles."""

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from sweep.config import reference, schema

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def page():
    return reference.render()


def _schema_leaves(cls=schema.SweepConfig, prefix=""):
    """Every leaf's dotted key, walked independently of ``reference.sections``."""
    for f in dataclasses.fields(cls):
        section = schema._SECTIONS.get(f.type) if isinstance(f.type, str) else None
        if section is not None and "affects" not in f.metadata:
            yield from _schema_leaves(section, prefix + f.name + ".")
        else:
            yield prefix + f.name, f


def test_every_field_has_a_doc():
    missing = [key for key, f in _schema_leaves() if not (f.metadata.get("doc") or "").strip()]
    assert missing == [], f"give these fields a doc (sweep.config.schema.affects(..., doc=...)): {missing}"


def test_the_reference_walks_every_field_once():
    keys = [f.key for f in reference.leaves()]
    assert len(keys) == len(set(keys)) and sorted(keys) == sorted(key for key, _ in _schema_leaves())


def test_the_page_names_every_field_with_its_doc_and_roles(page):
    rows = {line.split(" | ")[0].strip("| `"): line for line in page.splitlines() if line.startswith("| `")}
    for key, f in _schema_leaves():
        assert key in rows, f"{key} is missing from the generated reference"
        row = rows[key]
        assert reference._cell(f.metadata["doc"]) in row
        roles = [reference.ROLE_WORDS[r] for r in schema.ROLES if r in f.metadata["affects"]]
        assert (", ".join(roles) or "no number") in row


def test_defaults_are_the_default_jobs(page):
    rows = {line.split(" | ")[0].strip("| `"): line.split(" | ") for line in page.splitlines()
            if line.startswith("| `")}
    assert rows["steps"][2] == "`1000`"
    assert rows["framework.launcher"][2] == "`torchrun`"       # from the framework preset, not the schema
    assert rows["mesh.mesh_shape"][2] == "`[2]`"
    assert rows["execution.timeout_s"][2] == "`null`"
    assert rows["mp_policy.param_dtype"][1] == "`float32` / `bfloat16` / `float16` or `null`"


def test_every_config_group_and_its_options_are_listed(page):
    groups = sorted(p.name for p in (ROOT / "sweep/config/conf").iterdir() if p.is_dir() and p.name != "hydra")
    for group in groups:
        line = next((l for l in page.splitlines() if l.startswith(f"| `{group}` |")), None)
        assert line is not None, group
        for option in (ROOT / "sweep/config/conf" / group).glob("*.yaml"):
            assert f"`{option.stem}`" in line


def test_a_field_without_a_doc_is_caught(monkeypatch):
    @dataclasses.dataclass
    class Extended(schema.SweepConfig):
        new_factor: int = schema.affects(schema.DISTRIBUTED, default=3)

    assert reference.undocumented(Extended) == ["new_factor"]
    assert reference.undocumented() == []
    monkeypatch.setattr(reference, "undocumented", lambda: ["new_factor"])
    with pytest.raises(ValueError, match="fields without a doc .*: new_factor"):
        reference.render()
    assert schema.affects(doc="  two\n   lines ", default=1).metadata["doc"] == "two lines"


def test_the_docs_build_renders_it_into_the_page(page):
    """``docs/config-reference.md`` holds the marker, not a hand-written copy, and the
    MkDocs hook (named in ``mkdocs.yml``) replaces it with the generated tables."""
    source = (ROOT / "docs/config-reference.md").read_text()
    assert reference.MARKER in source and "| `steps` |" not in source
    assert "docs/hooks.py" in (ROOT / "mkdocs.yml").read_text()
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs/hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)

    class File:
        src_uri = "config-reference.md"

    class Page:
        file = File()

    rendered = hooks.on_page_markdown(source, Page(), None, None)
    assert reference.MARKER not in rendered and page in rendered
    File.src_uri = "index.md"
    assert hooks.on_page_markdown(source, Page(), None, None) == source
