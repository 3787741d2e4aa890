"""What a job says when its processes fail: its time limit, its logs' tails, the cause in one line.

Shared by the built-in job (``sweep.run.job``) and ``runner=command`` (``sweep.run.command``).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Dict, List, Optional

from omegaconf import DictConfig

from sweep.config.schema import world_size
from sweep.layout import LAUNCHER_LOG, JobDir

TAIL_LINES = 15


def timeout_s(cfg: DictConfig) -> float:
    """``execution.timeout_s`` or ``base_timeout_s + per_step_s * steps * world_size`` seconds."""
    if cfg.execution.timeout_s is not None:
        return float(cfg.execution.timeout_s)
    return float(cfg.execution.base_timeout_s + cfg.execution.per_step_s * cfg.steps * world_size(cfg))


def log_tails(job_dir: Path, lines: int = TAIL_LINES, launcher_log: Optional[Path] = None) -> Dict[str, str]:
    """Last ``lines`` lines of every log of the job, by file name; ``launcher_log`` is the
    shared launch's log when the job ran in one (``sweep.run.pool``), and the worker logs
    beside it (a rank that died before it took the job) come as ``pool <name>``."""
    tails = {}
    named = [(p.name, p) for p in sorted(JobDir(job_dir).logs.glob("*.log"))]
    if launcher_log:
        named.append((launcher_log.name, launcher_log))
        named += [(f"pool {p.name}", p) for p in sorted(launcher_log.parent.glob("worker_*.log"))]
    for name, path in named:
        text = path.read_text(errors="replace").splitlines()
        tails[name] = "\n".join(_last_exception_above(text, lines) + text[-lines:])
    return tails


def _last_exception_above(text: List[str], lines: int) -> List[str]:
    """The last exception line of a log and the lines of its message (up to 12), where it lies
    above the last ``lines`` (MindSpore's call stacks after ``RuntimeError:`` run longer than a
    tail), then ``[...]``; else nothing."""
    last = next((i for i in range(len(text) - 1, -1, -1) if EXCEPTION.search(text[i])), None)
    if last is None or last >= len(text) - lines:
        return []
    return text[last:min(last + 12, len(text) - lines)] + ["[...]"]


def failure_cause(returncode: Optional[int], tails: Dict[str, str], who: str = "launcher") -> str:
    """What the logs say about a crash, in one line: the exit code or signal of ``who``
    (the launcher; ``the standalone process`` of ``order=separate``), torchrun's per-rank
    ``exitcode``/signal lines, and the exception of each worker log, the workers that
    raised before those that only saw a peer die (:func:`worker_errors`); where no worker
    log has one, the launcher's own exception (:func:`first_failure` over its log: a
    ``runtime.python`` without torch dies before any rank starts)."""
    if returncode is None:
        parts = [f"{who} killed"]
    elif returncode < 0:
        parts = [f"{who} killed by {signal.Signals(-returncode).name}"]
    else:
        parts = [f"{who} exited with code {returncode}"]
    own = None
    for name, text in tails.items():
        lines = text.splitlines()
        if name == LAUNCHER_LOG:
            # (torchrun's summary pads its fields, "rank      : 0": one space each in the reason)
            hits = [" ".join(line.split()) for line in lines if re.search(r"exitcode|Signal \d+|rank\s*:", line)]
            parts.extend(hits[:6])
            own = first_failure([lines])
    workers = worker_errors({name: text for name, text in tails.items() if name != LAUNCHER_LOG})
    parts.extend(workers)
    if not workers and own is not None:  # the launcher itself raised (another runtime.python without torch)
        parts.append(f"{LAUNCHER_LOG}: {str(own['line'])[:300]}")
    hint = _reduction_sizes_hint(workers, tails)
    return "; ".join(parts + ([hint] if hint else []))


# gloo's words where the ranks' collectives carry other sizes; the FSDP2 frames of a gradient reduction
SIZE_MISMATCH = re.compile(r"Received data size doesn't match expected size|op\.preamble\.length <= op\.nbytes")
GRADIENT_REDUCTION = re.compile(r"foreach_reduce|reduce_scatter")
PARAMETER_GATHER = re.compile(r"foreach_all_gather|in unshard\b|in pre_forward\b")  # FSDP2's all-gather of a unit


def _reduction_sizes_hint(workers: List[str], tails: Dict[str, str]) -> Optional[str]:
    """What a collective of other sizes on the ranks means where it was a gradient reduction
    (gloo's size check failed and a worker's stack is in FSDP2's ``foreach_reduce`` or a
    reduce-scatter): some rank reduced gradients the others did not, a parameter unused in its
    forward there (an expert no token reached, a branch not taken) has no gradient on that rank,
    or an engine reduces otherwise on one rank; or where it was the forward's all-gather of a
    unit's parameters (``foreach_all_gather``, ``unshard``): some rank's forward ran a unit (a
    module its branch took) the others' did not, so they gathered other units. ``None``
    otherwise."""
    if not any(SIZE_MISMATCH.search(w) for w in workers):
        return None
    logs = [t for n, t in tails.items() if n != LAUNCHER_LOG]
    if any(GRADIENT_REDUCTION.search(t) for t in logs):
        return ("the ranks' gradient reductions differ in size: some rank reduced other gradients than the others (a "
                "parameter unused in the forward there, an expert no token of its shard reached or a branch not "
                "taken, has no gradient on that rank; or an engine reduces otherwise on one rank): give every "
                "parameter a gradient on every rank (a zero-weighted use), or data.split=replicated")
    if any(PARAMETER_GATHER.search(t) for t in logs):
        return ("the ranks' parameter all-gathers differ in size: some rank's forward ran a fully_shard unit the "
                "others' did not (a module on a branch its data took, called there only), so the ranks gathered "
                "other units' parameters: run every unit on every rank (a zero-weighted use), wrap=root, or "
                "data.split=replicated")
    return None


def _exception_text(lines: List[str], index: int) -> str:
    """The exception line ``lines[index]`` (a C++ exception's abort, :data:`TERMINATE`: its type
    and the message of the ``what():`` line after it), and, when its message is empty (MindSpore puts
    it on the lines after ``TypeError:``, between rules of dashes), the message lines that
    follow, up to the next blank line, its C++ call stack or a Python one (faulthandler's
    ``Current thread 0x...``, written when the rank was stopped)."""
    head = lines[index].strip()
    aborted = TERMINATE.search(head)
    if aborted:  # "<type>: <what()'s message>", the message on one of the next lines
        what = next((line.split("what():", 1)[1].strip() for line in lines[index + 1:index + 4] if "what():" in line),
                    "")
        return f"{aborted.group(1)}: {what}" if what else head
    if not head.endswith(":"):
        return head
    body = []
    for line in lines[index + 1:]:
        if line.strip() and set(line.strip()) <= {"-"}:
            continue  # a rule of dashes
        text = line.strip().lstrip("- ").strip()
        if (not text and body) or "Call Stack" in text or STACK_HEAD.match(text) or text.startswith('File "'):
            break
        if text:
            body.append(text)
    return " ".join([head, *body])



# A C++ exception no one caught: the process aborts (SIGABRT) after two lines, "terminate called after
# throwing an instance of 'gloo::EnforceNotMet'" and "  what():  [enforce fail at ...] ... Is there a
# distributed collective mismatch in your code?"; read as one exception line (:func:`_exception_text`)
TERMINATE = re.compile(r"terminate called after throwing an instance of '([^']+)'")
EXCEPTION = re.compile(r"\b[A-Z]\w*(Error|Exception|Interrupt)\b:|" + TERMINATE.pattern)  # any prefix
# A survivor's error once a peer died: its connection or collective broke. Never the cause
# while another line names one (gloo: "Connection closed by peer"; NCCL: "communicator was
# aborted"; torchrun's own summary: ChildFailedError; its agent's SignalException).
# MindSpore on CPU: a collective kernel that failed waiting for a peer ("Launch kernel failed:
# Default/AllReduce-op0", after "Ring ReduceScatter wait receiving [1,27] failed").
FOLLOW_ON = re.compile(r"Connection (closed|reset) by peer|Broken pipe|communicator was aborted|ChildFailedError"
                       r"|SignalException|Socket Timeout|DistNetworkError|Connection refused|terminated by signal"
                       r"|Launch kernel failed: \S*(AllReduce|AllGather|ReduceScatter|Broadcast|AllToAll)|wait receiving")
# A process that never started its script: the interpreter or the shell says why (no exception line),
# or the script's own argument parser refused its flags (argparse: "prog.py: error: argument --x: ...")
CANNOT_START = re.compile(r"can't open file|No such file or directory|command not found|Permission denied"
                          r"|Exec format error|^\s*(?:\[\w+\]:\s*)?[\w.-]+: error: ")
RANK_PREFIX = re.compile(r"^\s*\[(?:rank|default)(\d+)\]:")  # torchrun --tee / --local-ranks-filter prefixes
PREFIXES = re.compile(r"^\s*(?:\[\w+\]:\s*)+")
ROOT_CAUSE_RANK = re.compile(r"^\s*(?:\[\w+\]:)?\s*rank\s*:\s*(\d+)")  # torchrun's "Root Cause" box


def root_cause_rank(lines: List[str]) -> Optional[int]:
    """The rank torchrun's "Root Cause (first observed failure)" box names in ``lines``, or ``None``."""
    root = None
    for i, line in enumerate(lines):
        if "Root Cause" in line:
            root = next((int(m.group(1)) for m in (ROOT_CAUSE_RANK.match(x) for x in lines[i + 1:i + 12]) if m),
                        None)
    return root


def exceptions(lines: List[str], rank: Optional[int] = None) -> List[Dict[str, object]]:
    """Every exception line of one log, in order: ``{"rank": its ``[rankN]:`` prefix's rank, else
    ``rank`` (the log's own: a per-rank file), "line": the line without rank prefixes (and its
    message where MindSpore puts it on the lines after), "follow_on": a survivor's error once a
    peer died (:data:`FOLLOW_ON`)}``. torchrun's ``ChildFailedError`` summary is none."""
    found = []
    for i, line in enumerate(lines):
        if EXCEPTION.search(line) and "ChildFailedError" not in line:
            prefix = RANK_PREFIX.match(line)
            found.append({"rank": int(prefix.group(1)) if prefix else rank,
                          "line": PREFIXES.sub("", _exception_text(lines, i)),
                          "follow_on": bool(FOLLOW_ON.search(_exception_text(lines, i)))})
    return found


def first_failure(logs: List[List[str]], ranks: Optional[List[Optional[int]]] = None) -> Optional[Dict[str, object]]:
    """The exception of the process that failed first, over the logs a command left (each a
    list of lines: the command's merged output first, then per-rank files, whose rank
    ``ranks`` gives where the path tells it): ``{"rank": int or None, "line": the exception
    line, "root_cause": whether torchrun's box named that rank}``, or ``None`` when no line
    is an exception.

    The rule: torchrun's "Root Cause (first observed failure)" box (in any log) names the
    rank, and that rank's first exception that is no follow-on is the cause; else the first
    exception (logs in order, lines in order: the earliest by time within a log) that is no
    survivor's follow-on error (:data:`FOLLOW_ON`: a peer's connection closed, a collective
    aborted); else the last exception line."""
    ranks = list(ranks or [None] * len(logs))
    root = next((r for r in (root_cause_rank(lines) for lines in logs) if r is not None), None)
    raised = [e for lines, rank in zip(logs, ranks) for e in exceptions(lines, rank)]
    if not raised:
        return None
    causes = [e for e in raised if not e["follow_on"]]
    own = [e for e in causes if root is not None and e["rank"] == root]
    if own:
        return {"rank": root, "line": own[0]["line"], "root_cause": True}
    chosen = causes[0] if causes else raised[-1]
    rank = chosen["rank"] if chosen["rank"] is not None else (root if causes else None)
    return {"rank": rank, "line": chosen["line"], "root_cause": root is not None and rank == root}


def _in_message(lines: List[str], errors: List[int], j: int) -> bool:
    """Whether line ``j`` is part of the message of an exception line a few lines above it
    (MindSpore's ``RuntimeError:`` then ``- Kernel error:``, a section header of its message)."""
    text = lines[j].strip().lstrip("- ").strip()
    return any(i < j <= i + 12 and EXCEPTION.search(lines[i]) and text in _exception_text(lines, i)[len(
        lines[i].strip()):] for i in errors)


def worker_errors(tails: Dict[str, str]) -> List[str]:
    """Each worker log's exception (``"worker_1.log: ValueError: ..."``), a real cause before a
    survivor's follow-on error (:data:`FOLLOW_ON`), so the reason leads with the rank that
    failed."""
    found = []
    for name, text in tails.items():
        lines = text.splitlines()
        errors = [i for i, line in enumerate(lines)
                  if re.search(r"Error|Exception|Traceback|error:", line) or TERMINATE.search(line)]
        errors = [j for j in errors if not _in_message(lines, errors, j)]
        if errors:
            causes = [i for i in errors if not FOLLOW_ON.search(_exception_text(lines, i)) and "Traceback" not in lines[i]]
            # an uncaught C++ exception before "Fatal Python error: Aborted", the abort it caused
            chosen = next((i for i in causes if TERMINATE.search(lines[i])), (causes or errors)[-1])
            found.append((not causes, f"{name}: {_exception_text(lines, chosen)[:300]}"))
    return [text for _, text in sorted(found, key=lambda f: f[0])]


# A thread's stack as faulthandler writes it (sweep.train.__main__.stacks_on_signal), innermost frame first.
STACK_HEAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):")
FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
# A frame of a collective or of the wait on one: torch.distributed (c10d, FSDP2's all-gather and
# reduce-scatter), MindSpore's communication ops, hyper-parallel's collectives.
COLLECTIVE = re.compile(r"torch/distributed/(?!elastic)|mindspore/communication|mindspore/ops/.*comm|mindspore/mint/"
                        r"distributed|"
                        r"hyper_parallel/.*(collective|comm)|sweep/engines/collectives\.py")
TOP_FRAMES = 12  # the innermost frames read for a collective: the wait, the op, the wrapper that called it
# A compiled graph's call: what runs inside it (MindSpore's jit: DistributedGradReducer's AllReduce) has
# no Python frame, so a rank there may wait in a collective or compute; said as such, not as outside one.
COMPILED = re.compile(r"mindspore/(common|graph)/api\.py")


def _stacks(lines: List[str]) -> List[Dict[str, object]]:
    """The threads of the last stack dump in one log: ``[{"current": bool, "frames": [(file,
    line, func), ...] innermost first}]``; empty where the log holds none."""
    heads = [i for i, line in enumerate(lines) if STACK_HEAD.match(line)]
    if not heads:
        return []
    first = heads[-1]  # the last dump's first thread: the heads just before it that are contiguous blocks
    for i in reversed(heads[:-1]):
        between = lines[i + 1:first]
        if all(FRAME.match(x) or not x.strip() for x in between):
            first = i
        else:
            break
    threads, current = [], None
    for line in lines[first:]:
        head = STACK_HEAD.match(line)
        if head:
            current = {"current": head.group(1) == "Current thread", "frames": []}
            threads.append(current)
            continue
        frame = FRAME.match(line)
        if frame and current is not None:
            current["frames"].append((frame.group("file"), int(frame.group("line")), frame.group("func")))
        elif line.strip() and current is not None and current["frames"]:
            current = None  # the dump ended
    return [t for t in threads if t["frames"]]


def _main_thread(threads: List[Dict[str, object]]) -> Optional[List[tuple]]:
    """The frames of the thread that runs the rank (its outermost frames in ``sweep/train`` or
    ``sweep/launch``), else the thread the signal interrupted."""
    for thread in threads:
        if any("sweep/train/" in f or "sweep/launch/" in f for f, _, _ in thread["frames"][-6:]):
            return thread["frames"]
    current = [t for t in threads if t["current"]]
    return (current or threads or [{"frames": None}])[0]["frames"]


def _where(frame: tuple) -> str:
    file, line, func = frame
    return f"{func} ({Path(file).name}:{line})"


def _own(frames: List[tuple]) -> Optional[tuple]:
    """The innermost frame outside installed packages and the standard library: the
    project's, the user's or a test's code that called into them."""
    for frame in frames:
        if "site-packages" not in frame[0] and "/lib/python" not in frame[0] and not frame[0].startswith("<"):
            return frame
    return None


def _raised_first(lines: List[str]) -> bool:
    """Whether a worker log's last traceback comes before its last stack dump: the rank raised,
    then wrote its stack as it waited to exit (not a stack written at the time limit, then the
    traceback of the kill's signal)."""
    traces = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    dumps = [i for i, line in enumerate(lines) if STACK_HEAD.match(line)]
    return bool(traces and dumps and traces[-1] < dumps[-1])


def hung_ranks(job_dir: Path, outside_only: bool = False) -> Optional[str]:
    """Which rank hung, from the stacks the ranks wrote into their worker logs at the time
    limit (``sweep.launch.supervise.dump_stacks``): a rank whose stack holds no collective
    among its innermost frames (:data:`COLLECTIVE`) hung outside one (a loop, a sleep, I/O,
    a lock) while the others wait for it in a collective (a rank in a compiled graph,
    :data:`COMPILED`, is said to be there: what it runs has no Python frame); where every rank waits in one,
    each one's collective (one that some rank never joins, or joins in another order). One
    line; ``None`` where no worker log holds a stack, or, ``outside_only`` (a launch stopped
    because a rank died: the survivors wait for it, and say nothing), where no rank hung
    outside a collective."""
    where: Dict[int, tuple] = {}
    job = JobDir(job_dir)
    for path in sorted(job.logs.glob("worker_*.log")):
        found = re.search(r"worker_(\d+)\.log$", path.name)
        lines = path.read_text(errors="replace").splitlines() if found else []
        if found and job.failed(int(found.group(1))).exists() and _raised_first(lines):
            continue  # the rank raised, then was asked: its stack is its wait before it exits
        frames = _main_thread(_stacks(lines)) if found else None
        if frames:
            inside = next((f for f in frames[:TOP_FRAMES] if COLLECTIVE.search(f[0]) or COMPILED.search(f[0])),
                          None)
            where[int(found.group(1))] = (frames, inside)
    if not where:
        return None
    outside = sorted(r for r, (_, inside) in where.items() if inside is None)
    waiting = sorted(r for r, (_, inside) in where.items() if inside is not None)

    def waits(rank: int) -> str:
        frames, inside = where[rank]
        own = _own(frames)
        called = f", called from {_where(own)}" if own else ""
        if COMPILED.search(inside[0]):
            return (f"rank {rank} is in a compiled graph, {_where(inside)}{called} (what runs inside it, a "
                    "collective or not, has no Python frame)")
        return f"rank {rank} waits in {_where(inside)}{called}"

    def hung(rank: int) -> str:
        frames = where[rank][0]
        own = _own(frames)
        inner = f" in {_where(own)}" if own is not None and own != frames[0] else ""
        return f"rank {rank} hung outside any collective, at {_where(frames[0])}{inner}"

    if outside:
        return "; ".join([hung(r) for r in outside] + [waits(r) for r in waiting])
    if outside_only:
        return None
    if any(COMPILED.search(where[r][1][0]) for r in waiting):
        return "no rank hung outside a collective or a compiled graph (a collective that some rank never joins, or " \
            "joins in another order?): " + "; ".join(waits(r) for r in waiting)
    return "every rank waits in a collective (one that some rank never joins, or joins in another order): " + \
        "; ".join(waits(r) for r in waiting)

