"""The sentence of a finding: its kind's template filled with its values.

A template is text with fields and optional parts (``sweep.findings``' kinds hold them):

- ``{name}`` is the value ``name``; ``{name:.3g}`` formats it (``format()``'s spec); a list
  is joined with ``", "``, ``{name|and}`` as a series (``"a and b"``, ``"a, b and c"``), ``{name|or}`` alike,
  ``{name|/}`` with ``"/"`` (any other text after ``|`` joins too: ``{name|; }``); ``{n|s}`` is
  ``"s"`` unless ``n`` is 1 (a plural ending) and ``{n|?es:}`` is ``"es"`` where ``n`` is 1, ``""``
  otherwise (a verb's ending: "passes", "pass"), ``n`` a number or a list (its length);
  ``{name|lower}`` lower-cases a text's first letter; ``{flag|if}`` prints nothing and keeps its
  optional part only where ``flag`` is true.
- ``[...]`` is an optional part: it is kept only where every field inside has a value (not
  ``None``, ``""``, ``False`` or an empty list); parts nest. ``\\[`` and ``\\]`` are brackets.

:func:`render` fills one; it raises on a field the values lack, so a template and its rule
cannot drift apart unseen (``tests/unit/test_findings.py`` renders every kind's example).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Tuple

_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?:\|([^}:]*))?(?::([^}]*))?\}")
_JOINS = {"and": " and ", "or": " or ", "/": "/", "": ", "}


def _empty(value: Any) -> bool:
    return value is None or value is False or (isinstance(value, (str, list, tuple, dict)) and not value)


def _field(match: "re.Match[str]", values: Dict[str, Any]) -> Tuple[str, bool]:
    """One field's text and whether it has a value.

    Raises:
        KeyError: ``values`` lacks the field."""
    name, pipe, spec = match.group(1), match.group(2), match.group(3)
    if name not in values:
        raise KeyError(f"the template's field {name!r} has no value (values: {', '.join(sorted(values))})")
    value = values[name]
    count = len(value) if isinstance(value, (list, tuple)) else value
    if pipe == "s":
        return ("" if count == 1 else "s"), not _empty(value)
    if pipe and pipe.startswith("?"):  # {n|?one:many}: the field's ':' splits them (as a format spec would)
        one, many = pipe[1:], spec or ""
        return (one if count == 1 else many), not _empty(value)
    if pipe == "if":
        return "", not _empty(value)
    if _empty(value):
        return "", False
    if isinstance(value, (list, tuple)):
        items = [format(v, spec) if spec else str(v) for v in value]
        if pipe in ("and", "or") and len(items) > 2:  # a series: "a, b and c"
            return ", ".join(items[:-1]) + _JOINS[pipe] + items[-1], True
        return _JOINS.get(pipe or "", pipe or ", ").join(items), True
    text = format(value, spec) if spec else str(value)
    if pipe == "lower" and text:
        text = text[0].lower() + text[1:]
    return text, True


def _parts(template: str) -> List[Any]:
    """The template as a tree: text runs, and lists for optional parts.

    Raises:
        ValueError: unbalanced brackets."""
    stack: List[List[Any]] = [[]]
    i, text = 0, ""
    while i < len(template):
        c = template[i]
        if c == "\\" and i + 1 < len(template) and template[i + 1] in "[]":
            text += template[i + 1]
            i += 2
            continue
        if c in "[]":
            if text:
                stack[-1].append(text)
                text = ""
            if c == "[":
                stack.append([])
            else:
                if len(stack) == 1:
                    raise ValueError(f"unbalanced ']' in template {template!r}")
                part = stack.pop()
                stack[-1].append(part)
        else:
            text += c
        i += 1
    if len(stack) != 1:
        raise ValueError(f"unbalanced '[' in template {template!r}")
    if text:
        stack[0].append(text)
    return stack[0]


def _fill(parts: List[Any], values: Dict[str, Any]) -> Tuple[str, bool]:
    out, complete = "", True
    for part in parts:
        if isinstance(part, list):
            text, ok = _fill(part, values)
            out += text if ok else ""
            continue
        pos = 0
        for match in _FIELD.finditer(part):
            text, ok = _field(match, values)
            complete = complete and ok
            out += part[pos:match.start()] + text
            pos = match.end()
        out += part[pos:]
    return out, complete


def render(template: str, values: Dict[str, Any]) -> str:
    """``template`` filled with ``values`` (module docstring).

    A value that ends its own sentence before the template's full stop (a reason quoted whole,
    ``"... another FSDP group."`` then ``.``) gives one stop, not two.

    Raises:
        KeyError: a field without a value; ValueError: unbalanced brackets."""
    text = _fill(_parts(template), values)[0]
    return text[:-1] if template.endswith(".") and text.endswith("..") else text
