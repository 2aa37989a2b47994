"""A wall-clock budget for a whole command: training, auxiliary models and final scoring.

``--max-minutes`` bounds the command a user typed, not only the training loop inside it.
A verb makes one :class:`Budget` when it starts and hands it (or a :meth:`Budget.share`
of it) to every phase: the Trainer stops when its budget is spent, auxiliary models train
on a share, and final scoring either fits in what is left or is cut to fit (and says so).

The clock is injectable (``clock=``), so tests drive a budget with a fake clock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = ["Budget"]


class Budget:
    """``minutes`` of wall-clock time from now (``None``: unlimited).

    >>> budget = Budget(2.0)
    >>> budget.left()          # seconds left, never negative; None when unlimited
    >>> budget.spent()         # True once the time is up
    >>> part = budget.share(0.25)   # a quarter of what is left, starting now
    """

    def __init__(self, minutes: float | None, *, clock: Callable[[], float] = time.monotonic,
                 _seconds: float | None = None) -> None:
        if minutes is not None and not (isinstance(minutes, (int, float)) and math.isfinite(minutes) and minutes > 0):
            raise ValueError(f"max_minutes must be a positive number or None, got {minutes!r}")
        self.clock = clock
        self.started = clock()
        self.seconds = _seconds if _seconds is not None else (None if minutes is None else 60.0 * float(minutes))

    @property
    def minutes(self) -> float | None:
        return None if self.seconds is None else self.seconds / 60.0

    @property
    def limited(self) -> bool:
        return self.seconds is not None

    def elapsed(self) -> float:
        """Seconds since the budget started."""
        return max(0.0, self.clock() - self.started)

    def left(self) -> float | None:
        """Seconds left (0 when spent), or ``None`` for an unlimited budget."""
        if self.seconds is None:
            return None
        return max(0.0, self.seconds - self.elapsed())

    def spent(self) -> bool:
        left = self.left()
        return left is not None and left <= 0.0

    def share(self, fraction: float) -> Budget:
        """A budget of ``fraction`` (0 < fraction <= 1) of the time left, starting now, on
        the same clock; unlimited when this one is."""
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
        left = self.left()
        return Budget(None, clock=self.clock, _seconds=None if left is None else left * fraction) \
            if left is None or left > 0 else _spent(self.clock)

    def __repr__(self) -> str:
        if self.seconds is None:
            return "Budget(unlimited)"
        return f"Budget({self.seconds / 60:.3g} min, {self.left():.1f} s left)"


def _spent(clock: Callable[[], float]) -> Budget:
    budget = Budget(None, clock=clock, _seconds=0.0)
    return budget
