"""``bisect.md`` and the bisection's answer on the terminal, from ``bisect.json``
(``hydra_plugins.sweep_bisect``): every probe (its commit, subject, verdict, jobs and,
for a skip, the reason), then the first failing commit with the proof.

``python -m sweep.report.bisect_report DIR`` re-renders it from ``DIR/bisect.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, List

from tabulate import tabulate

# The last bisection of this process (its bisect.json state), for the exit status
# (``sweep.__main__``: a bisection that decided nothing exits 2, as input that cannot be judged)
STATE: Dict[str, Any] = {}
UNDECIDED = ("error", "undecided", "bad_passes")


def _commit(c: Dict[str, Any]) -> str:
    return f"{c['sha'][:10]} {c['subject']!r}"


def verdict(state: Dict[str, Any]) -> str:
    """The answer in one or two sentences: the first failing commit with its subject and
    the probes that prove it, the candidates when skips leave several, or why the
    bisection could not run."""
    if state.get("status") == "error":
        return f"Bisection not run: {state.get('reason')}"
    if state.get("status") == "bad_passes":
        return (f"Nothing to bisect: hydra.sweeper.bad={state['bad']}, given as failing, passes when probed "
                f"(jobs {', '.join(map(str, state.get('bad_jobs') or []))}); every probe passed. Give a bad that "
                "fails (a longer run, a tighter tolerance), or check the job's overrides.")
    found = state.get("result") or {}
    n, probes, bound = state.get("n_commits"), state.get("n_probes", len(state.get("probes") or [])), state.get("bound")
    counted = f"{probes} probe{'s' if probes != 1 else ''} over {n} commit{'s' if n != 1 else ''} (ceil(log2 n) = {bound})"
    if found.get("first_bad") is None:
        names = ", ".join(_commit(state["commits"][i]) for i in found.get("candidates") or [])
        return f"Not decided: the first failing commit is one of {names}; every one left was skipped. {counted}."
    first, parent = state["first_bad"], state.get("parent") or {}
    by = {p["sha"]: p for p in state.get("probes") or []}
    fail = by.get(first["sha"])
    ok = by.get(parent.get("sha"))
    ok = ok if ok and ok["verdict"] == "pass" else None
    proof = (f"its probe fails (jobs {', '.join(map(str, fail['jobs']))})" if fail and fail["verdict"] == "fail"
             else f"its probe was skipped ({fail['reason']}): named as hydra.sweeper.bad={state['bad']}, given as "
                  "failing" if fail else f"not probed: it is hydra.sweeper.bad={state['bad']}, given as failing")
    before = (f"its parent {_commit(parent)} passes (jobs {', '.join(map(str, ok['jobs']))})" if ok
              else f"its parent is hydra.sweeper.good={state['good']}, given as passing" if found.get("parent") == -1
              else f"its parent {_commit(parent)} passes")
    return f"First failing commit: {_commit(first)}: {proof}; {before}. {counted}."


def render(state: Dict[str, Any]) -> str:
    """``bisect.md``: title, the answer, the probes table, the skipped commits' reasons."""
    lines: List[str] = [f"# Bisection of {state.get('repo')}: {state.get('good')}..{state.get('bad')}", "",
                        verdict(state), ""]
    probes = state.get("probes") or []
    if probes:
        rows = [[p["probe"], p["sha"][:10], p["subject"], p["verdict"], ", ".join(map(str, p.get("jobs") or [])) or "-"]
                for p in probes]
        lines += [tabulate(rows, headers=["probe", "commit", "subject", "verdict", "jobs"], tablefmt="github"), ""]
        skipped = [p for p in probes if p["verdict"] == "skip"]
        if skipped:
            lines += ["Skipped (as `git bisect skip`):", ""]
            lines += [f"- {p['sha'][:10]} {p['subject']!r}: {p['reason']}" for p in skipped] + [""]
    if probes:
        how = (f"install `{state['install']}` into a venv per commit (runtime.python)" if state.get("install")
               else "its tree exported (git archive) onto runtime.pythonpath")
        lines += [f"Each probe ran the command line's job at one commit, {how}"
                  + (f", path `{state['path']}`" if state.get("path") else "") + "."]
    return "\n".join(lines) + "\n"


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sweep.report.bisect_report", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="the sweep dir of a bisection (holds bisect.json)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    path = args.sweep_dir / "bisect.json"
    if not path.exists():  # (as isolate_report: one line, exit 2)
        print(f"error: no bisect.json in {args.sweep_dir} (not a bisection's sweep dir: hydra/sweeper=bisect)",
              file=sys.stderr)
        return 2
    print(render(json.loads(path.read_text())), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
