"""The time of one training call, and a learning-rate schedule fitted to the run it buys.

:class:`RunClock` answers the training loop's questions about time: how long the budget is,
what is left, whether it is spent, whether a timed checkpoint is due. Its budget is either a
whole command's :class:`~attnlab.training.budget.Budget` (given to the Trainer) or
``TrainConfig.max_minutes`` counted from the start of :meth:`Trainer.train
<attnlab.training.trainer.Trainer.train>`; both run on an injectable clock.

Schedule fitting: a warm-up longer than the run (``max_steps``, or the updates the time
budget buys, estimated after a few updates by :func:`affordable_updates`) is shortened to a
tenth of the run by :func:`fit_warmup` (a Noam schedule keeps its peak learning rate, a
cosine one decays over the run); :class:`ScheduleFitter` makes that choice for a run and puts
the fitted schedule on its optimizer. The fit is plain data, stored in every checkpoint, so a
resumed run continues it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from attnlab.training.budget import Budget
from attnlab.training.distributed import DistributedContext, all_reduce_sum
from attnlab.training.schedules import NoamSchedule, ScheduledLR
from attnlab.training.train_config import TrainConfig

__all__ = ["RunClock", "ScheduleFitter", "affordable_updates", "fit_warmup"]


class RunClock:
    """The time budget of one training call, started when made: ``budget`` when given (it
    decides, on its own clock), else ``max_minutes`` from :attr:`started` on ``clock``;
    ``checkpoint_every_minutes`` is the cadence of timed checkpoints (None: none)."""

    def __init__(self, budget: Budget | None, max_minutes: float | None, checkpoint_every_minutes: float | None,
                 clock: Callable[[], float]) -> None:
        self.budget, self.max_minutes, self.checkpoint_every_minutes = budget, max_minutes, checkpoint_every_minutes
        self.clock = clock
        self.started = clock()
        """The clock's reading when the call started."""

    @property
    def minutes(self) -> float | None:
        """The budget's length, for a message; None when unlimited."""
        if self.budget is not None:
            return self.budget.minutes
        return self.max_minutes

    def seconds_left(self) -> float | None:
        """Seconds left (never negative), or None without a time limit."""
        if self.budget is not None:
            return self.budget.left()
        if self.max_minutes is None:
            return None
        return max(0.0, 60.0 * self.max_minutes - (self.clock() - self.started))

    def out_of_time(self) -> bool:
        """This process's clock says the budget is spent (under torchrun, rank 0's decides:
        :meth:`StopSignals.agree <attnlab.training.run_signals.StopSignals.agree>`)."""
        if self.budget is not None:
            return self.budget.spent()
        if self.max_minutes is None:
            return False
        return self.clock() - self.started > 60.0 * self.max_minutes

    def checkpoint_due(self, saved_at: float) -> bool:
        """A timed checkpoint is due: ``checkpoint_every_minutes`` passed since ``saved_at``
        (a reading of :attr:`clock`)."""
        minutes = self.checkpoint_every_minutes
        return minutes is not None and self.clock() - saved_at >= 60.0 * minutes

    def budget_clock(self) -> float:
        """A reading of the clock the budget runs on (to time updates against it)."""
        return self.budget.clock() if self.budget is not None else self.clock()


def fit_warmup(config: TrainConfig, run_length: int, run: str, step: int) -> tuple[dict[str, Any], str] | None:
    """A schedule for a warm-up longer than ``run_length`` updates (``run`` describes them, for
    the message), fitted at ``step``: the warm-up shortened to a tenth of the run (at least 1);
    a Noam schedule keeps its peak learning rate (its scale grows with the square root of the
    shorter warm-up); a cosine one decays over the run. Returns ``(fit, the line that says
    so)``, or None when the configured warm-up fits."""
    if config.warmup_steps <= run_length:
        return None
    warmup = max(1, run_length // 10)
    fit: dict[str, Any] = {"warmup_steps": warmup, "lr_scale": config.lr_scale, "total_steps": config.max_steps,
                           "reason": f"the {config.warmup_steps:,}-update warm-up does not fit {run}",
                           "at_step": step}
    if config.schedule == "noam":
        fit["lr_scale"] = config.lr_scale * math.sqrt(warmup / config.warmup_steps)
        peak = NoamSchedule(config.d_model, warmup, fit["lr_scale"])(warmup)
        how = f"peak learning rate {peak:.3g} kept (Noam)"
    else:
        fit["total_steps"] = max(warmup, min(config.max_steps, run_length))
        how = f"peak learning rate {config.peak_lr:.3g}, cosine decay to step {fit['total_steps']:,}"
    return fit, (f"schedule: {fit['reason']}: warming up over {warmup:,} update{'s' if warmup != 1 else ''} "
                 f"instead, {how}")


def affordable_updates(clock: RunClock, context: DistributedContext, step: int,
                       seconds_per_update: float) -> tuple[int, float] | None:
    """After a few updates: the step the time left buys at ``seconds_per_update`` (rank 0's
    estimate decides for all ranks), with that rate; None without a time limit."""
    left = clock.seconds_left()
    if left is None:
        return None
    if context.is_distributed:  # rank 0's estimate decides for all
        local = torch.tensor([left, seconds_per_update] if context.is_main else [0.0, 0.0], dtype=torch.float64)
        left, seconds_per_update = all_reduce_sum(local, context).tolist()
    return step + int(left / max(seconds_per_update, 1e-9)), seconds_per_update


class ScheduleFitter:
    """The schedule of ``scheduler`` (built from ``config``), fitted to the run when its
    warm-up does not fit it; ``say`` prints the line that says so. :attr:`fit` is the choice
    (None: the configured schedule), which checkpoints store and :meth:`apply` restores."""

    def __init__(self, config: TrainConfig, scheduler: ScheduledLR, say: Callable[[str], None]) -> None:
        self.config, self.scheduler, self.say = config, scheduler, say
        self.fit: dict[str, Any] | None = None

    def fit_run(self, run_length: int, run: str, step: int) -> bool:
        """Shorten a warm-up longer than ``run_length`` updates (:func:`fit_warmup`) at
        ``step`` and say so, unless a fit was chosen already; returns whether it did."""
        fitted = fit_warmup(self.config, run_length, run, step) if self.fit is None else None
        if fitted is None:
            return False
        self.apply(fitted[0])
        self.say(fitted[1])
        return True

    def fit_budget(self, clock: RunClock, context: DistributedContext, step: int, seconds_per_update: float) -> None:
        """After a few updates: the updates the time budget buys, and a warm-up that fits them."""
        if step >= self.config.warmup_steps:
            return
        estimate = affordable_updates(clock, context, step, seconds_per_update)
        if estimate is not None and estimate[0] < self.config.max_steps:
            affordable, seconds_per_update = estimate
            budget = f"the {clock.minutes:g}-minute budget" if clock.minutes else "the time budget"
            self.fit_run(affordable, f"{budget} (about {affordable:,} updates at {seconds_per_update:.2g} s each)",
                         step)

    def apply(self, fit: Mapping[str, Any]) -> None:
        """Put the schedule ``fit`` describes on the scheduler and its optimizer, continuing at
        the scheduler's next update."""
        self.fit = dict(fit)
        schedule = self.config.build_schedule(self.fit)
        self.scheduler.schedule = schedule
        lr = schedule(self.scheduler.last_epoch + 1)  # the next update's
        for group in self.scheduler.optimizer.param_groups:
            group["lr"] = lr
        self.scheduler._last_lr = [lr for _ in self.scheduler.optimizer.param_groups]
