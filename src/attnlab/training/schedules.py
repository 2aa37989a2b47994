"""Learning-rate schedules.

A schedule is a plain callable ``schedule(step) -> lr`` giving the *absolute*
learning rate for the ``step``-th optimizer update, counting from 1 (the first
update is step 1). Keeping schedules as pure functions of the step makes them
trivial to test, to plot and to resume: nothing but the step count is state.

:class:`ScheduledLR` adapts such a callable to ``torch.optim.lr_scheduler`` so
it can sit next to any optimizer. The same callables also fit
``torch.optim.lr_scheduler.LambdaLR`` when the optimizer's base lr is 1.0::

    optimizer = torch.optim.Adam(params, lr=1.0)
    LambdaLR(optimizer, lambda index: schedule(index + 1))

(``LambdaLR`` counts from 0 and multiplies the base lr, hence the ``+ 1`` and
the base lr of 1.0.)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["NoamSchedule", "WarmupCosineSchedule", "ScheduledLR"]


def _check_positive_int(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _check_step(step: int) -> None:
    # Step 0 would be a division by zero in the Noam formula; the first update is step 1.
    if step < 1:
        raise ValueError(f"step counts from 1 for the first update, got {step!r}")


@dataclass(frozen=True)
class NoamSchedule:
    """The schedule of "Attention Is All You Need", section 5.3.

    ``lr(step) = scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)``

    It rises linearly for ``warmup_steps`` updates, peaks at
    ``scale * (d_model * warmup_steps)**-0.5`` and then decays as the inverse
    square root of the step. The paper uses ``d_model=512, warmup_steps=4000,
    scale=1``.
    """

    d_model: int
    warmup_steps: int = 4000
    scale: float = 1.0

    def __post_init__(self) -> None:
        _check_positive_int("d_model", self.d_model)
        _check_positive_int("warmup_steps", self.warmup_steps)
        if not self.scale > 0:
            raise ValueError(f"scale must be positive, got {self.scale!r}")

    def __call__(self, step: int) -> float:
        _check_step(step)
        return (
            self.scale
            * self.d_model**-0.5
            * min(step**-0.5, step * self.warmup_steps**-1.5)
        )


@dataclass(frozen=True)
class WarmupCosineSchedule:
    """Linear warm-up to ``peak_lr`` then cosine decay to ``min_lr``.

    The usual schedule for decoder-only language models (GPT-2/3 style):
    ``lr = peak_lr * step / warmup_steps`` for ``step <= warmup_steps``, then
    ``min_lr + (peak_lr - min_lr) * (1 + cos(pi * progress)) / 2`` where
    ``progress`` goes from 0 at the end of warm-up to 1 at ``total_steps``.
    Steps past ``total_steps`` stay at ``min_lr``.
    """

    peak_lr: float
    warmup_steps: int
    total_steps: int
    min_lr: float = 0.0

    def __post_init__(self) -> None:
        if not self.peak_lr > 0:
            raise ValueError(f"peak_lr must be positive, got {self.peak_lr!r}")
        if not 0 <= self.min_lr <= self.peak_lr:
            raise ValueError(f"min_lr must be in [0, peak_lr], got {self.min_lr!r}")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be a non-negative integer, got {self.warmup_steps!r}")
        _check_positive_int("total_steps", self.total_steps)
        if self.warmup_steps > self.total_steps:
            raise ValueError(
                f"warmup_steps ({self.warmup_steps}) must not exceed total_steps ({self.total_steps})"
            )

    def __call__(self, step: int) -> float:
        _check_step(step)
        if step <= self.warmup_steps:
            return self.peak_lr * step / self.warmup_steps
        decay_steps = self.total_steps - self.warmup_steps
        progress = min(1.0, (step - self.warmup_steps) / decay_steps) if decay_steps else 1.0
        return self.min_lr + 0.5 * (self.peak_lr - self.min_lr) * (1.0 + math.cos(math.pi * progress))


class ScheduledLR(torch.optim.lr_scheduler.LRScheduler):
    """Drive an optimizer's learning rate from a ``schedule(step) -> lr`` callable.

    Call ``scheduler.step()`` after each ``optimizer.step()``, as with any torch
    scheduler. Right after construction the optimizer holds the lr for update 1;
    after ``k`` calls to ``step()`` it holds the lr for update ``k + 1``. Every
    parameter group gets the same lr.

    The state dict holds only counters (no callable), so it is plain data that
    :mod:`attnlab.training.checkpoint` stores as JSON; the schedule itself is
    rebuilt from the training config on resume.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, schedule: Callable[[int], float]) -> None:
        self.schedule = schedule
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:
        # ``last_epoch`` is 0 after construction, i.e. before the first update.
        lr = self.schedule(self.last_epoch + 1)
        return [lr for _ in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        return {"last_epoch": self.last_epoch, "_step_count": self._step_count, "_last_lr": list(self._last_lr)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        missing = {"last_epoch", "_step_count", "_last_lr"} - set(state_dict)
        if missing:
            raise ValueError(f"scheduler state_dict is missing {sorted(missing)}")
        self.last_epoch = int(state_dict["last_epoch"])
        self._step_count = int(state_dict["_step_count"])
        self._last_lr = [float(lr) for lr in state_dict["_last_lr"]]
