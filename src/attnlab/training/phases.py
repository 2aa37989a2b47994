"""How a training command spends its ``--max-minutes``: one policy for every ``attnlab train`` verb.

The budget covers the whole command, from the verb's start (reading data, vocabularies,
auxiliary models, training, final scoring), not only the training loop:

* :func:`command_budget` makes the command's one :class:`~attnlab.training.budget.Budget`
  when the verb starts (``--max-minutes`` checked, the flag named in the error);
* an auxiliary model (text-to-image's VQ-VAE and attribute reader) trains on
  :func:`portion` of the budget: a stated fraction of the whole, and stops when it is spent;
* the main model's training (:func:`train_within`) gets what is left, less
  :data:`SCORING_SHARE` of the budget kept for final scoring when the verb scores;
* final scoring (:class:`Scoring`) runs batch by batch and stops before a batch that
  would not fit in the time left (after at least one batch); under a budget the items are
  taken in a fixed random order, so a cut leaves a uniform sample, and the printed line
  and ``results.json`` say on how many of how many items it scored. Without a budget every
  item is scored, in order. Every scoring phase shows a labelled progress bar in its own unit.

:func:`budget_plan` is the line a verb prints before it starts: how the budget is split
and what lies outside it (:data:`OUTSIDE`: Python's start and torch's import, the update
or batch that crosses a limit, writing the model files); :func:`budget_report` the line
it ends with (the time taken against the budget).

The clock of every command budget is this module's :func:`now` (``time.monotonic``);
tests replace ``attnlab.training.phases.clock`` to drive a whole command with a fake clock.

The same calls say what the command is doing (:func:`stage`): preparing (from
:func:`command_budget`: data, vocabulary, model), training (:func:`train_within`: the main
model or an auxiliary one), after training, final scoring (:class:`Scoring`). An interrupt
outside the training loop (Ctrl-C during the data or the final scoring) is reported by the
CLI with that stage and the command that continues (cli/main.py ``interrupt_message``).
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from attnlab.training.budget import Budget

__all__ = ["OUTSIDE", "SCORING_SHARE", "Scoring", "budget_plan", "budget_report", "command_budget", "describe_seconds",
           "portion", "reset_stage", "scoring_reserve", "stage", "take", "train_within"]

SCORING_SHARE = 0.10
"""The fraction of a command's budget kept for final scoring (verbs that score a test split)."""

OUTSIDE = ("outside it: starting Python and importing torch, the update (with its validation and checkpoint) or "
           "scoring batch that crosses a limit, the end-of-run check (one forward pass, and one held-out pass if "
           "the run has not validated yet), and writing the model files")

clock: Callable[[], float] = time.monotonic
"""The clock of command budgets (tests replace it)."""


def now() -> float:
    return clock()


_STAGE: list[str | None] = [None]
"""What the running training command is doing (one process runs one command)."""

PREPARING = "while preparing (reading the data, building the vocabulary and the model)"


def stage() -> str | None:
    """What the running command is doing now, as it ends "interrupted ...": :data:`PREPARING`,
    ``"while training"`` (``"while training (VQ-VAE)"``: an auxiliary model), ``"after
    training"``, ``"during the final scoring (LABEL)"``; None before a training command starts."""
    return _STAGE[0]


def reset_stage() -> None:
    """Forget the stage (the CLI calls it as each verb starts)."""
    _STAGE[0] = None


@contextlib.contextmanager
def _in_stage(name: str, after: str | None = None) -> Iterator[None]:
    """The stage is ``name`` inside the block; afterwards ``after`` if it ended normally
    (else it stays ``name``: an interrupt says where it happened), or the previous one."""
    previous = _STAGE[0]
    _STAGE[0] = name
    yield
    _STAGE[0] = previous if after is None else after


def command_budget(minutes: float | None, flag: str = "--max-minutes") -> Budget:
    """The command's budget from ``--max-minutes`` (None: unlimited), started now; the
    command is :data:`PREPARING` until it trains (:func:`stage`)."""
    if minutes is not None and not (isinstance(minutes, (int, float)) and math.isfinite(minutes) and minutes > 0):
        raise ValueError(f"{flag}={minutes!r} must be a positive number of minutes")
    if _STAGE[0] is None:
        _STAGE[0] = PREPARING
    return Budget(minutes, clock=now)


def portion(budget: Budget, fraction: float) -> Budget:
    """``fraction`` of the *whole* budget (not of what is left), starting now, capped at what
    is left; unlimited when ``budget`` is."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    left = budget.left()
    if left is None or left <= 0:
        return budget.share(1.0)
    return budget.share(min(1.0, fraction * budget.seconds / left))


def scoring_reserve(budget: Budget, share: float = SCORING_SHARE) -> float:
    """Seconds of ``budget`` kept for final scoring (0 without a budget)."""
    return 0.0 if budget.seconds is None else share * budget.seconds


def describe_seconds(seconds: float) -> str:
    """``"48 s"``, ``"2 min"``, ``"1 min 38 s"``."""
    seconds = max(0, round(seconds))
    minutes, rest = divmod(seconds, 60)
    if not minutes:
        return f"{rest} s"
    return f"{minutes} min" + (f" {rest} s" if rest else "")


def budget_plan(budget: Budget, *, parts: Sequence[tuple[str, float]] = (), main: str = "training",
                scoring: str | None = None, scoring_share: float = SCORING_SHARE) -> str | None:
    """The line a verb prints when it starts: how ``budget`` is split. ``parts`` are the
    auxiliary phases with their fractions of the whole budget; ``main`` gets the rest, less
    ``scoring_share`` when ``scoring`` (what the final scoring does) is given. None without
    a budget."""
    if budget.seconds is None:
        return None
    total = budget.seconds
    split = [f"{name} up to {describe_seconds(fraction * total)} ({100 * fraction:.0f} %)" for name, fraction in parts]
    rest = f"{main}: the rest" if parts else f"{main} (and loading)"
    if scoring:
        rest += (f" less the last {describe_seconds(scoring_share * total)} ({100 * scoring_share:.0f} %), kept for "
                 f"{scoring} on as many items as fit (at least one batch; a random sample when cut)")
    split.append(rest)
    return f"time budget: {describe_seconds(total)} for the whole command: " + "; ".join(split) + f"; {OUTSIDE}"


def budget_report(budget: Budget) -> str | None:
    """The line a verb ends with: the time the command took against its budget (None without one)."""
    if budget.seconds is None:
        return None
    return (f"time: {describe_seconds(budget.elapsed())} of the {describe_seconds(budget.seconds)} budget "
            "(writing the model files included)")


def train_within(trainer, budget: Budget, *, reserve: float = 0.0, resume: bool = False,
                 say: Callable[[str], None] | None = None, what: str = "training") -> dict[str, float]:
    """``trainer.train(resume=resume)`` within ``budget``, keeping ``reserve`` seconds of it
    for what comes after (final scoring). The one place a verb's budget reaches the Trainer.

    The training's share is given as ``TrainConfig.max_minutes`` (what is left now, less
    ``reserve``; at least one update); the Trainer's own ``budget`` (its ``RunClock``) shows
    the whole command's and ends the run when either is spent.
    """
    left = budget.left()
    if left is not None:
        seconds = left - reserve
        if say is not None:
            spent, notes = budget.elapsed(), []
            if spent >= 0.5:
                notes.append(f"{describe_seconds(spent)} of it already spent")
            if reserve:
                notes.append(f"{describe_seconds(reserve)} kept for scoring")
            say(f"{what}: up to {describe_seconds(max(0.0, seconds))} of the budget"
                + (f" ({'; '.join(notes)})" if notes else "")
                + (": the budget is spent already, so one update" if seconds <= 0 else ""))
        trainer.config.max_minutes = max(round(seconds / 60.0, 4), 1e-4)  # 4 decimals: the bar shows it
    part = "training" if what == "training" else f"training ({what})"
    with _in_stage(f"while {part}", after=f"after {part}"):
        return trainer.train(resume=resume)


class Scoring:
    """Final scoring of ``total`` items in batches of ``batch_size``, within ``budget``.

    Iterating yields ``LongTensor`` batches of item indices. Without a budget (or an
    unlimited one) every item comes, in order. With one, items come in a fixed random order
    (seed ``seed``) and the iteration stops before a batch that the time left would not
    hold (judged by the mean time of the batches so far), or once the budget is spent,
    after at least ``minimum_batches`` batches. The first batch holds ``first_batch`` items
    (default ``batch_size``): the least a cut scoring scores when the budget is spent already,
    and the first measure of an item's time. A labelled tqdm bar (``label``, ``unit``)
    shows the progress on stderr unless ``progress`` is false.

    After the loop: :attr:`scored`, :attr:`cut`, :meth:`indices` (the items scored, in the
    order scored), :meth:`summary` for the printed line and :meth:`record` for results.json.
    """

    def __init__(self, label: str, total: int, *, unit: str, batch_size: int, budget: Budget | None = None,
                 progress: bool = True, minimum_batches: int = 1, first_batch: int | None = None,
                 seed: int = 0) -> None:
        if batch_size < 1 or (first_batch is not None and first_batch < 1):
            raise ValueError(f"batch_size={batch_size} and first_batch={first_batch} must be >= 1")
        self.label, self.total, self.unit, self.batch_size = label, int(total), unit, batch_size
        self.first_batch = batch_size if first_batch is None else min(first_batch, batch_size)
        self.budget = budget if budget is not None and budget.limited else None
        self.progress, self.minimum_batches = progress, minimum_batches
        self.order = (torch.randperm(self.total, generator=torch.Generator().manual_seed(seed))
                      if self.budget is not None else torch.arange(self.total))
        self.scored = 0
        self.cut = False
        self.seconds = 0.0

    def __iter__(self) -> Iterator[torch.Tensor]:
        from tqdm.auto import tqdm

        bar = tqdm(total=self.total, desc=self.label, unit=self.unit, file=sys.stderr, leave=False,
                   disable=not self.progress, dynamic_ncols=True)
        batches = 0
        previous = _STAGE[0]
        _STAGE[0] = f"during the final scoring ({self.label})"
        try:
            starts = [0, *range(self.first_batch, self.total, self.batch_size)] if self.total else []
            for start, stop in zip(starts, [*starts[1:], self.total]):
                index = self.order[start:stop]
                if self.budget is not None and batches >= self.minimum_batches:
                    left = self.budget.left()
                    # the next batch at the mean time per item so far
                    needed = self.seconds / self.scored * len(index) if self.scored else 0.0
                    if left <= 0 or needed > left:
                        self.cut = True
                        break
                started = now()
                yield index
                self.seconds += max(0.0, now() - started)
                self.scored += len(index)
                batches += 1
                bar.update(len(index))
            _STAGE[0] = previous
        finally:
            bar.close()

    def indices(self) -> torch.Tensor:
        return self.order[:self.scored]

    def summary(self, noun: str) -> str:
        """``"180 test images"`` or ``"62 of 180 test images (a random sample: the time budget ran out)"``."""
        if not self.cut:
            return f"{self.scored:,d} {noun}"
        return f"{self.scored:,d} of {self.total:,d} {noun} (a random sample: the time budget ran out)"

    def record(self) -> dict[str, Any]:
        """What results.json says about the scoring: ``scored`` of ``total``, ``cut_by_budget``."""
        return {"scored": self.scored, "total": self.total, "cut_by_budget": self.cut,
                "order": "random (seed fixed)" if self.budget is not None else "in order",
                "seconds": round(self.seconds, 2)}


PER_ITEM_FIELDS = ("images", "labels", "objects", "masks", "captions", "unseen", "files")
"""The fields of the data sets (ImageSet, SceneSet, CaptionSet) that hold one entry per item."""


def take(data, indices: torch.Tensor):
    """The items ``indices`` of a data set dataclass (a copy with every per-item field of
    :data:`PER_ITEM_FIELDS` indexed; the other fields, e.g. ``classes``, kept)."""
    import dataclasses

    count, rows = len(data), indices.tolist()
    changes = {}
    for name in PER_ITEM_FIELDS:
        value = getattr(data, name, None)
        if isinstance(value, torch.Tensor) and value.dim() and len(value) == count:
            changes[name] = value[indices]
        elif isinstance(value, list) and len(value) == count:
            changes[name] = [value[i] for i in rows]
    return dataclasses.replace(data, **changes)
