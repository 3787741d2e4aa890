"""README.md and the docs site (``docs/``) name only what a user's clone has: every
repository path exists, every dotted module is there, every ``python -m sweep`` command
composes, every report flag is the report's; the README stays a guide (at most 250
lines) and the seed report's reference values agree with the tests that assert them."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest


ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# A repository path: one of the clone's top-level folders (or files) and what follows it,
# not preceded by a word, a dot, a slash or a dash (``/shared/sweep/...``, ``hydra.sweep.dir``
# and ``SWEEP_DIR/...`` are not repository paths).
TOP = r"(?:sweep|tests|conf|docs|benchmarks|hydra_plugins|constraints|examples|\.ci)"
PATH = re.compile(rf"(?<![\w./\-$<{{])({TOP}/[\w./<>*\-]*|README\.md|mkdocs\.yml|pyproject\.toml)")
# A dotted module of this repository, with up to two attributes after it.
DOTTED = re.compile(r"(?<![\w./\-])((?:sweep|tests|hydra_plugins)(?:\.\w+)+)")
FILE_SUFFIXES = {"py", "md", "yaml", "yml", "json", "txt", "toml", "csv", "html", "png", "xml", "db", "log"}


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _named(pattern: re.Pattern) -> Iterator[Tuple[Path, str]]:
    for page in PAGES:
        for match in pattern.finditer(_text(page)):
            yield page, match.group(1)


def _exists(name: str) -> bool:
    """A path relative to the repository; ``<placeholder>`` and ``*`` segments stand for
    any name: the folder before them must exist."""
    name = name.rstrip(".,:;)")
    parts = name.split("/")
    for i, part in enumerate(parts):
        if "<" in part or "*" in part:
            return (ROOT.joinpath(*parts[:i])).is_dir()
    return (ROOT / name).exists()


def test_every_repository_path_named_exists():
    missing = sorted({f"{page.relative_to(ROOT)}: {name}" for page, name in _named(PATH) if not _exists(name)})
    assert missing == [], "paths named in README/docs that this clone lacks:\n" + "\n".join(missing)


def _module_file(parts: List[str]) -> Tuple[Path, int]:
    """The file of the longest importable prefix of ``parts`` and that prefix's length."""
    for i in range(len(parts), 0, -1):
        dotted = ".".join(parts[:i])
        base = ROOT.joinpath(*dotted.split("."))
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py"), i
        if base.is_dir():
            init = base / "__init__.py"
            return (init if init.is_file() else base), i
    return ROOT, 0


def test_every_dotted_module_named_exists():
    wrong = set()
    for page, name in _named(DOTTED):
        parts = name.rstrip(".").split(".")
        if parts[-1] in FILE_SUFFIXES:
            continue  # a file name (a user's sweep.py), not a module
        path, found = _module_file(parts)
        rest = parts[found:]
        if found < 1 or len(rest) > 2:
            wrong.add(f"{page.relative_to(ROOT)}: {name}")
        elif rest and (path.is_dir() or not re.search(rf"\b{re.escape(rest[0])}\b", path.read_text())):
            wrong.add(f"{page.relative_to(ROOT)}: {name} ({rest[0]} is not in {path.relative_to(ROOT)})")
    assert sorted(wrong) == [], "modules named in README/docs that do not exist:\n" + "\n".join(sorted(wrong))


def _commands() -> Iterator[Tuple[Path, str]]:
    """Every command line of README/docs: the lines of fenced code blocks (joined over a
    trailing backslash, comments dropped) and inline code that starts with a command."""
    for page in PAGES:
        text = _text(page)
        for block in re.findall(r"^ *```(?:bash|sh)?\n(.*?)^ *```", text, flags=re.S | re.M):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                yield page, line.strip()
        for span in re.findall(r"`([^`\n]+)`", text):
            yield page, span.strip()


def _argv(line: str, program: str) -> List[str] | None:
    """The arguments after ``program`` on ``line`` (``None`` if ``line`` is no such
    command); placeholders (``<...>``) and a trailing comment dropped."""
    try:
        words = shlex.split(re.sub(r"<[^<>]*>", "\0", line), comments=True)
    except ValueError:
        return None
    for i in range(len(words)):
        if words[i:i + len(program.split())] == program.split():
            return [w for w in words[i + len(program.split()):] if "\0" not in w and w != "..."]
    return None


def _sweep_commands() -> List[Tuple[str, Tuple[str, ...]]]:
    found = {}
    for page, line in _commands():
        for program in ("python -m sweep", "sweep"):
            argv = _argv(line, program)
            if argv is not None and (program != "sweep" or line.startswith("sweep ")):
                found.setdefault(tuple(argv), f"{page.relative_to(ROOT)}: {line}")
                break
    return sorted((where, argv) for argv, where in found.items())


def test_commands_are_found():
    commands = [argv for _, argv in _sweep_commands()]
    assert ("-m", "hydra/sweeper=isolate", "experiment=seed_hypotheses") in commands
    assert ("experiment=seed_issue", "device=cpu") in commands
    assert len(commands) > 30


def test_every_sweep_command_composes(tmp_path):
    """Each ``python -m sweep ...`` / ``sweep ...`` command of README/docs passes the
    check the command itself runs before Hydra starts (``sweep.run.preflight``: every
    override composes, every swept value included)."""
    from sweep.config import CONF_DIR
    from sweep.run.preflight import check_command_line

    from sweep.findings import kind
    from sweep.findings.notes_catalog import note_kind

    failing = []
    for where, argv in _sweep_commands():
        if argv[:1] == ("explain",) or argv[:1] == ["explain"]:  # a finding's page: every code named exists
            for code in [a for a in argv[1:] if a != "CODE"]:
                try:
                    note_kind(code) if code.startswith("N") else kind(code)  # a job's note has a page too
                except KeyError as exc:
                    failing.append(f"{where}\n    {exc}")
            continue
        args = [a for a in argv if not a.startswith(("hydra.run.dir=", "hydra.sweep.dir="))]
        args += [f"hydra.run.dir={tmp_path}/run", f"hydra.sweep.dir={tmp_path}/multirun"]
        error = check_command_line(args, CONF_DIR)
        if error is not None:
            failing.append(f"{where}\n    {error}")
    assert failing == [], "commands in README/docs that do not compose:\n" + "\n".join(failing)


def test_a_command_documented_with_its_job_count_plans_that_many_jobs():
    """``python -m sweep -m ...  # N jobs: ...`` in README/docs: the multirun Hydra plans
    from that command line (its grid's params and the overrides) has N jobs (issue 52:
    a preset documented as 2 jobs ran 64)."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from sweep.config import CONF_DIR
    from sweep.config.schema import register_configs

    register_configs()
    parser = OverridesParser.create()
    checked, wrong = 0, []
    for page, line in _commands():
        said = re.search(r"#[^#]*?\b(\d+) jobs\b", line)
        argv = _argv(line, "python -m sweep")
        if said is None or argv is None or "-m" not in argv:
            continue
        overrides = [a for a in argv if a != "-m"]
        first = [f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}" if o.is_sweep_override() else line_
                 for o, line_ in zip(parser.parse_overrides(overrides), overrides)]
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):  # the grid a group override brings
            params = compose("config", overrides=first, return_hydra_config=True).hydra.sweeper.params or {}
        arguments = parser.parse_overrides([f"{k}={v}" for k, v in params.items()] + overrides)
        planned = sum(len(batch) for batch in BasicSweeper.split_arguments(arguments, None))
        checked += 1
        if planned != int(said.group(1)):
            wrong.append(f"{page.relative_to(ROOT)}: {line} (plans {planned})")
    assert checked >= 5 and wrong == [], "\n".join(wrong)


def test_the_bisect_recipe_runs_against_the_history_its_documented_command_builds(tmp_path):
    """docs/since-when.md's bisect example: the command that builds the history is there and
    runs, the recipe's revisions resolve in what it built, and every commit id the page
    shows is a commit of that history with the subject shown next to it (issue 52: the ids
    came from a history only a test helper built, with dates of its own)."""
    import subprocess
    import sys

    text = _text(ROOT / "docs/since-when.md")
    build = [line for page, line in _commands() if page.name == "since-when.md"
             and line.startswith("python examples/toy_history.py")]
    recipe = [_argv(line, "python -m sweep") for page, line in _commands() if page.name == "since-when.md"
              and "hydra.sweeper.repo=/tmp/toyhist" in line]
    assert len(build) == 1 and len(recipe) == 1 and recipe[0] is not None
    where = shlex.split(build[0], comments=True)[2]
    repo = tmp_path / "toyhist"
    proc = subprocess.run([sys.executable, *shlex.split(build[0], comments=True)[1:2], str(repo)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr

    def git(*args):
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()

    settings = dict(a.split("=", 1) for a in recipe[0] if a.startswith("hydra.sweeper."))
    assert settings["hydra.sweeper.repo"] == where
    for key in ("hydra.sweeper.good", "hydra.sweeper.bad"):
        git("rev-parse", "--verify", settings[key] + "^{commit}")
    example = text[text.index(build[0].split("#")[0].strip()):text.index("hydra.sweeper.install=")]
    ids = set(re.findall(r"\b[0-9a-f]{10}\b", example))
    subjects = re.findall(r"\b([0-9a-f]{10}) '([^']+)'", example) + re.findall(
        r"\| ([0-9a-f]{10}) \| ([^|]+?) +\|", example)
    assert len(ids) >= 6 and len(subjects) >= 6, example
    for sha in ids:
        git("rev-parse", "--verify", sha + "^{commit}")  # a commit of the history the command built
    for sha, subject in subjects:
        assert git("log", "-1", "--format=%s", sha) == subject, (sha, subject)
def test_the_cluster_page_gives_the_commands_the_slurm_tests_run():
    """docs/cluster.md's test-cluster recipes are the commands tests/integration/test_slurm.py
    runs against the SLURM test cluster (``DOCUMENTED``), word for word."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from tests.integration import test_slurm

    documented = {argv for where, argv in _sweep_commands() if where.startswith("docs/cluster.md")}
    missing = [" ".join(argv) for argv in test_slurm.DOCUMENTED if tuple(argv) not in documented]
    assert missing == [], "commands test_slurm.py runs that docs/cluster.md does not give:\n" + "\n".join(missing)


@pytest.mark.parametrize("program, source", [
    ("python -m sweep.report", "sweep/report/summary.py"),
    ("python -m sweep.report.isolate_report", "sweep/report/isolate_report.py"),
])
def test_every_report_flag_named_exists(program, source):
    flags = set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", (ROOT / source).read_text()))
    used, runs = set(), 0
    for _, line in _commands():
        argv = _argv(line, program)
        if argv is not None:
            runs += 1
            used |= {a for a in argv if a.startswith("--")}
    assert runs and used <= flags, f"{program}: {sorted(used - flags)} not in {source}"


def test_the_readme_is_a_guide():
    lines = _text(ROOT / "README.md").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; the reference belongs in docs/"


def test_the_readme_and_getting_started_give_the_same_two_commands():
    def setup(page: str) -> List[str]:
        text = _text(ROOT / page)
        return [line for line in text.splitlines() if line.startswith("python3 -m venv")]

    readme = setup("README.md")
    assert len(readme) == 2 and readme == setup("docs/getting-started.md")
    assert "-e '.[torch,mindspore,test]' --config-settings editable_mode=compat" in _text(ROOT / ".ci/run")


def test_the_suites_size_is_counted_by_a_command_not_written_down():
    """Issue 52: getting-started gave five different test counts, each true once. The pages
    give the command that counts the tests (pytest's own collection), never a count."""
    command = "python -m pytest --collect-only -q | tail -1"
    for page in ("README.md", "docs/getting-started.md"):
        text = " ".join(_text(ROOT / page).split())
        assert command in text, page
        assert re.findall(r"\b\d[\d,]* tests\b", text) == [], page


def test_nothing_outside_the_clone_and_no_deprecated_setting():
    for page in PAGES:
        text = _text(page)
        assert not re.search(r"\.\./shared|shared/(notes|seed)", text), page
        assert "weights.copy=" not in text and "weights.copy: " not in text, page


def _table(md: str) -> dict:
    return {int(step): float(loss) for step, loss in re.findall(r"^\| (\d+) \| ([\d.]+) \|$", md, flags=re.M)}


def test_the_reference_values_are_the_ones_the_tests_assert():
    """``docs/seed/reference_values.md`` and the MindSpore job test's ``REFERENCE`` agree
    (read from its source: the test module needs MindSpore to import)."""
    doc = _text(ROOT / "docs/seed/reference_values.md")
    tree = ast.parse((ROOT / "tests/integration/test_mindspore_jobs.py").read_text())
    consts = {t.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
              for t in node.targets if isinstance(t, ast.Name) and t.id in ("REFERENCE", "REFERENCE_MEAN")}
    assert _table(doc) == consts["REFERENCE"]
    assert f"Mean over the 1000 steps: {consts['REFERENCE_MEAN']!r}" in " ".join(doc.split())
