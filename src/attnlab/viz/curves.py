"""Training and held-out curves of runs, read from their ``metrics.jsonl`` (``attnlab curves``).

The Trainer appends one JSON object per line to ``OUT/metrics.jsonl`` (docs/files.md): every
``log_every`` updates ``{"time", "step", "lr", "loss", <the loss function's logs>, "tokens",
"tokens_per_s", ...}`` (per-token means over the updates since the last line), after each
validation ``{"time", "step", "valid_loss", "valid_<log>", ...}``, and when a run stops early
``{"time", "step", "stopped": ...}``. A curve of metric M is the training records' M and the
validation records' ``valid_M``, against the update count or against minutes of updates: the
update time the Trainer measured (``tokens / tokens_per_s`` of each training record, summed),
so validation, checkpoints and the pause between a stop and its ``--resume`` do not count.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["METRICS_FILE", "RunCurves", "read_run_curves", "curves_figure", "plot_curves"]

METRICS_FILE = "metrics.jsonl"
_MAX_LINE = 1 << 20  # a metrics line is a few hundred bytes; a longer one is not attnlab's


@dataclass
class RunCurves:
    """One run's records: ``train`` and ``valid`` map step -> record (the last one logged for
    that step), ``minutes`` maps each training step to the minutes of updates up to it."""

    name: str
    path: Path
    train: dict[int, dict] = field(default_factory=dict)
    valid: dict[int, dict] = field(default_factory=dict)
    minutes: dict[int, float] | None = None
    notes: list[str] = field(default_factory=list)

    def metrics(self) -> set[str]:
        """Every metric this run has a training or a held-out value of (``valid_`` removed)."""
        names = {key for record in self.train.values() for key in record}
        names |= {key[len("valid_"):] for record in self.valid.values() for key in record if key.startswith("valid_")}
        return names - {"_line", "time", "step", "lr", "tokens", "tokens_per_s", "grad_norm"}

    def series(self, metric: str, x: str) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
        """``(training points, held-out points)`` of ``metric``, ``x`` "updates" or "minutes";
        a value logged as null (not finite) is left out."""
        def position(step: int) -> float | None:
            if x == "updates":
                return float(step)
            earlier = [s for s in self.minutes if s <= step]  # a validation sits at the last update before it
            return self.minutes[max(earlier)] if earlier else 0.0

        def points(records: dict[int, dict], key: str) -> list[tuple[float, float]]:
            found = []
            for step, record in sorted(records.items()):
                value = record.get(key)
                if value is None:  # absent, or null: not finite when logged
                    continue
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError(f"{self.path}, line {record['_line']}: {key!r} is {value!r}, not a number")
                found.append((position(step), float(value)))
            return found

        return points(self.train, metric), points(self.valid, f"valid_{metric}")


def _metrics_path(run: str | os.PathLike) -> Path:
    path = Path(run)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.is_file():
        raise ValueError(f"{run}: no {METRICS_FILE} there (give a training run's --out directory, or the file)"
                         if Path(run).is_dir() or not Path(run).exists() or path.name == METRICS_FILE else
                         f"{run}: not a directory or a {METRICS_FILE} file")
    return path


def read_run_curves(run: str | os.PathLike, name: str | None = None) -> RunCurves:
    """Read ``run`` (a run directory, or its ``metrics.jsonl``). A line that is not a JSON
    object, or whose ``step`` or a number of it has the wrong type, is a ValueError naming
    the file and the line; a last line cut short (a run killed while writing it, which the
    next ``--resume`` removes) is left out with a note; lines of other tools (objects
    without an integer ``step``) are skipped."""
    path = _metrics_path(run)
    curves = RunCurves(name=name or str(run).rstrip("/") or str(run), path=path)
    with open(path, "rb") as file:
        lines = []
        while True:
            line = file.readline(_MAX_LINE + 1)
            if not line:
                break
            if len(line) > _MAX_LINE:
                raise ValueError(f"{path}, line {len(lines) + 1}: longer than {_MAX_LINE:,} bytes; "
                                 "not an attnlab metrics line")
            lines.append(line)
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
            if number == len(lines) and not raw.endswith(b"\n"):
                curves.notes.append(f"{path}, line {number}: cut short (a run killed while logging); left out")
                continue
            reason = error.msg if isinstance(error, json.JSONDecodeError) else "not UTF-8 JSON"
            raise ValueError(f"{path}, line {number}: not valid JSON ({reason})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}, line {number}: expected a JSON object, found a {type(record).__name__}")
        step = record.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            continue  # not an attnlab record
        if step < 0:
            raise ValueError(f"{path}, line {number}: step {step} is negative")
        record["_line"] = number  # for the messages about its values
        if "loss" in record:
            curves.train[step] = record
        elif any(key.startswith("valid_") for key in record):
            curves.valid[step] = record
    if not curves.train and not curves.valid:
        raise ValueError(f"{path}: no training or held-out records (an empty log: has the run made an update?)")
    curves.minutes = _update_minutes(curves.train)
    return curves


def _update_minutes(train: dict[int, dict]) -> dict[int, float] | None:
    """Step -> minutes of updates up to it, or None when a record lacks ``tokens``/``tokens_per_s``."""
    total, minutes = 0.0, {}
    for step, record in sorted(train.items()):
        tokens, rate = record.get("tokens"), record.get("tokens_per_s")
        if isinstance(tokens, bool) or not isinstance(tokens, (int, float)) or isinstance(rate, bool) \
                or not isinstance(rate, (int, float)) or not rate > 0 or not math.isfinite(rate):
            return None
        total += tokens / rate / 60.0
        minutes[step] = total
    return minutes


def plot_curves(runs: list[RunCurves], path: str | os.PathLike, *, metrics: list[str], x: str = "updates") -> Path:
    """:func:`curves_figure` written to ``path`` as a PNG (atomically)."""
    from attnlab.viz.figures import save_figure

    return save_figure(curves_figure(runs, metrics=metrics, x=x), path)


def curves_figure(runs: list[RunCurves], *, metrics: list[str], x: str = "updates"):
    """One panel per metric: each run in its colour, training solid, held-out dashed with dots."""
    from attnlab.viz.figures import new_figure

    figure = new_figure(7.5, 4.2 * len(metrics), dpi=110)
    axes = figure.subplots(len(metrics), 1, squeeze=False)[:, 0]
    colours = [f"C{index % 10}" for index in range(len(runs))]
    for axis, metric in zip(axes, metrics):
        for run, colour in zip(runs, colours):
            train, valid = run.series(metric, x)
            if train:
                xs, ys = zip(*train)
                axis.plot(xs, ys, color=colour, linewidth=1.4, marker="o" if len(train) < 20 else None,
                          markersize=3, label=f"{run.name} (training)")
            if valid:
                xs, ys = zip(*valid)
                axis.plot(xs, ys, color=colour, linewidth=1.4, linestyle="--", marker="o", markersize=4,
                          label=f"{run.name} (held-out)")
        axis.set_ylabel(metric)
        axis.set_xlabel("updates" if x == "updates" else "minutes of updates")
        axis.grid(True, alpha=0.3)
        axis.set_title(f"{metric}: training (solid) and held-out (dashed)", fontsize=10)
        axis.legend(fontsize=8, loc="best")
    figure.tight_layout()
    return figure
