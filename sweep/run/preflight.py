"""The command line checked before Hydra runs it: a typo is an input error (exit 2, one
line naming the key and what is allowed), never a numerics failure (exit 1) or a page of
Hydra's text.

``check_command_line(argv)`` composes the job config the way Hydra will
(``hydra.compose`` on the package's tree), once with the first value of every swept
override and once more for each other value, so every value a multirun would compose is
tried (the values of each override in turn, not their product). Then it checks that the
run dir (``hydra.run.dir``, or ``hydra.sweep.dir`` with ``-m``) can be created: no part of
its path is a file and its nearest existing folder takes a new entry.

Hydra's own options (``--help``, ``--cfg``, ``-c``, ...) are left to Hydra. Overrides of
Hydra's own groups and keys (``hydra/sweeper=isolate``, ``hydra.sweeper.failing=[...]``)
are composed too, with the options Hydra's plugins offer (``hydra/sweeper=isolat``: no such
option, the options listed); and this project's sweepers (``hydra_plugins/sweep_*``) are
built from their settings, so a setting they refuse (an isolation given ``failing``
without ``passing``) is one line and exit 2 here, not Hydra's error and exit 1 later.
"""

from __future__ import annotations

import difflib
import re
import tempfile
from pathlib import Path
from typing import Any, List, Optional, Sequence

MULTIRUN_FLAGS = ("-m", "--multirun")


def _hydra_own(key: str) -> bool:
    return key.lstrip("+~").startswith(("hydra/", "hydra."))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split("\n")[0].split())
    cause = exc.__cause__
    if cause is not None:
        text += f" ({' '.join(str(cause).splitlines()[0].split())})" if str(cause).strip() else ""
    return text


def _options(conf_dir: Path, group: str) -> List[str]:
    """The options of config group ``group`` (``mp_policy``, ``hydra/sweeper``): those the
    config loader of the running ``initialize_config_dir`` sees (the tree, Hydra's own and
    its plugins'), else the tree's files."""
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        try:
            return sorted(set(GlobalHydra.instance().config_loader().get_group_options(group)))
        except Exception:  # a group the loader cannot list: the tree's files
            pass
    folder = conf_dir / group
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def _elsewhere(key: str, conf_dir: Path, base: Any) -> str:
    """A hint for a ``key`` the composed config lacks where another option of its group has it
    (``engine.options.skip_dtensor_dispatch`` under ``engine=torch_fsdp2``: an option of
    ``engine=hyper_parallel``), else ``""``. Reads the group's files in ``conf_dir`` (a file
    under ``@package _global_`` holds the whole key, others the key below the group)."""
    from omegaconf import OmegaConf

    group, _, rest = key.partition(".")
    folder = conf_dir / group
    if not rest or not folder.is_dir():
        return ""
    chosen = OmegaConf.select(base, f"{group}.name") if base is not None else None
    having = []
    for path in sorted(folder.glob("*.yaml")):
        text = path.read_text()
        node = OmegaConf.create(text)
        found = OmegaConf.select(node, key if "@package _global_" in text else rest, throw_on_missing=False)
        if found is not None and path.stem != chosen:
            having.append(f"{group}={path.stem}")
    if not having:
        return ""
    under = f" under {group}={chosen}" if chosen else ""
    return f"{under} ({' and '.join(having)} {'has' if len(having) == 1 else 'have'} it)"


def _explain(override: str, exc: BaseException, conf_dir: Path, base: Any) -> str:
    """One line for a failed composition with ``override`` (``key=value``)."""
    from hydra.errors import MissingConfigException
    from omegaconf import OmegaConf

    key, _, value = override.partition("=")
    key = key.lstrip("+~")
    if "Unexpected type for root: NoneType" in str(exc):  # (omegaconf's assertion) a key under a null node
        parent, _, leaf = key.rpartition(".")
        return (f"{override}: {parent} is null in this config (ablation=none sets hydra.sweeper.params: null), so no "
                f"key can be set under it; sweep the field itself ({leaf}=a,b) or drop ablation=none")
    if isinstance(exc, MissingConfigException) or "Could not find" in str(exc):
        options = _options(conf_dir, key.replace(".", "/"))
        if options:
            close = difflib.get_close_matches(value, options, n=1)
            hint = f" (did you mean {key}={close[0]}?)" if close else ""
            return f"{key}={value}: no such option; {key} is one of: {', '.join(options)}{hint}"
    if "not in" in str(exc.__cause__ or exc) or "Could not override" in str(exc) or "Could not append" in str(exc):
        parts = key.split(".")
        depth = len(parts) - 1  # the deepest part whose parent exists: a misspelt group (trian.batch_size) too
        while depth > 0 and not hasattr(OmegaConf.select(base, ".".join(parts[:depth])), "keys"):
            depth -= 1
        parent, leaf = ".".join(parts[:depth]), parts[depth]
        node = OmegaConf.select(base, parent) if parent else base
        names = [str(k) for k in node.keys()] if hasattr(node, "keys") else []
        close = difflib.get_close_matches(leaf, names, n=1)
        meant = ".".join(parts[:depth] + close[:1] + parts[depth + 1:])
        hint = f" (did you mean {meant}?)" if close else ""
        if not close:
            hint = _elsewhere(key, conf_dir, base)
        return f"{key}={value}: no such key{hint}"
    text = _one_line(exc)
    allowed = re.search(r"expected one of \[([^\]]*)\]", text)  # an enum field's values (a dtype, a mode)
    if allowed:
        close = difflib.get_close_matches(value, [v.strip() for v in allowed.group(1).split(",")], n=1)
        if close:
            return f"{override}: {text} (did you mean {key}={close[0]}?)"
    return f"{override}: {text}"


def _variants(parsed: Sequence[Any]) -> List[tuple]:
    """``(the override tried, the override list)`` pairs: every override at its first value
    (``None`` tried: any may fail), then each other value of each swept override, the rest
    at their first values."""
    def line(o: Any, value: str) -> str:
        return o.get_key_element() if o.is_delete() else f"{o.get_key_element()}={value}"

    values = [list(o.sweep_string_iterator()) if o.is_sweep_override() else  # as typed: false, not False
              [o.input_line.partition("=")[2] if o.input_line and "=" in o.input_line else o.get_value_element_as_str()]
              for o in parsed]
    first = [line(o, v[0]) for o, v in zip(parsed, values)]
    out: List[tuple] = [(None, first)]
    for i, (o, vs) in enumerate(zip(parsed, values)):
        out += [(line(o, v), first[:i] + [line(o, v)] + first[i + 1:]) for v in vs[1:]]
    return out


UNQUOTED = "~^<>!#&;`"  # characters Hydra's override grammar takes inside a value only when it is quoted


def _unparsed(overrides: Sequence[str], exc: BaseException) -> str:
    """One line for a command line Hydra's grammar does not parse: its error, and for the
    first override whose unquoted value holds a character the grammar takes only quoted
    (a git revision ``main~3``, a home dir, a ``<placeholder>`` copied from the docs), how
    to write it instead."""
    text = _one_line(exc)
    lists = [o for o in overrides if re.match(r"\[[^\"']*=", o.partition("=")[2])]
    if lists:  # an isolation's endpoints: each element is itself an override
        key, _, value = lists[0].partition("=")
        items = ",".join(f'"{item.strip()}"' for item in value.strip("[]").split(","))
        return f"{lists[0]}: {text}; each element of the list is an override, quoted: '{key}=[{items}]'"
    odd = [o for o in overrides if any(c in o.partition("=")[2] for c in UNQUOTED) and not re.search(r"[\"']", o)]
    if not odd:
        return text
    key, _, value = odd[0].partition("=")
    placeholder = re.search(r"<[^<>]*>", value)
    if placeholder:
        return (f"{odd[0]}: {placeholder.group(0)} is a placeholder from the docs: put the real value there "
                f"(e.g. the dir's name); a value that does hold < or > is quoted for Hydra's grammar: "
                f"'{key}=\"{value}\"'")
    found = [c for c in UNQUOTED if c in value]
    chars = "~ and ^" if set(found) <= set("~^") else " ".join(found)
    return text + f" (Hydra's grammar takes {chars} only quoted: '{key}=\"{value}\"')"


def _dir_error(key: str, path: str) -> Optional[str]:
    """Why ``path`` (a run or sweep dir) cannot be created, in one line, or ``None``."""
    target = Path(path)
    probe = target if target.is_absolute() else Path.cwd() / target
    for parent in [probe, *probe.parents]:
        if parent.exists():
            if not parent.is_dir():
                return f"{key}={path} cannot be created: {parent} is a file, not a folder"
            try:
                tempfile.TemporaryDirectory(dir=parent).cleanup()
            except OSError as exc:
                return f"{key}={path} cannot be created in {parent}: {exc.strerror or exc}"
            return None
    return None


def check_command_line(argv: Sequence[str], conf_dir: Path) -> Optional[str]:
    """Compose every value of the command line's overrides and check the run dir.

    Args:
        argv: the command line after the program name (``sys.argv[1:]``).
        conf_dir: the Hydra config tree (``sweep.config.CONF_DIR``).

    Returns:
        ``None`` when Hydra may run it, else one line: the override (``key=value``), why it
        fails and what is allowed (the options of a group, the closest key).
    """
    modes = [a for a in argv if a in (*MULTIRUN_FLAGS, "--cfg", "-c", "--info", "-i", "--run", "-r",
                                      "--shell-completion", "-sc")]
    if len(modes) > 1:  # Hydra's own rule, said in one line (its ValueError's traceback, exit 1, before)
        return (f"{' and '.join(modes)}: only one of --run, --multirun, --cfg, --info and --shell-completion at a "
                "time (--cfg job prints one job's config: drop -m, keep the overrides)")
    if any(a.startswith("-") and a not in MULTIRUN_FLAGS for a in argv):
        return None  # Hydra's own options: its help, --cfg, -c, ...
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from sweep.config.schema import register_configs

    register_configs()  # the schema the tree's defaults list names (base_config)
    multirun = any(a in MULTIRUN_FLAGS for a in argv)
    overrides = [a for a in argv if not a.startswith("-")]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as exc:
        return _unparsed(overrides, exc)
    if "hydra/sweeper=bisect" in overrides:  # its required fields, in one line before Hydra starts
        given = {o.get_key_element() for o in parsed}
        missing = [f"hydra.sweeper.{k}" for k in ("repo", "good", "bad") if f"hydra.sweeper.{k}" not in given]
        if missing:
            return ("hydra/sweeper=bisect needs " + ", ".join(missing)
                    + " (a git checkout, the revision whose job passes, the one whose job fails)")
    for o in (o for o in parsed if o.is_sweep_override()):  # a value given twice runs one job twice
        try:
            values = [str(v) for v in o.sweep_string_iterator()]
        except Exception:  # a sweep Hydra's basic sweeper cannot list (an interval): Hydra says so
            continue
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            return (f"{o.input_line}: {', '.join(twice)} given twice: the same job would run twice (repeat=N "
                    "repeats a job on purpose)")
    # Hydra's own keys do not compose into the job, but a search path adds config groups it may name
    ours = [o for o in parsed if not _hydra_own(o.get_key_element()) or o.get_key_element() == "hydra.searchpath"]
    dirs = {o.get_key_element(): o.get_value_element_as_str() for o in parsed
            if o.get_key_element() in ("hydra.run.dir", "hydra.sweep.dir") and not o.is_sweep_override()}
    if GlobalHydra.instance().is_initialized():
        return None  # inside a running Hydra app (tests): nothing to check from here
    with initialize_config_dir(str(conf_dir), version_base="1.3"):
        base = None
        for tried, lines in _variants(ours):
            try:
                cfg = compose("config", overrides=lines, return_hydra_config=True)
            except (HydraException, OmegaConfBaseException) as exc:
                culprit = tried or _first_failing(compose, lines)
                if base is None:  # the config the others make (a preset's keys: runner.args of experiment=...)
                    try:
                        base = compose("config", overrides=[line for line in lines if line != culprit],
                                       return_hydra_config=True)
                    except (HydraException, OmegaConfBaseException):
                        base = compose("config", return_hydra_config=True)
                return _explain(culprit, exc, conf_dir, base)
            if base is None:
                base = cfg
        theirs = [o for o in parsed if _hydra_own(o.get_key_element()) and o.get_key_element() != "hydra.searchpath"]
        if theirs:  # Hydra's own groups and keys, with every override at its first value
            lines = _variants(parsed)[0][1]
            try:
                cfg = compose("config", overrides=lines, return_hydra_config=True)
            except (HydraException, OmegaConfBaseException, AssertionError) as exc:  # (a key under a null node)
                own = [line for line in lines if _hydra_own(line.partition("=")[0])]
                rest = [line for line in lines if line not in own]  # each of Hydra's keys beside the job's overrides
                culprit = next((line for line in own if _fails(compose, [*rest, line])), None) or \
                    _first_failing(compose, own)
                return _explain(culprit, exc, conf_dir, base)
            error = _sweeper_error(cfg.hydra.sweeper) or \
                _isolation_error(cfg.hydra.sweeper, compose, _variants(ours)[0][1], conf_dir, base)
            if error is not None:
                return error
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    path = dirs.get(key)
    if path is None or "${" in path:
        try:
            path = str(OmegaConf.select(base, key))
        except OmegaConfBaseException:
            return None
    return _dir_error(key, path)


def _sweeper_error(node: Any) -> Optional[str]:
    """What this project's sweeper (``hydra.sweeper._target_`` under ``hydra_plugins.sweep_``)
    refuses in its settings, in one line, by building it from them (its constructor checks
    them and nothing else); ``None`` for a sweeper that takes them, or another project's."""
    from omegaconf import OmegaConf

    target = str(node.get("_target_", "")) if node is not None else ""
    if not target.startswith("hydra_plugins.sweep_"):
        return None
    from sweep.config.factories import locate

    try:
        sweeper = locate(target, "class")
        settings = OmegaConf.to_container(node, resolve=True)
    except Exception:  # it cannot be built from here: Hydra will say why
        return None
    settings.pop("_target_", None)
    try:
        sweeper(**settings)
    except (ValueError, TypeError) as exc:
        return " ".join(str(exc).split())
    return None


def _isolation_error(node: Any, compose: Any, lines: List[str], conf_dir: Path, base: Any) -> Optional[str]:
    """What an isolation's ``failing`` and ``passing`` override lists (``hydra/sweeper=isolate``)
    hold that no job could run, in one line: an override that does not compose beside the command
    line's (``lines``: its overrides at their first values), named with its list and the closest
    key or option (:func:`_explain`), overrides that compose one by one but not together (a list
    as its endpoint runs it), or two lists that differ in nothing. ``None`` otherwise. Each list
    is composed once; one at a time only when it fails."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    if node is None or not str(node.get("_target_", "")).startswith("hydra_plugins.sweep_"):
        return None
    sides = {side: [str(o) for o in (node.get(side) or [])] for side in ("failing", "passing")}
    if not any(sides.values()):
        return None
    for side, overrides in sides.items():
        try:  # a list as its endpoint job runs it: one composition, one at a time only to name the culprit
            compose("config", overrides=[*lines, *overrides])
        except (HydraException, OmegaConfBaseException) as whole:
            for override in overrides:
                try:
                    compose("config", overrides=[*lines, override])
                except (HydraException, OmegaConfBaseException) as exc:
                    return f"hydra.sweeper.{side}: {_explain(override, exc, conf_dir, base)}"
            return f"hydra.sweeper.{side}: {' '.join(overrides)}: {whole}".splitlines()[0]
    if sorted(sides["failing"]) == sorted(sides["passing"]):
        return "hydra.sweeper.failing and hydra.sweeper.passing are the same overrides: there is nothing to isolate"
    return None


def _fails(compose: Any, lines: List[str]) -> bool:
    """Whether composing ``lines`` together fails."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        compose("config", overrides=lines, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException, AssertionError):
        return True
    return False


def _first_failing(compose: Any, lines: List[str]) -> str:
    """The first of ``lines`` whose composition alone fails (the one to name)."""
    return next((line for line in lines if _fails(compose, [line])), " ".join(lines))
