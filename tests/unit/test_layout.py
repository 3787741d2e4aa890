"""The house's layout: which wing of ``sweep`` may import which.

Every import in the package is read from the source (``ast``: also the lazy ones inside
functions) and held against :data:`MAY_IMPORT`. A new import that breaks a rule fails
here, naming the file, the line and the import. The rules make the flow one way: the
config at the bottom, pure analysis and the report beside it, models and engines, the
rank code, the processes that start it, the frameworks, and the job on top.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Dict, FrozenSet, List

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sweep"

# The contracts every wing shares: files at the top of the package (and the package itself,
# ``import sweep``, for its ``__version__``).
CONTRACTS = frozenset({"errors", "io", "records", "layout", "lossfile"})
# Files at the top that are no contract: the public API, the entry point, the old paths' hook.
FACE = frozenset({"__init__", "__main__"})

# wing -> the other wings it may import (the contracts always)
MAY_IMPORT: Dict[str, FrozenSet[str]] = {
    "contracts": frozenset(),
    "config": frozenset(),
    "analysis": frozenset({"config"}),
    "findings": frozenset({"config", "analysis"}),
    "models": frozenset({"config"}),
    "engines": frozenset({"config", "models"}),
    "train": frozenset({"config", "models", "engines", "analysis"}),
    "launch": frozenset({"config", "train"}),
    "frameworks": frozenset({"config", "launch"}),
    "report": frozenset({"config", "analysis", "findings"}),
    "trackers": frozenset({"config", "analysis", "findings", "report"}),
    "run": frozenset({"config", "analysis", "findings", "models", "engines", "launch", "frameworks", "report"}),
    "hydra_plugins": frozenset({"config", "analysis", "findings", "report", "launch"}),
    "face": frozenset({"config", "analysis", "findings", "models", "engines", "train", "launch", "frameworks",
                       "report", "trackers", "run"}),
}
WINGS = frozenset(MAY_IMPORT) - {"contracts", "hydra_plugins", "face"}


def wing_of(module: str) -> str:
    """The wing of a dotted module name (``sweep.run.job`` -> ``run``)."""
    parts = module.split(".")
    if parts[0] == "hydra_plugins":
        return "hydra_plugins"
    if len(parts) == 1 or parts[1] in CONTRACTS:
        return "contracts"
    if parts[1] in FACE:
        return "face"
    return parts[1]


def imported_modules(tree: ast.AST) -> List[tuple]:
    """``(line, dotted name)`` of every ``sweep`` import in ``tree``; ``from sweep import x``
    names ``sweep.x``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "sweep":
                found += [(node.lineno, f"sweep.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
    return [(line, name) for line, name in found if name.split(".")[0] == "sweep"]


def violations(path: Path, source: str) -> List[str]:
    """The imports in ``source`` (the file at ``path``, relative to the repository) that
    its wing may not make, one line each: file, line, import, and what the wing may import."""
    module = ".".join(path.with_suffix("").parts)
    wing = wing_of(module)
    allowed = MAY_IMPORT[wing] | {wing, "contracts"}
    out = []
    for line, name in imported_modules(ast.parse(source)):
        target = wing_of(name)
        if target not in allowed:
            may = ", ".join(sorted(MAY_IMPORT[wing])) or "nothing"
            out.append(f"{path}:{line}: imports {name} (wing {target}); wing {wing} may import: {may} "
                       "and the contracts (sweep.errors, io, records, layout)")
    return out


def package_files() -> List[Path]:
    return sorted(p.relative_to(ROOT) for p in list(PACKAGE.rglob("*.py")) + list((ROOT / "hydra_plugins").rglob("*.py")))


def test_every_import_follows_the_wing_rules():
    found = [v for path in package_files() for v in violations(path, (ROOT / path).read_text())]
    assert found == [], "imports that break the layout:\n" + "\n".join(found)


@pytest.mark.parametrize("path, added, named", [
    ("sweep/analysis/compare.py", "from sweep.run import job", "imports sweep.run (wing run)"),
    ("sweep/report/summary.py", "def f():\n    from sweep.train import torch_step", "imports sweep.train (wing train)"),
    ("sweep/config/schema.py", "def f():\n    from sweep import frameworks", "imports sweep.frameworks (wing frameworks)"),
    ("sweep/train/torch_rank.py", "from sweep.frameworks import by_path", "imports sweep.frameworks (wing frameworks)"),
    ("sweep/records.py", "import sweep.models", "imports sweep.models (wing models)"),
])
def test_a_forbidden_import_is_named_with_its_file(path, added, named):
    source = (ROOT / path).read_text() + "\n\n" + added + "\n"
    lines = len(source.splitlines())  # the added import is the last line
    found = violations(Path(path), source)
    assert len(found) == 1 and found[0].startswith(f"{path}:{lines}: {named}"), found


def test_the_top_of_the_package_holds_only_contracts_and_its_face():
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert top <= CONTRACTS | FACE, f"a module at the top of sweep/ belongs in a wing: {sorted(top - CONTRACTS - FACE)}"
    dirs = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert dirs == WINGS, f"subpackages {sorted(dirs)} != the wings the rules know {sorted(WINGS)}"


@pytest.mark.parametrize("wing", sorted(WINGS))
def test_every_wing_says_what_lives_there_and_what_it_may_import(wing):
    doc = ast.get_docstring(ast.parse((PACKAGE / wing / "__init__.py").read_text()))
    assert doc, f"sweep/{wing}/__init__.py has no docstring"
    assert doc.splitlines()[0].endswith("."), f"sweep/{wing}: the first line is one sentence"
    assert "May import:" in doc, f"sweep/{wing}: the docstring says what it may import"


# Names of the rules that turn a job's evidence into a finding (sweep.analysis.evidence,
# judging, dtypes): the report formats what they return and the job records it; neither
# defines one of its own.
EVIDENCE_RULE = re.compile(r"onset|first_step|real_step|first_diff|drift_class|parting|rounding|worst_rank|replica_"
                           r"|tensor_order|over_ranks|implied_dtype|tolerance_ratio|verdict_reason|evidence", re.I)


def defined_names(tree: ast.Module) -> List[str]:
    """The functions, classes and module-level names ``tree`` defines (nested functions too)."""
    names = [n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT) for p in (PACKAGE / "report").glob("*.py"))
                         + [Path("sweep/run/job.py"), Path("sweep/run/judge.py")], ids=str)
def test_the_report_and_the_job_define_no_rule_of_the_evidence(path):
    rules = [name for name in defined_names(ast.parse((ROOT / path).read_text())) if EVIDENCE_RULE.search(name)]
    assert rules == [], f"{path} defines {rules}: a rule that decides what evidence means lives in sweep/analysis/"


def test_the_evidence_rules_live_in_the_analysis_wing():
    found = {name for module in ("evidence", "judging", "dtypes", "compare")
             for name in defined_names(ast.parse((PACKAGE / "analysis" / f"{module}.py").read_text()))}
    assert {"real_onset", "first_diff_over_ranks", "first_tensor_order", "first_tensor_over_ranks",
            "first_module_over_ranks", "place", "drift_class", "parting_step", "rounding_only", "worst_rank",
            "replica_check", "implied_dtypes", "tolerance_ratio"} <= found
    assert all(EVIDENCE_RULE.search(name) for name in ("real_onset", "drift_class", "first_tensor_order",
                                                       "first_module_over_ranks", "worst_rank", "tolerance_ratio"))
