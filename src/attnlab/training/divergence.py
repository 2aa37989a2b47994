"""Telling a diverged run from a result: non-finite updates, and the weights a run ends with.

:class:`DivergenceGuard` is the Trainer's judge. An update whose loss or gradient norm is NaN
or infinite is skipped with a warning (:meth:`DivergenceGuard.skip`); ``max_nonfinite`` such
updates in a row stop training. At the end, :meth:`DivergenceGuard.final_check` scores the
final weights on the last micro-batch, which catches a blow-up in the last update (whose own
loss was computed before it). Every verdict is a ValueError ("diverged") that says whether
a checkpoint was written before and how to go on (:meth:`DivergenceGuard.error`).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from attnlab.training.checkpoint import latest_checkpoint
from attnlab.training.distributed import DistributedContext, all_reduce_sum
from attnlab.training.sums import Sums, float64_on_host

__all__ = ["DIVERGED_RATIO", "DivergenceGuard"]

DIVERGED_RATIO = 1e4
"""A run ends diverged when the loss its final weights give is this many times the loss of
its first update (and above this many times 1): far past anything a sane run ends with."""


class DivergenceGuard:
    """The divergence checks of one Trainer writing to ``out_dir`` (checkpoints under
    ``checkpoint_root``); ``max_nonfinite`` non-finite updates in a row stop training."""

    def __init__(self, out_dir: Path, checkpoint_root: Path, max_nonfinite: int, context: DistributedContext) -> None:
        self.out_dir, self.checkpoint_root, self.max_nonfinite, self.context = (out_dir, checkpoint_root,
                                                                               max_nonfinite, context)
        self.nonfinite_run = 0
        """Non-finite updates in a row, up to the last one."""
        self.first_loss: float | None = None
        """The per-token loss of the first update of this training call (:meth:`note`)."""

    def start(self, max_nonfinite: int) -> None:
        """A training call starts (with ``max_nonfinite`` as configured now): its first update
        sets :attr:`first_loss` afresh; a run of non-finite updates goes on across calls."""
        self.max_nonfinite, self.first_loss = max_nonfinite, None

    def note(self, sums: Sums) -> None:
        """An update's all-reduced sums: the first of a training call sets :attr:`first_loss`."""
        if self.first_loss is None and sums.tokens:
            self.first_loss = sums.loss / sums.tokens

    def finite(self) -> None:
        """The update was finite: the run of non-finite ones is broken."""
        self.nonfinite_run = 0

    def skip(self, step: int, loss: float, grad_norm: float | None) -> None:
        """Update ``step``'s loss or gradient is not finite: it is skipped (every rank sees the
        same all-reduced numbers, so all skip together), with a warning; too many in a row
        end training (a ValueError)."""
        self.nonfinite_run += 1
        what = f"loss {loss:.4g}" + (f", gradient norm {grad_norm:.4g}" if grad_norm is not None else "")
        if self.nonfinite_run >= self.max_nonfinite:
            raise ValueError(
                f"step {step}: {self.nonfinite_run} updates in a row had a NaN or infinite loss or gradient "
                f"({what}); training diverged and stops here. The weights were not updated by those steps and "
                f"the last checkpoint under {self.checkpoint_root} is finite: resume from it with a lower "
                "learning rate (or clip the gradient norm)")
        if self.context.is_main:
            warnings.warn(f"step {step}: {what} is not finite; this update is skipped "
                          f"({self.nonfinite_run} in a row, training stops at {self.max_nonfinite})",
                          RuntimeWarning, stacklevel=3)

    def error(self, what: str) -> ValueError:
        """The error a diverged run ends with: ``what`` went wrong, and where to go on from."""
        checkpoint = latest_checkpoint(self.checkpoint_root)
        where = (f"the last checkpoint, {checkpoint}, was written before: resume from it with a lower learning "
                 "rate (or clip the gradient norm)" if checkpoint is not None
                 else "no checkpoint was written: start again with a lower learning rate")
        return ValueError(f"training in {self.out_dir} diverged: {what}; no model is saved from it, and {where}")

    @torch.no_grad()
    def final_check(self, model: torch.nn.Module, loss_fn: Callable[..., tuple[Any, Any, Mapping[str, Any]]],
                    batch: Mapping[str, Any] | None, autocast: Callable[[], contextlib.AbstractContextManager],
                    ratio: float = DIVERGED_RATIO) -> str | None:
        """What is wrong with the weights training ends with, judged by their loss on the last
        micro-batch ``batch`` (one forward of ``model`` in eval mode under ``autocast()``: no
        dropout, no random numbers drawn); None when nothing is (or there is no batch). The
        last update's own loss was computed before that update, so only this catches a
        blow-up in the last update: a NaN or infinite loss, or (finite but absurd weights,
        e.g. after a learning rate of 1e30) a per-token loss ``ratio`` times the first
        update's."""
        if batch is None:
            return None
        model.eval()
        try:
            with autocast():
                loss_sum, tokens, _ = loss_fn(model, batch)
        finally:
            model.train()
        values = all_reduce_sum(float64_on_host([loss_sum, tokens]), self.context).tolist()
        loss = values[0] / values[1] if values[1] else 0.0
        if not math.isfinite(loss):
            return "a NaN or infinite loss on its batch"
        first = self.first_loss
        if first is not None and math.isfinite(first) and loss > ratio * max(first, 1.0):
            return f"a loss of {loss:.3g} per token on its batch, against {first:.3g} at the start of the run"
        return None
