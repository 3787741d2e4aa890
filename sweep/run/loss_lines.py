"""The losses a ``runner=command`` job's command reported: from its loss file or its output.

:func:`entries` reads them (``runner.parse``, ``sweep.config.schema.ParseConfig``): the
JSON-lines file ``$SWEEP_LOSS_FILE`` (``sweep.lossfile``) when it holds any entry, else
every line of the command's log and of the ``runner.parse.files`` matched against the
``standalone`` and ``distributed`` regexes. :func:`sequences` turns the entries into one
loss list per copy and rank, checked against the config's ``steps``; what does not fit
raises :class:`LossError` with the line that was expected.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from sweep.lossfile import COPIES, read_loss_file

Entry = Dict[str, Any]  # {"step": int, "loss": float, "copy": str, "rank": int or None}


class LossError(Exception):
    """The command's losses cannot be read or do not fit the config (one line)."""


@dataclass
class Source:
    """Where the entries came from: ``"loss file"`` or ``"output"``, and the files read."""

    kind: str
    files: List[str]


def matched_files(job_dir: Path, patterns: Sequence[str], log: Path) -> List[Path]:
    """``log`` (if it exists) and the files ``patterns`` (``runner.parse.files``: globs,
    relative to ``job_dir`` unless absolute, ``**`` recursive) match, each once, in order."""
    found = [log] if log.exists() else []
    for pattern in patterns:
        full = pattern if Path(pattern).is_absolute() else str(job_dir / pattern)
        found += [Path(p) for p in sorted(glob.glob(full, recursive=True)) if Path(p).is_file()]
    return list(dict.fromkeys(found))


NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)", re.IGNORECASE)
INTERLEAVED = ("several ranks may write one stream at once (lines glued or split): run torchrun with --tee 3 (each "
               "line whole, prefixed with its rank), or give each rank a file of its own (torchrun --log-dir with "
               "--redirects 3, msrun --log_dir) and name them in runner.parse.files")


def parse_text(text: str, patterns: Dict[str, Optional[str]], rank: Optional[int] = None) -> List[Entry]:
    """The loss entries in ``text``: every match (searched again past each loss's number,
    so two lines glued into one by ranks sharing a stream both count) of each copy's regex (``patterns``: copy ->
    regex or ``None``; one line may report both copies) on every line; a match without a
    ``rank`` group takes ``rank``. The loss is the number its group starts with
    (``0.93[r1]`` of a glued line is ``0.93``); a group that starts with none raises
    :class:`LossError`."""
    compiled = [(copy, re.compile(p)) for copy, p in patterns.items() if p]
    out: List[Entry] = []
    for line in text.splitlines():
        for copy, regex in compiled:
            pos = 0
            while (found := regex.search(line, pos)) is not None:
                groups = found.groupdict()
                number = NUMBER.match(groups.get("loss") or "")
                if number is None:
                    raise LossError(f"not a loss in {line.strip()[:160]!r}: {groups.get('loss')!r}")
                line_rank = groups.get("rank")
                out.append({"step": int(groups["step"]), "loss": float(number.group(0)), "copy": copy,
                            "rank": int(line_rank) if line_rank is not None else rank})  # (a line may hold both)
                # on past the number, not past the match: a greedy group may have eaten a glued record
                pos = max(found.start() + 1, found.start("loss") + len(number.group(0)))
    return out


def entries(job_dir: Path, loss_file: Path, log: Path, parse: Any) -> Tuple[List[Entry], Source]:
    """Every loss the command reported: ``loss_file``'s entries if it holds any, else the
    regexes' matches in ``log`` (the command's output) and ``parse.files``.

    Raises:
        LossError: an unreadable loss-file line, a loss that is not a number.
    """
    try:
        found = read_loss_file(loss_file)
    except ValueError as exc:
        raise LossError(str(exc)) from None
    if found:
        return found, Source("loss file", [str(loss_file)])
    patterns = {"standalone": parse.standalone, "distributed": parse.distributed}
    by_path = re.compile(parse.rank_from_path) if parse.rank_from_path else None
    out: List[Entry] = []
    files = matched_files(job_dir, list(parse.files or []), log)
    for path in files:
        hit = by_path.search(str(path)) if by_path else None
        out += parse_text(path.read_text(errors="replace"), patterns, int(hit.group("rank")) if hit else None)
    return out, Source("output", [str(p) for p in files])


def expected_line(parse: Any, copy: str) -> str:
    """What the job looked for, for an error message."""
    regex = parse[copy]
    where = "sweep.log_loss(step, loss" + (", copy='standalone')" if copy == "standalone" else ")")
    return f"{where} into $SWEEP_LOSS_FILE" + (f", or lines matching runner.parse.{copy}: {regex}" if regex else "")


def sequences(found: List[Entry], copy: str, steps: int) -> Dict[Optional[int], List[float]]:
    """Each rank's loss list of ``copy`` (rank ``None``: lines that named no rank), in
    step order, each exactly ``steps`` long and without a gap (counted from the first
    step reported: 0 or 1). The same step reported twice by one rank (or by lines without
    a rank) counts once when the values are equal. Lines without a rank beside ranked ones are
    left out (a launcher's echo of its workers' logs: ``msrun --join=True``).

    Raises:
        LossError: no entry of ``copy``; a step reported twice with different values; a
            gap, or another number of steps than ``steps``.
    """
    per_rank: Dict[Optional[int], Dict[int, float]] = {}
    # lines without a rank beside ranked ones are a copy of the ranks' (msrun --join=True echoes every worker's
    # log into the command's output): the ranked ones are the ranks, whatever the unranked ones hold
    ranked = any(e["copy"] == copy and e["rank"] is not None for e in found)
    for e in found:
        if e["copy"] != copy or (ranked and e["rank"] is None):
            continue
        steps_of = per_rank.setdefault(e["rank"], {})
        old = steps_of.get(e["step"])
        if old is not None and not (old == e["loss"] or (old != old and e["loss"] != e["loss"])):
            who = f"rank {e['rank']}" if e["rank"] is not None else "lines that name no rank"
            raise LossError(f"the {copy} loss of step {e['step']} is reported twice by {who}, {old!r} and "
                            f"{e['loss']!r}: give each rank's lines a rank (a `rank` group, runner.parse.rank_from_path "
                            "or sweep.log_loss's rank), or report each step once")
        steps_of[e["step"]] = e["loss"]
    if not per_rank:
        raise LossError(f"no {copy} loss reported")
    out: Dict[Optional[int], List[float]] = {}
    for rank, steps_of in sorted(per_rank.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        got = sorted(steps_of)
        first, last = got[0], got[-1]
        who = f"rank {rank}" if rank is not None else "the lines that name no rank"
        if first not in (0, 1) or len(got) != last - first + 1 or len(got) != steps:
            gaps = sorted(set(range(first, last + 1)) - set(got))
            # glued or split lines lose a step here and there, or the first or the last one; a run that
            # stopped early (a crash) loses every step after its last: no interleaving hint for that
            holes = first > 1 or bool(gaps) or len(got) == steps - 1
            raise LossError(
                f"{who} reported {copy} losses for {len(got)} steps ({first}-{last}"
                + (f", missing {', '.join(map(str, gaps[:5]))}{'...' if len(gaps) > 5 else ''}" if gaps else "")
                + f"); steps={steps} expects steps 0-{steps - 1}" + (f" ({INTERLEAVED}?)" if holes else ""))
        out[rank] = [steps_of[s] for s in got]
    return out


def as_ranks(per_rank: Dict[Optional[int], List[float]]) -> Dict[int, List[float]]:
    """``sequences``' result with the unranked lines as rank 0."""
    return {0 if rank is None else rank: seq for rank, seq in per_rank.items()}


__all__ = ["COPIES", "LossError", "Source", "entries", "sequences", "as_ranks", "expected_line", "parse_text"]
