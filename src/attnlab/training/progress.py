"""What a user sees of a training run: the progress bar (:class:`Progress`) and the one
``done:`` line a verb prints at the end (:func:`summary_line`)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence

from tqdm.auto import tqdm

from attnlab.training.budget import Budget
from attnlab.training.sums import Window
from attnlab.training.train_config import TrainConfig

__all__ = ["Progress", "clock_text", "summary_line"]


def _perf_counter() -> float:
    return time.perf_counter()


class Progress:
    """The progress bar: steps, running loss, lr, tokens/s and an honest time left.

    The figures refresh about once a second (not only at log steps). Under a
    ``max_minutes`` budget the time left is the sooner of the budget and the remaining
    steps at the current rate, since whichever comes first ends the run; tqdm's own ETA
    (towards ``max_steps`` only) is not shown. ``clock`` is the clock ``started`` (in
    :meth:`update`) was read on (default ``time.perf_counter``).
    """

    REFRESH_SECONDS = 1.0

    def __init__(self, config: TrainConfig, *, initial: int, main: bool, budget: Budget | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.config, self.initial, self.main, self.budget = config, initial, main, budget
        self.clock = clock if clock is not None else _perf_counter
        self.bar = tqdm(total=config.max_steps, initial=initial, disable=not (main and config.progress_bar), desc="train",
                        dynamic_ncols=True, bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                                                       "[{elapsed}{postfix}]")
        self.shown_at = 0.0

    def update(self, window: Window | Mapping[str, float], lr: float, started: float, force: bool = False) -> None:
        self.bar.update(1)
        now = self.clock()
        if self.bar.disable or not (force or now - self.shown_at >= self.REFRESH_SECONDS):
            return
        self.shown_at = now
        summary = window.summary() if isinstance(window, Window) else window
        elapsed = now - started
        postfix = {}
        if "loss" in summary:
            postfix["loss"] = f"{summary['loss']:.4f}"
        postfix["lr"] = f"{lr:.3g}"
        if "tokens_per_s" in summary:
            postfix[f"{self.config.progress_unit}/s"] = f"{summary['tokens_per_s']:.0f}"
        done = self.bar.n - self.initial
        left = (self.config.max_steps - self.bar.n) * elapsed / done if done else float("inf")
        if self.budget is not None and self.budget.limited:
            left = min(left, self.budget.left())
            postfix["budget"] = f"{self.budget.minutes:g} min"
        elif self.budget is None and self.config.max_minutes is not None:
            left = min(left, max(0.0, 60.0 * self.config.max_minutes - elapsed))
            postfix["budget"] = f"{self.config.max_minutes:g} min"
        postfix["left"] = clock_text(left) if left != float("inf") else "?"
        self.bar.set_postfix(postfix, refresh=False)

    def write(self, message: str) -> None:
        """A line above the bar (or alone, without a bar) on the main process."""
        if self.main:
            self.bar.write(message, file=sys.stderr)

    def close(self) -> None:
        self.bar.close()


def clock_text(seconds: float) -> str:
    """``MM:SS``, or ``H:MM:SS`` from an hour on."""
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"


def summary_line(metrics: Mapping[str, float], *, step: int, run_updates: int, run_seconds: float,
                 resumed_from: int | None, keys: Sequence[str] = ("loss", "valid_loss"), unit: str = "") -> str:
    """One line for a verb's ``done:``: updates and time, the training figures as the mean
    over the last updates (``metrics``: :meth:`Trainer.final_metrics
    <attnlab.training.trainer.Trainer.final_metrics>`, not one stale log line), and the last
    held-out figures with their step. ``keys`` picks the figures (``loss``, ``ppl``,
    ``valid_loss``, ...)."""
    if resumed_from is not None:
        text = (f"{step:,} updates ({run_updates:,} in this run, from step {resumed_from:,}, "
                f"{run_seconds:.0f} s)")
    else:
        text = f"{step:,} updates in {run_seconds:.0f} s"
    train = [f"{key} {metrics[key]:.4f}" for key in keys if not key.startswith("valid_") and key in metrics]
    if train:
        count = int(metrics["updates"])
        text += f"; {', '.join(train)} (mean of the last {count:,} update{'s' if count != 1 else ''})"
    held_out = [f"{key} {metrics[key]:.4f}" for key in keys if key.startswith("valid_") and key in metrics]
    if held_out:
        text += f"; {', '.join(held_out)} (held-out, step {int(metrics['valid_step']):,})"
    return text + (f" ({unit})" if unit and (train or held_out) else "")
