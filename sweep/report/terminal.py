"""What the terminal shows fits 120 columns: prose wrapped, tables left as tabulate drew them.

:func:`fit` wraps every prose line longer than :data:`WIDTH` (the headline, the details, a
list item, a job's line), keeping its indentation and a hanging indent after it; a line with
a run of two or more spaces inside is a table row (tabulate's ``simple`` and ``github``
formats align columns with spaces) and is left whole, as is a single word longer than the
width (a path). ``summary.md`` and the other files keep their long lines: a Markdown
paragraph is one line.
"""

from __future__ import annotations

import re
import textwrap

WIDTH = 120  # columns of terminal text (issue 38)
TABLE_GAP = re.compile(r"\S {2,}\S")  # two columns of a table row, or a line's own alignment


def fit(text: str, width: int = WIDTH, hang: int = 2) -> str:
    """``text`` with each prose line over ``width`` columns wrapped (``hang`` more spaces
    of indentation on its continuation lines); table rows and blank lines unchanged."""
    out = []
    for line in text.split("\n"):
        if len(line) <= width or TABLE_GAP.search(line.strip()):
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out.append(textwrap.fill(line.strip(), width=width, initial_indent=indent,
                                 subsequent_indent=indent + " " * hang, break_long_words=False,
                                 break_on_hyphens=False))
    return "\n".join(out)


def fit_job_line(line: str, width: int = WIDTH) -> str:
    """A job's line (``[   fail] #3 key=value ...  max|diff|=...  (1.2s)``) in ``width``
    columns: its parts (separated by two spaces: the overrides, the numbers, the time) kept
    whole where they fit, each continuation line indented under the overrides; a part
    longer than a line is wrapped at its spaces."""
    if len(line) <= width:
        return line
    indent = " " * 10
    status, rest = line[:10], line[10:]  # "[   fail] " keeps its own spaces
    lines: list = []
    current = status
    for part in rest.split("  "):
        joined = current + part if current in (status, indent) else f"{current}  {part}"
        if len(joined) <= width:
            current = joined
            continue
        if current not in (status, indent):
            lines.append(current)
            current = indent
        wrapped = textwrap.wrap(part, width=width, initial_indent=current, subsequent_indent=indent,
                                break_long_words=False, break_on_hyphens=False)
        lines.extend(wrapped[:-1])
        current = wrapped[-1] if wrapped else current
    lines.append(current)
    return "\n".join(lines)
