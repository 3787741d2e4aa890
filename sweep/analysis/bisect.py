"""Bisection over a library's commits: the first commit whose probe fails where its parent's
passes, as ``git bisect`` finds it (``git help bisect``), with skips.

Pure: the commits are a list, oldest first, between a known good one (before the list, not
in it) and a known bad one (the list's last); a probe of a commit is a verdict, ``pass``,
``fail`` or ``skip`` (it could not be exported, installed, imported or judged: ``git bisect
skip``). :class:`Bisection` proposes the next commit to probe and takes its verdict; with
no skips it needs at most ``ceil(log2(n))`` probes for ``n`` commits (each probe halves the
commits still in doubt, as ``git bisect`` does). A skipped commit is stepped over: the
next probe is the untried commit of the range nearest to the middle; when every commit left
in doubt is skipped, the first failing commit is one of them and the bisection says which.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

PASS, FAIL, SKIP = "pass", "fail", "skip"
VERDICTS = (PASS, FAIL, SKIP)


class Bisection:
    """The state of one bisection over ``commits`` (oldest first; the last is the bad end,
    assumed to fail; the good end, assumed to pass, is their parent, not listed).

    ``lo``: the index of the newest commit known to pass (-1: the good end); ``hi``: the
    index of the oldest known to fail (``len - 1`` at first: the bad end, unprobed).

    Raises:
        ValueError: no commits.
    """

    def __init__(self, commits: Sequence[str]) -> None:
        if not commits:
            raise ValueError("no commits between good and bad: good must be an ancestor of bad")
        self.commits = list(commits)
        self.lo, self.hi = -1, len(self.commits) - 1
        self.verdicts: Dict[int, str] = {}

    @property
    def bound(self) -> int:
        """``ceil(log2(n))``: the most probes the bisection needs without skips."""
        return math.ceil(math.log2(len(self.commits))) if len(self.commits) > 1 else 0

    def doubt(self) -> List[int]:
        """The indices still in doubt: after ``lo``, up to and including ``hi``."""
        return list(range(self.lo + 1, self.hi + 1))

    def next_probe(self) -> Optional[int]:
        """The index to probe next, or ``None`` when done (one commit left in doubt, or
        every one left skipped). The untried commit before ``hi`` that splits the commits
        still in doubt, skipped ones left out, most evenly (the earlier of two): without
        skips the middle, ``git bisect``'s choice; a skipped commit does not pull the next
        probe off the middle of those that can decide."""
        if self.hi - self.lo <= 1:
            return None
        deciding = [i for i in range(self.lo + 1, self.hi + 1) if self.verdicts.get(i) != SKIP]
        open_ = [i for i in deciding if i < self.hi and i not in self.verdicts]
        if not open_:
            return None

        def imbalance(c: int) -> int:
            below = sum(1 for i in deciding if i <= c)
            return abs(below - (len(deciding) - below))

        return min(open_, key=lambda c: (imbalance(c), c))

    def record(self, index: int, verdict: str) -> None:
        """Take the verdict of the probe of ``commits[index]``.

        Raises:
            ValueError: an unknown verdict, or an index outside the commits in doubt.
        """
        if verdict not in VERDICTS:
            raise ValueError(f"verdict {verdict!r}; allowed: {', '.join(VERDICTS)}")
        if not self.lo < index <= self.hi:
            raise ValueError(f"commit {index} is not in doubt (after {self.lo}, up to {self.hi})")
        self.verdicts[index] = verdict
        if verdict == PASS:
            self.lo = index
        elif verdict == FAIL:
            self.hi = index

    def result(self) -> Dict[str, Any]:
        """``{"first_bad": index or None, "candidates": [indices], "parent": index of the
        first bad's parent (-1: the good end), "proven": both ends of the step probed}``:
        ``first_bad`` when one commit is left in doubt, else ``None`` with the candidates
        (every one skipped). ``proven``: the first bad's own probe failed (not only assumed,
        as the bad end is) and its parent's passed (or is the good end)."""
        doubt = self.doubt()
        if len(doubt) == 1:
            first = doubt[0]
            return {"first_bad": first, "candidates": doubt, "parent": first - 1,
                    "proven": self.verdicts.get(first) == FAIL}
        return {"first_bad": None, "candidates": doubt, "parent": self.lo, "proven": False}
