"""Read a W&B offline run (``offline-run-*/run-<id>.wandb``) with wandb's own record type.

wandb (0.2x+) ships no Python reader of its transaction log; the file is a LevelDB-style
log (a 7-byte ``:W&B`` header, 32 KiB blocks, 7-byte chunk headers: crc32, length,
type FULL/FIRST/MIDDLE/LAST) of ``wandb.proto.wandb_internal_pb2.Record`` messages, which
is all this decodes; the messages themselves are parsed by wandb's protobuf classes.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Dict, List

BLOCK = 32 * 1024
HEADER = 7


def records(path: Path) -> List[Any]:
    """Every ``Record`` of a ``.wandb`` file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    found, pos, chunks = [], HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # block trailer padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunks += data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind in (1, 4):  # FULL, LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            found.append(record)
            chunks = b""
    return found


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def read_run(run_dir: Path, wait_s: float = 10.0) -> Dict[str, Any]:
    """``{"id", "name", "group", "job_type", "config": {...}, "history": [{key: value}], "summary": {...}}``
    of an offline run dir (values JSON-decoded; keys of nested updates joined by ``/``).
    wandb's own process (wandb-core) writes the log: once, on a loaded CI machine, a log
    was read before its run record was in it, so a log without one is read again for up
    to ``wait_s`` seconds."""
    import time

    (log,) = Path(run_dir).glob("run-*.wandb")
    deadline = time.monotonic() + wait_s
    found = records(log)
    while not any(r.WhichOneof("record_type") == "run" for r in found) and time.monotonic() < deadline:
        time.sleep(0.2)
        found = records(log)
    run: Dict[str, Any] = {"config": {}, "history": [], "summary": {}}
    for record in found:
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.update(id=record.run.run_id, name=record.run.display_name, group=record.run.run_group, job_type=record.run.job_type)
            for item in record.run.config.update:
                run["config"][_key(item)] = json.loads(item.value_json)
        elif kind == "config":
            for item in record.config.update:
                run["config"][_key(item)] = json.loads(item.value_json)
        elif kind == "history":
            run["history"].append({_key(i): json.loads(i.value_json) for i in record.history.item})
        elif kind == "summary":
            for item in record.summary.update:
                run["summary"][_key(item)] = json.loads(item.value_json)
    return run
