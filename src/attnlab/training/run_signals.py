"""Stopping a training loop by signal: :class:`TrainingInterrupted` and :class:`StopSignals`.

While :meth:`Trainer.train <attnlab.training.trainer.Trainer.train>` runs in the main
thread, SIGINT and SIGTERM only set a flag (:attr:`StopSignals.number`); the loop finishes
the current update, writes a checkpoint and raises :class:`TrainingInterrupted`. A second
signal raises it at once (the checkpoints on disk are complete: they are written
atomically), except under torchrun, which forwards a Ctrl-C to workers that had the
terminal's already. :meth:`StopSignals.agree` makes every rank see the same decision
after each update (one small all-reduce), so all ranks stop at the same step.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from attnlab.training.distributed import DistributedContext, all_reduce_sum

__all__ = ["StopSignals", "TrainingInterrupted"]


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by SIGINT or SIGTERM (see :meth:`Trainer.train`).

    ``checkpoint`` is the checkpoint to resume from (written at ``step`` unless
    ``immediate``: a second signal stops at once and leaves the last complete one, or
    None when there is none). A KeyboardInterrupt, so that a verb's ``except Exception``
    never swallows it; the CLI prints :meth:`describe` and exits with ``exit_code``
    (128 + the signal number: 130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, signal_number: int, *, step: int, out_dir: Path, checkpoint: Path | None,
                 immediate: bool = False) -> None:
        super().__init__(signal_number, step)
        self.signal_number = int(signal_number)
        self.step, self.out_dir, self.checkpoint, self.immediate = step, Path(out_dir), checkpoint, immediate

    @property
    def exit_code(self) -> int:
        return 128 + self.signal_number

    def describe(self) -> str:
        name = signal.Signals(self.signal_number).name
        if self.immediate:
            where = (f"the last complete checkpoint is {self.checkpoint}" if self.checkpoint is not None
                     else f"no checkpoint was written under {self.out_dir}")
            return f"stopped at once by a second {name} during step {self.step + 1}; {where}"
        if self.checkpoint is None:
            return f"stopped by {name} at step {self.step}; no checkpoint could be written"
        return f"stopped by {name} at step {self.step}; checkpoint written: {self.checkpoint}"



class StopSignals:
    """SIGINT/SIGTERM handlers for one training call, and the stop flag they set.

    ``at_once(number)`` builds the exception a second signal raises at once (the Trainer's
    :class:`TrainingInterrupted` with ``immediate=True`` and its current step).
    """

    def __init__(self, context: DistributedContext, at_once: Callable[[int], BaseException]) -> None:
        self.context = context
        self.at_once = at_once
        self.number: int | None = None
        """The signal that asked to stop (set by a handler, or by :meth:`agree` from another rank)."""

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """SIGINT/SIGTERM set :attr:`number` (cleared on entry), which the loop checks after
        each update; a second one raises at once. Only the main thread may install handlers;
        others keep Python's. The previous handlers are restored on exit."""
        self.number = None
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(number: int, frame: Any) -> None:
            if self.number is not None and self.context.is_distributed:
                # torchrun forwards a Ctrl-C to every worker, which has had the terminal's own
                # already: a repeat is not a second request. The ranks stop together after this
                # update; torchrun kills them itself if its shutdown timeout passes first.
                return
            if self.number is not None:
                raise self.at_once(number)
            self.number = number
            if self.context.is_main:
                sys.stderr.write(f"\n{signal.Signals(number).name} received: stopping after this update with a "
                                 "checkpoint (interrupt again to stop at once)\n")
                sys.stderr.flush()

        previous = {}
        for number in (signal.SIGINT, signal.SIGTERM):
            previous[number] = signal.signal(number, handler)
        try:
            yield
        finally:
            for number, old in previous.items():
                signal.signal(number, old if old is not None else signal.SIG_DFL)

    def agree(self, out_of_time: bool, checkpoint_due: bool) -> tuple[bool, bool, bool]:
        """``(out of time, a timed checkpoint is due, a signal asked to stop)``, the same on
        every rank: rank 0's clock decides the first two (this rank's ``out_of_time`` and
        ``checkpoint_due``), a signal on any rank the third (one small all-reduce per update
        under torchrun)."""
        over, due, stop = out_of_time, checkpoint_due, self.number is not None
        if self.context.is_distributed:
            main = self.context.is_main
            flags = torch.tensor([float(over and main), float(due and main), float(stop),
                                  float(self.number or 0) if stop else 0.0], dtype=torch.float64)
            flags = all_reduce_sum(flags, self.context).tolist()
            over, due, stop = flags[0] > 0, flags[1] > 0, flags[2] > 0
            if stop and self.number is None:  # another rank got it: stop with the same kind of exit
                self.number = int(round(flags[3] / flags[2]))
        return over, due, stop
