"""``logger=tensorboard``: TensorBoard event files, one subdir per job.

``<log_dir>/job_<num>/`` (a single run: ``<log_dir>/run/``) holds the job's scalars
``loss/standalone``, ``loss/distributed``, ``loss/difference`` (per step), the report's
numbers under ``metrics/<name>`` (step 0), text ``verdict`` (status, reason, drift, notes,
overrides) and the job's plot as image ``plot``; ``<log_dir>/sweep/`` the sweep's
verdict (text), ``jobs/<status>`` counts and the factor-effects plot (image
``factor_effects``). ``log_dir``: ``None`` = ``<sweep dir>/tensorboard`` (a single run:
``<run dir>/tensorboard``); a dir of your own gets one subdir per sweep (named as the sweep
dir). Logging a sweep again (a resumed sweep) replaces its event files. View: ``tensorboard --logdir <sweep dir>/tensorboard``.
Written with the ``tensorboard`` package's own event writer (no torch or TensorFlow
needed). Extra: ``tensorboard``.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from sweep.trackers import JobLog, SweepLog, TrackerCallback, require


class _Writer:
    """Scalars, text and PNG images into one event file dir."""

    def __init__(self, log_dir: Path) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        log_dir.mkdir(parents=True, exist_ok=True)
        self.events = EventFileWriter(str(log_dir))

    def _add(self, summary: Any, step: int) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        self.events.add_event(Event(summary=summary, step=step, wall_time=time.time()))

    def scalar(self, tag: str, value: float, step: int) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._add(Summary(value=[Summary.Value(tag=tag, simple_value=float(value))]), step)

    def text(self, tag: str, text: str, step: int = 0) -> None:
        """Markdown ``text`` for TensorBoard's text plugin, tag ``<tag>/text_summary`` (as
        torch's ``SummaryWriter.add_text`` writes it)."""
        from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
        from tensorboard.compat.proto.tensor_pb2 import TensorProto
        from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
        from tensorboard.compat.proto.types_pb2 import DT_STRING

        metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))
        tensor = TensorProto(dtype=DT_STRING, string_val=[text.encode()],
                             tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
        self._add(Summary(value=[Summary.Value(tag=f"{tag}/text_summary", metadata=metadata, tensor=tensor)]), step)

    def image(self, tag: str, png: Path, step: int = 0) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        data = png.read_bytes()
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")  # the IHDR chunk
        image = Summary.Image(encoded_image_string=data, height=height, width=width, colorspace=4)
        self._add(Summary(value=[Summary.Value(tag=tag, image=image)]), step)

    def close(self) -> None:
        self.events.close()


def _markdown(fields: Dict[str, str]) -> str:
    return "\n\n".join(f"**{k}**: {v}" for k, v in fields.items() if v)


class TensorBoardCallback(TrackerCallback):
    """``log_dir``: where the event files go; ``None`` = ``tensorboard/`` in the sweep
    (or run) dir."""

    MODULE = "tensorboard"
    EXTRA = "tensorboard"

    def __init__(self, log_dir: Optional[str] = None) -> None:
        self.log_dir = log_dir

    def log_jobs(self, sweep: Optional[SweepLog], jobs: List[JobLog], where: Path) -> str:
        require("tensorboard", self.EXTRA)
        # a log_dir of your own holds one subdir per sweep (or run); the default is the sweep's own
        root = Path(self.log_dir) / Path(where).name if self.log_dir else Path(where) / "tensorboard"
        for name in [f"job_{job.num}" if sweep is not None else "run" for job in jobs] + ["sweep"] * (sweep is not None):
            shutil.rmtree(root / name, ignore_errors=True)  # a sweep logged again (resumed) replaces its events
        for job in jobs:
            writer = _Writer(root / (f"job_{job.num}" if sweep is not None else "run"))
            try:
                for name, values in job.series.items():
                    for step, value in enumerate(values):
                        writer.scalar(name, value, step)
                for name, value in job.metrics.items():
                    writer.scalar(f"metrics/{name}", value, 0)
                overrides = " ".join(f"{k}={v}" for k, v in job.params.items())
                writer.text("verdict", _markdown({**job.verdict, "overrides": overrides}))
                for plot in job.plots:
                    writer.image("plot", plot)
            finally:
                writer.close()
        if sweep is not None:
            writer = _Writer(root / "sweep")
            try:
                writer.text("verdict", sweep.verdict)
                for status, count in sweep.counts.items():
                    writer.scalar(f"jobs/{status}", count, 0)
                for plot in sweep.plots:
                    writer.image(plot.stem, plot)
            finally:
                writer.close()
        return str(root)
