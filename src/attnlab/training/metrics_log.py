"""A run's ``metrics.jsonl`` (one JSON record a line) and, optionally, its TensorBoard events.

:class:`MetricsLog` appends the Trainer's records (``{"time", "step", ...}``; a non-finite
number written as ``null``: strict JSON). Opening it repairs what a killed run left: an
unterminated last line is cut off (:func:`drop_partial_line`), and the records past the step
training continues from are dropped, atomically (:func:`drop_records_after`), so no step is
logged twice. It never writes through a symlink planted where the log goes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from attnlab.files import atomic_write_bytes, json_safe

__all__ = ["METRICS_FILE", "MetricsLog", "drop_partial_line", "drop_records_after"]

METRICS_FILE = "metrics.jsonl"


class MetricsLog:
    """``out_dir/metrics.jsonl`` (and ``out_dir/tensorboard`` when ``tensorboard`` is asked
    and installed) of one training call: :meth:`open`, :meth:`write`, :meth:`close`.
    :meth:`write` does nothing while the log is closed (on ranks other than 0)."""

    def __init__(self, out_dir: str | os.PathLike, *, tensorboard: bool) -> None:
        self.out_dir = Path(out_dir)
        self.tensorboard = tensorboard
        self._file = None
        self._writer = None

    def open(self, step: int = 0) -> None:
        """Open for appending after ``step`` (a checkpoint's, or 0), repairing the file first."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / METRICS_FILE
        # O_NOFOLLOW: never append through a symlink planted where the log goes.
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        drop_partial_line(fd)
        if drop_records_after(fd, path, step):
            os.close(fd)  # the file was replaced: append to the new one
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW)
        self._file = open(fd, "a", encoding="utf-8")
        if self.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # TensorBoard is optional
                SummaryWriter = None
            if SummaryWriter is not None:
                self._writer = SummaryWriter(log_dir=str(self.out_dir / "tensorboard"))

    def write(self, record: dict[str, Any]) -> None:
        """Append ``{"time": now, **record}`` (``record`` has an integer ``step``)."""
        if self._file is None:
            return
        record = {"time": time.time(), **record}
        # Strict JSON: a non-finite number (a diverged loss) is written as null.
        self._file.write(json.dumps(json_safe(record), allow_nan=False) + "\n")
        self._file.flush()
        if self._writer is not None:
            for key, value in record.items():
                if key not in ("step", "time") and isinstance(value, (int, float)):
                    self._writer.add_scalar(key, value, record["step"])

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def drop_partial_line(fd: int) -> None:
    """A run killed in the middle of writing a log line leaves it unterminated; cut it off
    so the lines appended on resume stay valid JSON lines."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    tail = os.pread(fd, min(size, 1 << 16), max(0, size - (1 << 16)))
    cut = tail.rfind(b"\n")
    os.ftruncate(fd, max(0, size - len(tail)) + cut + 1 if cut >= 0 else 0)


def drop_records_after(fd: int, path: Path, step: int) -> bool:
    """Training continues from ``step`` (a checkpoint's, or 0): the lines a killed run logged
    past it would repeat those steps. Rewrite the log without them, atomically; lines that
    are not our records (no integer ``step``) are kept. Returns whether it rewrote."""
    size = os.fstat(fd).st_size
    if size == 0:
        return False
    lines = os.pread(fd, size, 0).split(b"\n")
    kept, dropped = [], 0
    for line in lines:
        try:
            record = json.loads(line) if line.strip() else None
        except (ValueError, UnicodeDecodeError):
            record = None
        if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] > step:
            dropped += 1
        else:
            kept.append(line)
    if not dropped:
        return False
    atomic_write_bytes(path, b"\n".join(kept))
    return True
