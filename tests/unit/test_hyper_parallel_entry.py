"""hyper-parallel's entry point, chosen by where ``fully_shard`` is (not by the text of its
``__init__.py``): stand-in packages for each layout, read without importing
(``locate_fully_shard``, ``mindspore_api``) and imported (``resolve_fully_shard``, ``import_api``)."""

import sys
import types

import pytest

from sweep.engines import hyper_parallel as hp

TOP = "hyper_parallel.fully_shard"
API = "hyper_parallel.core.fully_shard.api.fully_shard"
PACKAGE = "hyper_parallel.core.fully_shard.fully_shard"

INIT = (
    "def init_device_mesh(**kwargs):\n    return kwargs\n\n\n"
    "def hsdp(cell, **kwargs):\n    return cell\n"
)
FUNCTION = "def fully_shard(module, **kwargs):\n    return module\n"
POLICY = "class MixedPrecisionPolicy:\n    def __init__(self, **kwargs):\n        self.kwargs = kwargs\n"
PLATFORMS = {
    "hyper_parallel/platform/__init__.py": "",
    "hyper_parallel/platform/torch/__init__.py": "",
    "hyper_parallel/platform/torch/fully_shard/__init__.py": "",
    "hyper_parallel/platform/mindspore/__init__.py": "",
}
MINDSPORE_FULLY_SHARD = {"hyper_parallel/platform/mindspore/fully_shard/__init__.py": ""}
CORE_API = {
    "hyper_parallel/core/__init__.py": "",
    "hyper_parallel/core/fully_shard/__init__.py": '"""no export here"""\n',
    "hyper_parallel/core/fully_shard/api.py": FUNCTION,
    "hyper_parallel/core/fully_shard/utils.py": POLICY,
}

LAYOUTS = {
    # later releases: exported at the top level
    "top_level": {
        **PLATFORMS, **MINDSPORE_FULLY_SHARD, **CORE_API,
        "hyper_parallel/__init__.py": INIT + "from hyper_parallel.core.fully_shard.api import fully_shard\n",
    },
    # the issue's: only in core.fully_shard.api, the top level exports none
    "core_api_only": {**PLATFORMS, **MINDSPORE_FULLY_SHARD, **CORE_API, "hyper_parallel/__init__.py": INIT},
    # the core.fully_shard package exports it (from a private module), no api module
    "core_package": {
        **PLATFORMS, **MINDSPORE_FULLY_SHARD,
        "hyper_parallel/__init__.py": INIT,
        "hyper_parallel/core/__init__.py": "",
        "hyper_parallel/core/fully_shard/__init__.py": "from ._impl import *\nfrom .utils import MixedPrecisionPolicy\n",
        "hyper_parallel/core/fully_shard/_impl.py": FUNCTION,
        "hyper_parallel/core/fully_shard/utils.py": POLICY,
    },
    # fdd0a80's: fully_shard for torch (core.fully_shard.api, exported by the package), no
    # platform/mindspore/fully_shard
    "torch_only": {
        **PLATFORMS, **CORE_API,
        "hyper_parallel/__init__.py": INIT,
        "hyper_parallel/core/fully_shard/__init__.py": "from hyper_parallel.core.fully_shard.api import fully_shard\n",
    },
    # no fully_shard anywhere
    "hsdp_only": {**PLATFORMS, "hyper_parallel/__init__.py": INIT},
}

EXPECTED = {  # layout: (torch's entry point, MindSpore's entry point)
    "top_level": (TOP, TOP),
    "core_api_only": (API, API),
    "core_package": (PACKAGE, PACKAGE),
    "torch_only": (API, None),
    "hsdp_only": (None, None),
}


@pytest.fixture
def install(tmp_path, monkeypatch):
    """Returns ``install(files)``: writes a stand-in hyper-parallel under ``tmp_path``, first
    on ``sys.path``, as the installed package; the real one's modules are hidden meanwhile and
    the stand-in's forgotten afterwards."""
    for name in [m for m in sys.modules if m == "hyper_parallel" or m.startswith("hyper_parallel.")]:
        monkeypatch.delitem(sys.modules, name)

    def write(files):
        site = tmp_path / "site"
        for rel, text in files.items():
            path = site / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.setattr(hp, "package_dir", lambda: site / "hyper_parallel")
        return site / "hyper_parallel"

    yield write
    for name in [m for m in sys.modules if m == "hyper_parallel" or m.startswith("hyper_parallel.")]:
        del sys.modules[name]


def _loaded():
    return {m for m in sys.modules if m.startswith("hyper_parallel")}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_entry_point_is_found_without_importing(install, layout):
    install(LAYOUTS[layout])
    torch_path, mindspore_path = EXPECTED[layout]
    assert hp.locate_fully_shard("torch")[0] == torch_path
    assert hp.locate_fully_shard("mindspore")[0] == mindspore_path
    assert hp.mindspore_api() == ("fully_shard" if mindspore_path else "hsdp")
    assert not _loaded(), "the job process imported hyper-parallel"


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_importing_resolves_the_same_entry_point(install, layout):
    install(LAYOUTS[layout])
    torch_path, mindspore_path = EXPECTED[layout]
    for platform, expected in (("torch", torch_path), ("mindspore", mindspore_path)):
        function, path, why = hp.resolve_fully_shard(platform)
        assert path == expected, why
        if expected is None:
            assert function is None and why
        else:
            assert callable(function) and function.__name__ == "fully_shard" and why == ""


def test_top_level_exporting_none_is_fully_shard_not_hsdp(install):
    """The issue's case: the old text search found no ``fully_shard`` in ``__init__.py``."""
    pkg = install(LAYOUTS["core_api_only"])
    assert "fully_shard" not in (pkg / "__init__.py").read_text()
    assert hp.mindspore_api() == "fully_shard"


def test_mindspore_without_its_platform_module_falls_back_to_hsdp(install):
    install(LAYOUTS["torch_only"])
    path, why = hp.locate_fully_shard("mindspore")
    assert path is None and "hyper_parallel.platform.mindspore.fully_shard" in why
    function, path, why = hp.resolve_fully_shard("mindspore")
    assert function is None and path is None and "hyper_parallel.platform.mindspore.fully_shard" in why
    assert "hyper_parallel.core.fully_shard.api" not in sys.modules, "torch's fully_shard imported on MindSpore"


def test_hsdp_only_says_why_for_each_candidate(install):
    install(LAYOUTS["hsdp_only"])
    path, why = hp.locate_fully_shard("torch")
    assert path is None and all(candidate in why for candidate in hp.FULLY_SHARD_ENTRY_POINTS)
    assert hp.mindspore_api() == "hsdp"


def test_a_sub_package_named_fully_shard_is_not_the_function(install):
    """``from hyper_parallel.core import fully_shard`` binds the package, not the function:
    the top level is skipped and the package's own export is the entry point."""
    files = dict(LAYOUTS["torch_only"], **MINDSPORE_FULLY_SHARD)
    files["hyper_parallel/__init__.py"] = INIT + "from hyper_parallel.core import fully_shard\n"
    install(files)
    path, why = hp.locate_fully_shard("mindspore")
    assert path == API
    found, why = hp._binds_function("hyper_parallel", "fully_shard")
    assert not found and why == ("hyper_parallel imports fully_shard from hyper_parallel.core "
                                 "(hyper_parallel.core.fully_shard is a module, not the function)")
    _, path, why = hp.resolve_fully_shard("mindspore")
    assert path == API and why == ""
    assert isinstance(sys.modules["hyper_parallel"].fully_shard, types.ModuleType)  # what the top level held


def test_relative_and_guarded_imports_are_followed(install):
    files = dict(LAYOUTS["hsdp_only"], **MINDSPORE_FULLY_SHARD)
    files.update({
        "hyper_parallel/__init__.py": INIT + "try:\n    from .core import fully_shard\nexcept ImportError:\n    pass\n",
        "hyper_parallel/core/__init__.py": "from .impl import shard as fully_shard\n",
        "hyper_parallel/core/impl.py": "def shard(module, **kwargs):\n    return module\n",
    })
    install(files)
    assert hp.locate_fully_shard("mindspore") == (TOP, "")
    assert hp.resolve_fully_shard("mindspore")[1] == TOP


def test_a_name_only_in_text_is_not_an_entry_point(install):
    """``fully_shard`` in a comment or ``__all__`` binds nothing (the old search took it)."""
    files = dict(LAYOUTS["hsdp_only"], **MINDSPORE_FULLY_SHARD)
    files["hyper_parallel/__init__.py"] = INIT + "# fully_shard: coming later\n__all__ = ['hsdp', 'fully_shard']\n"
    install(files)
    assert hp.locate_fully_shard("mindspore")[0] is None and hp.mindspore_api() == "hsdp"


@pytest.mark.parametrize("layout, entry_point", [("core_api_only", API), ("torch_only", "hyper_parallel.hsdp")])
def test_import_api_on_mindspore_names_the_entry_point(install, monkeypatch, layout, entry_point):
    install(LAYOUTS[layout])
    monkeypatch.setenv("HYPER_PARALLEL_PLATFORM", "mindspore")
    api = hp.import_api("mindspore")
    assert api.entry_point == entry_point
    if entry_point == "hyper_parallel.hsdp":
        assert api.fully_shard is None and api.MixedPrecisionPolicy is None and callable(api.hsdp)
        assert "hyper_parallel.platform.mindspore.fully_shard" in api.fully_shard_why_not
    else:
        assert api.fully_shard.__module__ == "hyper_parallel.core.fully_shard.api" and api.fully_shard_why_not == ""
        assert api.MixedPrecisionPolicy.__module__ == "hyper_parallel.core.fully_shard.utils"


def test_import_api_on_torch_needs_fully_shard(install, monkeypatch):
    install(LAYOUTS["hsdp_only"])
    monkeypatch.setenv("HYPER_PARALLEL_PLATFORM", "torch")
    with pytest.raises(ImportError, match=r"fully_shard for torch cannot be imported: hyper_parallel\.fully_shard"):
        hp.import_api("torch")


def test_import_api_on_torch_takes_the_first_candidate(install, monkeypatch):
    install(LAYOUTS["top_level"])
    monkeypatch.setenv("HYPER_PARALLEL_PLATFORM", "torch")
    api = hp.import_api("torch")
    assert api.entry_point == TOP and api.fully_shard.__name__ == "fully_shard"


def test_a_mindspore_groups_ranks_are_read_from_its_name():
    from types import SimpleNamespace

    from sweep.engines.hyper_parallel import _group_ranks

    assert _group_ranks(SimpleNamespace(group_name="4-0-1-2-3")) == [0, 1, 2, 3]
    assert _group_ranks("2-1-3") == [1, 3]
    assert _group_ranks("hsdp_sharded_dp_group_0_1") == [0, 1]
    assert _group_ranks("hccl_world_group") == [] and _group_ranks(None) == []
