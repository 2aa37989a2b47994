"""A model-agnostic training loop: Adam/AdamW + schedule, accumulation, checkpoints, resume, DDP.

The trainer knows nothing about translation, language modelling or images. It
needs three things from the model family:

* ``model``: any ``nn.Module``;
* ``loss_fn(model, batch) -> (loss_sum, num_tokens, logs)``: the summed loss
  of one micro-batch (a scalar tensor with gradient), the number of target
  tokens it counted, and a dict of further *sums* to report (e.g.
  ``{"nll": nll_sum}``). It must call ``model(...)`` (the forward) rather than
  other methods or attributes, because under torchrun ``model`` is the
  DistributedDataParallel wrapper. The trainer reports every log as a
  per-token mean, and a log named ``"nll"`` also as perplexity ``"ppl"``;
* a batch source (:mod:`attnlab.training.batches`) yielding dicts of tensors.

One update (section 5 of the paper, plus the usual accumulation)::

    for each of grad_accum_steps micro-batches:   # this rank's share
        loss_sum, n, logs = loss_fn(model, batch); loss_sum.backward()
    N = number of target tokens over all micro-batches of all ranks
    grad = (sum of loss_sum gradients) / N        # sum, then divide once
    clip (optional); Adam/AdamW step (training/optim.py); schedule step

Dividing by the *global* token count after accumulating sums makes the update
independent of how the batch was cut into micro-batches and processes (up to
float summation order).

The Trainer is a composition of named parts, each in its own module:

* :mod:`~attnlab.training.train_config`: :class:`TrainConfig` (and :class:`TrainConfigError`);
* :mod:`~attnlab.training.run_signals`: SIGINT/SIGTERM while training (:class:`StopSignals`,
  :class:`TrainingInterrupted`), and the ranks' agreement on when to stop;
* :mod:`~attnlab.training.run_budget`: the time budget of a call (:class:`RunClock`) and a
  schedule fitted to the run it buys (:func:`fit_warmup`);
* :mod:`~attnlab.training.metrics_log`: ``metrics.jsonl`` (and TensorBoard), repaired on resume;
* :mod:`~attnlab.training.progress`: the progress bar and the ``done:`` line;
* :mod:`~attnlab.training.divergence`: non-finite updates and the final weights' check;
* :mod:`~attnlab.training.sums`: token-weighted sums of losses and logs;
* :mod:`~attnlab.training.batches` (:class:`RankBatchStream`: this rank's micro-batches) and
  :mod:`~attnlab.training.checkpoint` (the training state on disk; what may change on resume).

Time is read on this module's ``time.perf_counter`` (:func:`_now`), which every part is given.
"""

from __future__ import annotations

import contextlib
import math
import random
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnlab.files import OutputLock, refuse_symlinks
from attnlab.training.allocator import tune_allocator
from attnlab.training.batches import Batch, BatchSource, RankBatchStream, to_device
from attnlab.training.budget import Budget
from attnlab.training.checkpoint import (
    changed_settings,
    latest_checkpoint,
    load_training_checkpoint,
    restore_rng_state,
    save_training_checkpoint,
)
from attnlab.training.distributed import DistributedContext, init_distributed, wrap_model
from attnlab.training.divergence import DIVERGED_RATIO, DivergenceGuard
from attnlab.training.metrics_log import METRICS_FILE, MetricsLog
from attnlab.training.optim import build_optimizer
from attnlab.training.progress import Progress, summary_line
from attnlab.training.run_budget import RunClock, ScheduleFitter
from attnlab.training.run_signals import StopSignals, TrainingInterrupted
from attnlab.training.schedules import ScheduledLR
from attnlab.training.sums import RecentUpdates, Sums, Window
from attnlab.training.train_config import TrainConfig, TrainConfigError

__all__ = ["LossFn", "TrainConfig", "TrainConfigError", "Trainer", "TrainingInterrupted"]

LossFn = Callable[[torch.nn.Module, Batch], tuple[torch.Tensor, int, Mapping[str, Any]]]
"""``loss_fn(model, batch) -> (loss_sum, num_tokens, logs)``; see the module docstring."""

TRAINER_OUTPUTS = (METRICS_FILE, "checkpoints", "tensorboard")
"""What the Trainer writes inside ``out_dir`` (none of them may be a symlink)."""

_Progress = Progress  # the name tests spy on (tests/families/*/test_*_cli.py)


def _now() -> float:
    """The Trainer's clock: this module's ``time.perf_counter`` (tests replace ``time`` here)."""
    return time.perf_counter()


class Trainer:
    """Train any ``nn.Module`` with the paper's optimiser; see the module docstring.

    Args:
        model: the module to train (placed on its device by the caller; under
            torchrun with nccl it is moved to ``cuda:LOCAL_RANK``).
        loss_fn: ``loss_fn(model, batch) -> (loss_sum, num_tokens, logs)``.
        train_batches: a :class:`~attnlab.training.batches.BatchSource`.
        config: a :class:`TrainConfig`.
        valid_batches: an iterable of batches, iterated fully at each validation.
        model_config: written as ``config.json`` into every checkpoint, making
            each a loadable model directory. Defaults to ``model.config.to_dict()``
            when the model has one (every attnlab model does), so checkpoints
            open with ``attnlab.load_model``.
        model_files: files (e.g. the tokenizer) copied into every checkpoint.
        context: the process group; by default discovered from torchrun's
            environment (a single process when there is none).
        run_info: plain data describing the run (data fingerprints, options), stored
            in every checkpoint as ``run_info`` for the caller to compare on resume.
        budget: a :class:`~attnlab.training.budget.Budget` (a whole command's
            ``--max-minutes``): when given, it decides when training stops (instead of
            ``config.max_minutes``' own clock, which starts with :meth:`train`) and the
            progress bar's time left counts down to it.
    """

    DIVERGED_RATIO = DIVERGED_RATIO
    """See :data:`attnlab.training.divergence.DIVERGED_RATIO`."""

    def __init__(
        self,
        model: torch.nn.Module,
        loss_fn: LossFn,
        train_batches: BatchSource,
        config: TrainConfig,
        *,
        valid_batches: Iterable[Batch] | None = None,
        model_config: Mapping[str, Any] | None = None,
        model_files: Sequence[str | Path] = (),
        context: DistributedContext | None = None,
        run_info: Mapping[str, Any] | None = None,
        budget: Budget | None = None,
    ) -> None:
        if not isinstance(train_batches, BatchSource):
            raise ValueError(
                "train_batches must have __iter__, state_dict and load_state_dict "
                f"(see attnlab.training.batches), got {type(train_batches).__name__}"
            )
        if config.validate_every is not None and valid_batches is None:
            raise ValueError("valid_batches is required when config.validate_every is set")
        self.config = config
        if config.tune_malloc:
            tune_allocator()
        self.context = context if context is not None else init_distributed()
        if self.context.device is not None:
            model.to(self.context.device)
        self.model = model
        self.train_model = wrap_model(model, self.context)
        if config.compile:  # the training forward only; validation and checkpoints use the bare model
            self.train_model = torch.compile(self.train_model)
        self.loss_fn = loss_fn
        self.train_batches = train_batches
        self.valid_batches = valid_batches
        if model_config is None and callable(getattr(getattr(model, "config", None), "to_dict", None)):
            model_config = model.config.to_dict()
        self.model_config = dict(model_config) if model_config is not None else None
        self.model_files = list(model_files)
        self.run_info = dict(run_info) if run_info is not None else None
        self.out_dir = Path(config.out_dir)
        self.checkpoint_root = self.out_dir / "checkpoints"

        schedule = config.build_schedule()
        self.optimizer = build_optimizer(model, config.optimizer, lr=schedule(1), betas=config.betas, eps=config.eps,
                                         weight_decay=config.weight_decay)
        self.scheduler = ScheduledLR(self.optimizer, schedule)
        self.step = 0
        self.budget = budget
        self._schedule = ScheduleFitter(config, self.scheduler, self._say)
        self.last_validation: dict[str, float] | None = None
        self.validation_step: int | None = None
        self.resumed_from: int | None = None
        self.start_record: dict[str, Any] | None = None
        """Logged once as step 0 of a fresh run (a fine-tuning run's starting model's held-out
        figures: ``start_valid_loss``, ...), so metrics.jsonl holds the before beside the after."""
        self.run_seconds = 0.0
        self.run_updates = 0
        # The parts (see the module docstring).
        self._stream = RankBatchStream(train_batches, self.context)
        self._signals = StopSignals(self.context, self._stopped_at_once)
        self._guard = DivergenceGuard(self.out_dir, self.checkpoint_root, config.max_nonfinite_updates, self.context)
        self._metrics = MetricsLog(self.out_dir, tensorboard=config.tensorboard)
        self._recent = RecentUpdates(config.log_every)
        self._last_batch: Batch | None = None

    # ------------------------------------------------------------------ #
    @property
    def schedule_fit(self) -> dict[str, Any] | None:
        """The schedule the Trainer chose when the configured warm-up did not fit the run
        (``warmup_steps``, ``lr_scale``, ``total_steps``, ``reason``); None when it fitted.
        Stored in every checkpoint, so a resumed run continues the same schedule."""
        return self._schedule.fit

    @schedule_fit.setter
    def schedule_fit(self, fit: dict[str, Any] | None) -> None:
        self._schedule.fit = fit

    @property
    def device(self) -> torch.device:
        return next((p.device for p in self.model.parameters()), torch.device("cpu"))

    def _to_device(self, batch: Batch) -> Batch:
        return to_device(batch, self.device)

    def _autocast(self) -> contextlib.AbstractContextManager:
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.config.bf16)

    def _seed(self, offset: int = 0) -> None:
        # Different ranks get different dropout masks, as independent workers would.
        seed = self.config.seed + self.context.rank + offset
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)

    def _say(self, message: str) -> None:
        """A line on stderr from the main process."""
        if self.context.is_main:
            print(message, file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ #
    def train(self, *, resume: bool = False) -> dict[str, float]:
        """Run until ``config.max_steps`` updates; returns the last logged metrics.

        With ``resume=True`` training continues from the latest checkpoint in
        ``out_dir/checkpoints`` (model, optimizer, schedule, data position, RNG),
        or starts fresh when there is none; it says from which step, or that there is
        nothing to do when that checkpoint is already at ``max_steps``. On CPU, N steps +
        resume + N steps ends with bit-identical parameters to 2N uninterrupted steps.
        Without ``resume``, an ``out_dir`` that already holds checkpoints is refused.
        ``metrics.jsonl`` continues from the checkpoint's step: lines a killed run logged
        past it are dropped (atomically), so no step is logged twice.

        The main process holds ``out_dir``'s lock (:class:`attnlab.files.OutputLock`)
        throughout: a second run writing into the same ``out_dir`` is refused. An
        update whose loss or gradient norm is NaN or infinite is skipped (the step
        still counts) with a warning; ``config.max_nonfinite_updates`` such updates in
        a row, or a run whose last update was skipped, stop training with a ValueError
        ("diverged"), keeping the last finite checkpoint.

        Interrupts: called from the main thread, SIGINT and SIGTERM finish the current
        update, write a checkpoint and raise :class:`TrainingInterrupted`; a second signal
        raises it at once (the checkpoints on disk are always complete: they are written
        atomically). Under torchrun a signal on any rank stops every rank at the same
        step, and a repeated signal is ignored (torchrun forwards a Ctrl-C to workers that
        got the terminal's already; it kills them itself after its shutdown timeout). The
        previous handlers are restored when ``train`` returns.

        Schedule: when the warm-up is longer than the run (``max_steps``, or the updates
        the time budget buys, estimated after a few updates), the warm-up is shortened to
        a tenth of the run (a Noam schedule keeps its peak learning rate, a cosine one
        decays over the run) and a line says so; see :attr:`schedule_fit`.

        A run that has validation data and did not validate during this call validates
        once at the end. :meth:`summary` describes the run in one line.
        """
        lock = OutputLock(self.out_dir, purpose="training") if self.context.is_main else contextlib.nullcontext()
        with lock, self._signals.installed():
            if self.context.is_main:
                refuse_symlinks(self.out_dir, TRAINER_OUTPUTS)
            return self._train(resume)

    def _stopped_at_once(self, number: int) -> TrainingInterrupted:
        """What a second signal raises at once: the last complete checkpoint is what remains."""
        return TrainingInterrupted(number, step=self.step, out_dir=self.out_dir,
                                   checkpoint=latest_checkpoint(self.checkpoint_root), immediate=True)

    def _train(self, resume: bool) -> dict[str, float]:
        checkpoint = latest_checkpoint(self.checkpoint_root)
        if checkpoint is not None and not resume:
            # Starting over here would interleave two runs' checkpoints and metrics.
            raise ValueError(
                f"{self.out_dir} already holds checkpoints (latest {checkpoint.name}); continue that run with "
                "--resume (Trainer.train(resume=True) in Python), or choose another output directory"
            )
        self.run_seconds, self.run_updates = 0.0, 0
        self._guard.start(self.config.max_nonfinite_updates)
        if checkpoint is not None:
            self.load_checkpoint(checkpoint)
            self.resumed_from = self.step
            if self.step >= self.config.max_steps:
                self._say(f"nothing to do: {checkpoint} is already at step {self.step:,}, and the run stops at "
                          f"{self.config.max_steps:,} updates (raise max_steps to train further)")
                return {"step": self.step}
            self._say(f"resuming from {checkpoint} at step {self.step:,} (of {self.config.max_steps:,})"
                      + (f"; schedule as chosen then: warm-up {self.schedule_fit['warmup_steps']:,} updates"
                         if self.schedule_fit else ""))
        else:
            self._seed()
        last: dict[str, float] = {"step": self.step}
        if self.step >= self.config.max_steps:
            return last
        if self.step == 0 and self.schedule_fit is None:
            self._schedule.fit_run(self.config.max_steps, f"a {self.config.max_steps:,}-update run", self.step)
        if self.context.is_main:
            self._metrics.open(self.step)
        if self.step == 0 and self.start_record:
            self._metrics.write({"step": 0, **self.start_record})
        progress = Progress(self.config, initial=self.step, main=self.context.is_main, budget=self.budget, clock=_now)
        window = Window()
        saved_at = None
        clock = RunClock(self.budget, self.config.max_minutes, self.config.checkpoint_every_minutes,
                                       _now)
        started = saved_clock = clock.started
        first_done = None
        stopped_by = None
        validated = False
        try:
            while self.step < self.config.max_steps:
                lr = self.optimizer.param_groups[0]["lr"]
                update = self._update()
                self.step += 1
                self.run_updates += 1
                window.add(update)
                self._guard.note(update["sums"])
                self._recent.add(update["sums"])
                if self.step % self.config.log_every == 0 or self.step == self.config.max_steps:
                    last = {"step": self.step, "lr": lr, **window.summary()}
                    window = Window()
                    progress.update(last, lr, started, force=True)
                    self._metrics.write(last)
                else:
                    progress.update(window, lr, started)
                if self.config.validate_every and self.step % self.config.validate_every == 0:
                    valid = self._validate_and_log(progress)
                    last.update(valid)
                    validated = True
                if self.config.checkpoint_every and self.step % self.config.checkpoint_every == 0:
                    self.save_checkpoint()
                    saved_at, saved_clock = self.step, _now()
                out_of_time, save_due, stop = self._signals.agree(clock.out_of_time(),
                                                                  clock.checkpoint_due(saved_clock))
                if stop:
                    stopped_by = "signal"
                    break
                if out_of_time:
                    what = (f"the {clock.minutes:g}-minute budget is spent" if clock.minutes
                            else "the time budget is spent")
                    progress.write(f"stopping at step {self.step}: {what}")
                    stopped_by = "max_minutes"
                    break
                if save_due and saved_at != self.step:
                    self.save_checkpoint()
                    saved_at, saved_clock = self.step, _now()
                if first_done is None:
                    first_done = clock.budget_clock()
                elif self.run_updates == 3 and self.schedule_fit is None:  # the first update may be slow
                    self._schedule.fit_budget(clock, self.context, self.step, (clock.budget_clock() - first_done) / 2)
            if window.sums.tokens:  # the updates since the last log line: the last line is never stale
                last = {"step": self.step, "lr": self.optimizer.param_groups[0]["lr"], **window.summary()}
                self._metrics.write(last)
                window = Window()
            if self._guard.nonfinite_run:
                raise self._guard.error(f"the last update (step {self.step}) had a NaN or infinite loss or gradient")
            problem = (self._guard.final_check(self.model, self.loss_fn, self._last_batch, self._autocast,
                                               self.DIVERGED_RATIO) if stopped_by != "signal" else None)
            if problem is not None:
                raise self._guard.error(f"the weights after the last update (step {self.step}) give {problem}")
            if saved_at != self.step:
                self.save_checkpoint()
            if stopped_by != "signal" and self._signals.agree(clock.out_of_time(), clock.checkpoint_due(_now()))[2]:
                stopped_by = "signal"  # a signal during the last update or its checkpoint
            if stopped_by == "signal":
                self._metrics.write({"step": self.step, "stopped": signal.Signals(self._signals.number).name})
                raise TrainingInterrupted(self._signals.number or signal.SIGINT, step=self.step,
                                          out_dir=self.out_dir, checkpoint=latest_checkpoint(self.checkpoint_root))
            if not validated and self.config.validate_every and self.valid_batches is not None:
                last.update(self._validate_and_log(progress))  # a run shorter than one validation period
            if stopped_by == "max_minutes":
                self._metrics.write({"step": self.step, "stopped": "max_minutes"})
            if self.last_validation is not None and not math.isfinite(self.last_validation.get("valid_loss", 0.0)):
                raise self._guard.error(f"the held-out loss at step {self.validation_step} is not finite")
        finally:
            self.run_seconds = _now() - started
            progress.close()
            self._metrics.close()
        return last

    def _validate_and_log(self, progress: Progress) -> dict[str, float]:
        valid = self.validate()
        self.last_validation, self.validation_step = dict(valid), self.step
        self._metrics.write({"step": self.step, **valid})
        progress.write(f"step {self.step}: " + ", ".join(f"{key} {value:.4g}" for key, value in valid.items()))
        return valid

    def final_metrics(self) -> dict[str, float]:
        """Per-token means over the last ``log_every`` updates (skipped non-finite updates
        left out) as ``loss``, ``nll``, ... with ``updates`` (how many), plus the last
        validation (``valid_*``, ``valid_step``)."""
        result = self._recent.means()
        if self.last_validation is not None:
            result.update(self.last_validation)
            result["valid_step"] = self.validation_step
        return result

    def summary(self, keys: Sequence[str] = ("loss", "valid_loss"), unit: str = "") -> str:
        """One line for a verb's ``done:`` (:func:`attnlab.training.progress.summary_line`):
        updates and time, the training figures as the mean over the last updates (not one
        stale log line), and the last held-out figures with their step. ``keys`` picks the
        figures (``loss``, ``ppl``, ``valid_loss``, ...)."""
        return summary_line(self.final_metrics(), step=self.step, run_updates=self.run_updates,
                            run_seconds=self.run_seconds, resumed_from=self.resumed_from, keys=keys, unit=unit)

    # ------------------------------------------------------------------ #
    def _update(self) -> dict[str, Any]:
        """One optimizer update over ``grad_accum_steps`` micro-batches per rank."""
        started = _now()
        self.train_model.train()
        accum = self.config.grad_accum_steps
        local = Sums()
        for index in range(accum):
            batch = self._last_batch = self._to_device(self._stream.next())
            # DDP all-reduces gradients on every backward; only the last micro-batch needs it.
            sync = (
                self.train_model.no_sync()
                if self.context.is_distributed and index < accum - 1
                else contextlib.nullcontext()
            )
            with sync:
                with self._autocast():
                    loss_sum, num_tokens, logs = self.loss_fn(self.train_model, batch)
                loss_sum.backward()
            local.add(loss_sum.detach(), num_tokens, logs)

        total = local.all_reduce(self.context)
        if total.tokens == 0:
            raise ValueError(f"step {self.step + 1}: the batches of this update have no target tokens")
        # DDP averaged the gradient sums over ranks; undo that and divide by the global count.
        scale = self.context.world_size / total.tokens
        for parameter in self.model.parameters():
            if parameter.grad is not None:
                parameter.grad.mul_(scale)
        grad_norm = None
        if self.config.clip_grad_norm is not None:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_grad_norm))
            finite = math.isfinite(grad_norm)
        else:  # no clipping, but a non-finite gradient must still not reach the weights
            grads = [p.grad for p in self.model.parameters() if p.grad is not None]
            finite = not grads or bool(torch.isfinite(torch.nn.utils.get_total_norm(grads)))
        finite = finite and math.isfinite(total.loss)
        if finite:
            self._guard.finite()
            self.optimizer.step()
        else:
            self._guard.skip(self.step + 1, total.loss, grad_norm)
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"sums": total, "grad_norm": grad_norm, "seconds": _now() - started}

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Per-token loss (and log means) over ``valid_batches``, prefixed ``valid_``.

        Ranks split the batches (every ``world_size``-th) and sum their results.
        The bare model is used, not the DDP wrapper: ranks may see different
        numbers of batches and DDP's forward would wait for the others.
        """
        if self.valid_batches is None:
            raise ValueError("valid_batches was not given to the Trainer")
        self.model.eval()
        local = Sums()
        try:
            for index, batch in enumerate(self.valid_batches):
                if index % self.context.world_size == self.context.rank:
                    with self._autocast():
                        local.add(*self.loss_fn(self.model, self._to_device(batch)))
        finally:
            self.model.train()
        total = local.all_reduce(self.context)
        if total.tokens == 0:
            raise ValueError("valid_batches: no target tokens to validate on")
        return total.means(prefix="valid_")

    # ------------------------------------------------------------------ #
    def save_checkpoint(self) -> Path | None:
        """Checkpoint the current step (collective: call on every rank; rank 0 writes)."""
        return save_training_checkpoint(self.checkpoint_root, self.step, self.model, optimizer=self.optimizer,
                                        scheduler=self.scheduler, data=self.train_batches, context=self.context,
                                        train_config=self.config.to_dict(), run_info=self.run_info,
                                        schedule_fit=self.schedule_fit, model_config=self.model_config,
                                        extra_files=self.model_files, keep_last=self.config.keep_last)

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore model, optimizer, schedule, data position and this rank's RNG from ``path``;
        warn, naming each, about training settings and ``run_info`` entries (the data) that
        differ from the checkpoint's (:func:`attnlab.training.checkpoint.changed_settings`)."""
        path = Path(path)
        state = load_training_checkpoint(path, self.model, optimizer=self.optimizer, scheduler=self.scheduler,
                                         data=self.train_batches)
        self._stream.restart()
        changed = changed_settings(self.config.to_dict(), state.get("train_config"), self.run_info,
                                   state.get("run_info")) if self.context.is_main else []
        if changed:
            warnings.warn(f"{path}: resuming with different training settings or data: {'; '.join(changed)}",
                          UserWarning, stacklevel=2)
        fit = state.get("schedule_fit")
        if isinstance(fit, dict):  # the schedule this run chose when it started: continue it
            try:
                self._schedule.apply(fit)
            except (KeyError, TypeError, ValueError) as error:
                raise ValueError(f"{path}: its stored schedule_fit {fit!r} is not valid ({error})") from None
        rng = state.get("rng", [])
        if state.get("world_size") == self.context.world_size and len(rng) == self.context.world_size:
            restore_rng_state(rng[self.context.rank])
        else:
            # A different number of processes cannot continue the same random streams;
            # reseed deterministically instead (the run is then not bit-identical).
            warnings.warn(
                f"{path}: saved with {state.get('world_size')} process(es), resuming with "
                f"{self.context.world_size}; RNG streams are reseeded, so the run will not be bit-identical",
                stacklevel=2,
            )
            self._seed(offset=1_000_003 * int(state["step"]))
        self.step = int(state["step"])
