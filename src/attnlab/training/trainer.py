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
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from attnlab.files import OutputLock, atomic_write_bytes, json_safe, refuse_symlinks
from attnlab.training.allocator import tune_allocator
from attnlab.training.batches import Batch, BatchSource
from attnlab.training.budget import Budget
from attnlab.training.checkpoint import (
    capture_rng_state,
    latest_checkpoint,
    load_model_weights,
    load_training_state,
    restore_rng_state,
    save_checkpoint,
)
from attnlab.training.distributed import (
    DistributedContext,
    all_reduce_sum,
    gather_bytes,
    init_distributed,
    wrap_model,
)
from attnlab.training.optim import OPTIMIZERS, build_optimizer
from attnlab.training.schedules import NoamSchedule, ScheduledLR, WarmupCosineSchedule

__all__ = ["LossFn", "TrainConfig", "TrainConfigError", "Trainer", "TrainingInterrupted"]

LossFn = Callable[[torch.nn.Module, Batch], tuple[torch.Tensor, int, Mapping[str, Any]]]
"""``loss_fn(model, batch) -> (loss_sum, num_tokens, logs)``; see the module docstring."""

_SCHEDULES = ("noam", "cosine")
TRAINER_OUTPUTS = ("metrics.jsonl", "checkpoints", "tensorboard")
"""What the Trainer writes inside ``out_dir`` (none of them may be a symlink)."""


class TrainConfigError(ValueError):
    """A :class:`TrainConfig` setting out of range; ``field`` names the setting, so that
    the CLI can name the flag the user typed instead (``validate_every`` -> ``--val-every``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


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


@dataclass
class TrainConfig:
    """Everything the training loop needs, as plain data (it is stored in every checkpoint).

    Learning rate: ``schedule="noam"`` (the paper; needs ``d_model``, uses
    ``lr_scale`` and ``warmup_steps``) or ``"cosine"`` (linear warm-up to
    ``peak_lr`` over ``warmup_steps``, cosine decay to ``min_lr`` at ``max_steps``).

    Batching: one update uses ``grad_accum_steps`` micro-batches per process,
    i.e. ``world_size * grad_accum_steps`` in all.

    Periods (``log_every``, ``validate_every``, ``checkpoint_every``) count
    updates; ``None`` disables validation or periodic checkpoints. The final
    step is always checkpointed.

    ``checkpoint_every_minutes`` adds a time cadence: a checkpoint whenever that many
    minutes passed since the last one (rank 0's clock decides for all ranks), so an
    interrupted or killed run loses at most that much work whatever ``checkpoint_every`` is.

    ``max_minutes`` is a wall-clock budget for one call of :meth:`Trainer.train`
    (a resumed run gets the budget afresh): training stops after the first update
    that ends past it, checkpoints, and returns, even if ``max_steps`` is not
    reached. Under torchrun rank 0's clock decides for all ranks.

    ``max_nonfinite_updates``: that many updates in a row with a NaN or infinite loss
    or gradient norm stop training (each one is skipped, with a warning).

    ``tune_malloc`` keeps freed memory in the process on glibc (about 20 %
    faster steps on CPU; see :mod:`attnlab.training.allocator`).

    ``progress_unit``: what the loss counts, as the progress bar shows its rate
    (``"tok"`` -> ``tok/s``; a ViT's one target per image: ``"images"``; an Image
    Transformer's sub-pixels: ``"sub-pixels"``).
    """

    out_dir: str
    max_steps: int
    schedule: str = "noam"
    d_model: int | None = None
    lr_scale: float = 1.0
    warmup_steps: int = 4000
    peak_lr: float | None = None
    min_lr: float = 0.0
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    optimizer: str = "adam"
    weight_decay: float = 0.0
    grad_accum_steps: int = 1
    clip_grad_norm: float | None = None
    bf16: bool = False
    compile: bool = False
    log_every: int = 100
    validate_every: int | None = None
    checkpoint_every: int | None = None
    keep_last: int | None = 5
    seed: int = 0
    progress_bar: bool = True
    progress_unit: str = "tok"
    tensorboard: bool = True
    max_minutes: float | None = None
    tune_malloc: bool = True
    max_nonfinite_updates: int = 5
    checkpoint_every_minutes: float | None = None

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)
        for name in ("max_steps", "grad_accum_steps", "log_every", "max_nonfinite_updates"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise TrainConfigError(name, f"{name} must be a positive integer, got {value!r}")
        for name in ("validate_every", "checkpoint_every", "keep_last"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise TrainConfigError(name, f"{name} must be a positive integer, got {value!r}")
        if self.schedule not in _SCHEDULES:
            raise TrainConfigError("schedule", f"schedule must be one of {_SCHEDULES}, got {self.schedule!r}")
        if self.optimizer not in OPTIMIZERS:
            raise TrainConfigError("optimizer", f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if not self.weight_decay >= 0.0 or (self.weight_decay and self.optimizer != "adamw"):
            raise TrainConfigError("weight_decay", "weight_decay must be >= 0 and needs optimizer='adamw', "
                                                   f"got {self.weight_decay!r}")
        if self.schedule == "noam" and self.d_model is None:
            raise TrainConfigError("d_model", "d_model is required by schedule='noam'")
        if self.schedule == "cosine" and self.peak_lr is None:
            raise TrainConfigError("peak_lr", "peak_lr is required by schedule='cosine'")
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise TrainConfigError("betas", f"betas must be two numbers in [0, 1), got {self.betas!r}")
        if not isinstance(self.progress_unit, str) or not self.progress_unit:
            raise TrainConfigError("progress_unit", f"progress_unit must be a name, got {self.progress_unit!r}")
        for name in ("max_minutes", "checkpoint_every_minutes", "clip_grad_norm"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise TrainConfigError(name, f"{name} must be a positive number, got {value!r}")
        try:
            self.build_schedule()  # validates the schedule's own arguments early
        except ValueError as error:
            field_name = str(error).split(" ", 1)[0]
            field_name = {"scale": "lr_scale", "total_steps": "max_steps"}.get(field_name, field_name)
            raise TrainConfigError(field_name, str(error).replace("scale ", "lr_scale ", 1)
                                   if field_name == "lr_scale" else str(error)) from None

    def build_schedule(self, fit: Mapping[str, Any] | None = None) -> Callable[[int], float]:
        """The ``step -> lr`` function this config describes, or the one the Trainer fitted
        to a run its warm-up did not fit (``fit``: see :meth:`Trainer.schedule_fit`).

        A cosine schedule whose warm-up is longer than ``max_steps`` decays over no steps
        here; the Trainer shortens such a warm-up (and says so) before training."""
        warmup = int(fit["warmup_steps"]) if fit else self.warmup_steps
        if self.schedule == "noam":
            return NoamSchedule(self.d_model, warmup, float(fit["lr_scale"]) if fit else self.lr_scale)
        total = int(fit["total_steps"]) if fit else max(self.max_steps, self.warmup_steps)
        return WarmupCosineSchedule(self.peak_lr, warmup, total, self.min_lr)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _BatchStream:
    """Endless stream of this rank's micro-batches from a resumable batch source.

    Every rank reads the whole source and keeps micro-batches ``rank``,
    ``rank + world_size``, ... so ranks stay in lock-step and share one data
    position.
    """

    def __init__(self, source: BatchSource, context: DistributedContext) -> None:
        self.source = source
        self.context = context
        self._iterator: Iterator[Batch] | None = None

    def _next_global(self) -> Batch:
        for fresh in (False, True):
            if self._iterator is None or fresh:
                self._iterator = iter(self.source)
            try:
                return next(self._iterator)
            except StopIteration:
                continue  # end of epoch: the next iter() starts the next one
        raise ValueError("train_batches: an epoch yielded no batches")

    def next(self) -> Batch:
        group = [self._next_global() for _ in range(self.context.world_size)]
        return group[self.context.rank]

    def restart(self) -> None:
        """Forget the live iterator (after the source's position was restored)."""
        self._iterator = None


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
        self._stream = _BatchStream(train_batches, self.context)
        self._nonfinite_run = 0
        self._metrics_file = None
        self._tensorboard = None
        self.budget = budget
        self.schedule_fit: dict[str, Any] | None = None
        """The schedule the Trainer chose when the configured warm-up did not fit the run
        (``warmup_steps``, ``lr_scale``, ``total_steps``, ``reason``); None when it fitted.
        Stored in every checkpoint, so a resumed run continues the same schedule."""
        self._stop_signal: int | None = None
        self._last_batch: Batch | None = None
        self._first_loss: float | None = None
        self._recent: deque[tuple[float, int, dict[str, float]]] = deque(maxlen=config.log_every)
        self._skipped_recent = 0
        self.last_validation: dict[str, float] | None = None
        self.validation_step: int | None = None
        self.resumed_from: int | None = None
        self.start_record: dict[str, Any] | None = None
        """Logged once as step 0 of a fresh run (a fine-tuning run's starting model's held-out
        figures: ``start_valid_loss``, ...), so metrics.jsonl holds the before beside the after."""
        self.run_seconds = 0.0
        self.run_updates = 0

    # ------------------------------------------------------------------ #
    @property
    def device(self) -> torch.device:
        return next((p.device for p in self.model.parameters()), torch.device("cpu"))

    def _to_device(self, batch: Batch) -> Batch:
        device = self.device
        if device.type != "cuda":
            return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        # From pinned host memory the copy is asynchronous: the host goes on queueing the step
        # instead of waiting for the GPU to finish the previous one (a copy from pageable
        # memory waits for the stream).
        def move(value: torch.Tensor) -> torch.Tensor:
            if value.device.type == "cpu":
                return value.pin_memory().to(device, non_blocking=True)
            return value.to(device)

        return {k: move(v) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}

    def _autocast(self) -> contextlib.AbstractContextManager:
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.config.bf16)

    def _seed(self, offset: int = 0) -> None:
        # Different ranks get different dropout masks, as independent workers would.
        seed = self.config.seed + self.context.rank + offset
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)

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
        self._stop_signal = None
        lock = OutputLock(self.out_dir, purpose="training") if self.context.is_main else contextlib.nullcontext()
        with lock, self._signal_handlers():
            if self.context.is_main:
                refuse_symlinks(self.out_dir, TRAINER_OUTPUTS)
            return self._train(resume)

    @contextlib.contextmanager
    def _signal_handlers(self) -> Iterator[None]:
        """SIGINT/SIGTERM set a flag that the loop checks after each update; a second one
        raises at once. Only the main thread may install handlers; others keep Python's."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(number: int, frame: Any) -> None:
            if self._stop_signal is not None and self.context.is_distributed:
                # torchrun forwards a Ctrl-C to every worker, which has had the terminal's own
                # already: a repeat is not a second request. The ranks stop together after this
                # update; torchrun kills them itself if its shutdown timeout passes first.
                return
            if self._stop_signal is not None:
                raise TrainingInterrupted(number, step=self.step, out_dir=self.out_dir,
                                          checkpoint=latest_checkpoint(self.checkpoint_root), immediate=True)
            self._stop_signal = number
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

    def _say(self, message: str) -> None:
        """A line on stderr from the main process."""
        if self.context.is_main:
            print(message, file=sys.stderr, flush=True)

    def _train(self, resume: bool) -> dict[str, float]:
        checkpoint = latest_checkpoint(self.checkpoint_root)
        if checkpoint is not None and not resume:
            # Starting over here would interleave two runs' checkpoints and metrics.
            raise ValueError(
                f"{self.out_dir} already holds checkpoints (latest {checkpoint.name}); continue that run with "
                "--resume (Trainer.train(resume=True) in Python), or choose another output directory"
            )
        self.run_seconds, self.run_updates, self._first_loss = 0.0, 0, None
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
            self._fit_schedule(self.config.max_steps, f"a {self.config.max_steps:,}-update run")
        self._open_logs(self.step)
        if self.step == 0 and self.start_record:
            self._log({"step": 0, **self.start_record})
        progress = _Progress(self.config, initial=self.step, main=self.context.is_main, budget=self.budget)
        window = _Window()
        saved_at = None
        started = time.perf_counter()
        saved_clock = started
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
                self._remember(update["sums"])
                if self.step % self.config.log_every == 0 or self.step == self.config.max_steps:
                    last = {"step": self.step, "lr": lr, **window.summary()}
                    window = _Window()
                    progress.update(last, lr, started, force=True)
                    self._log(last)
                else:
                    progress.update(window, lr, started)
                if self.config.validate_every and self.step % self.config.validate_every == 0:
                    valid = self._validate_and_log(progress)
                    last.update(valid)
                    validated = True
                if self.config.checkpoint_every and self.step % self.config.checkpoint_every == 0:
                    self.save_checkpoint()
                    saved_at, saved_clock = self.step, time.perf_counter()
                out_of_time, save_due, stop = self._sync_flags(started, saved_clock)
                if stop:
                    stopped_by = "signal"
                    break
                if out_of_time:
                    what = (f"the {self._budget_minutes():g}-minute budget is spent" if self._budget_minutes()
                            else "the time budget is spent")
                    progress.write(f"stopping at step {self.step}: {what}")
                    stopped_by = "max_minutes"
                    break
                if save_due and saved_at != self.step:
                    self.save_checkpoint()
                    saved_at, saved_clock = self.step, time.perf_counter()
                if first_done is None:
                    first_done = self._budget_clock()
                elif self.run_updates == 3 and self.schedule_fit is None:  # the first update may be slow
                    self._fit_schedule_to_budget(started, (self._budget_clock() - first_done) / 2)
            if window.sums.tokens:  # the updates since the last log line: the last line is never stale
                last = {"step": self.step, "lr": self.optimizer.param_groups[0]["lr"], **window.summary()}
                self._log(last)
                window = _Window()
            if self._nonfinite_run:
                raise self._diverged(f"the last update (step {self.step}) had a NaN or infinite loss or gradient")
            problem = self._final_check() if stopped_by != "signal" else None
            if problem is not None:
                raise self._diverged(f"the weights after the last update (step {self.step}) give {problem}")
            if saved_at != self.step:
                self.save_checkpoint()
            if stopped_by != "signal" and self._sync_flags(started, time.perf_counter())[2]:
                stopped_by = "signal"  # a signal during the last update or its checkpoint
            if stopped_by == "signal":
                self._log({"step": self.step, "stopped": signal.Signals(self._stop_signal).name})
                raise TrainingInterrupted(self._stop_signal or signal.SIGINT, step=self.step, out_dir=self.out_dir,
                                          checkpoint=latest_checkpoint(self.checkpoint_root))
            if not validated and self.config.validate_every and self.valid_batches is not None:
                last.update(self._validate_and_log(progress))  # a run shorter than one validation period
            if stopped_by == "max_minutes":
                self._log({"step": self.step, "stopped": "max_minutes"})
            if self.last_validation is not None and not math.isfinite(self.last_validation.get("valid_loss", 0.0)):
                raise self._diverged(f"the held-out loss at step {self.validation_step} is not finite")
        finally:
            self.run_seconds = time.perf_counter() - started
            progress.close()
            self._close_logs()
        return last

    def _validate_and_log(self, progress: _Progress) -> dict[str, float]:
        valid = self.validate()
        self.last_validation, self.validation_step = dict(valid), self.step
        self._log({"step": self.step, **valid})
        progress.write(f"step {self.step}: " + ", ".join(f"{key} {value:.4g}" for key, value in valid.items()))
        return valid

    def _diverged(self, what: str) -> ValueError:
        checkpoint = latest_checkpoint(self.checkpoint_root)
        where = (f"the last checkpoint, {checkpoint}, was written before: resume from it with a lower learning "
                 "rate (or clip the gradient norm)" if checkpoint is not None
                 else "no checkpoint was written: start again with a lower learning rate")
        return ValueError(f"training in {self.out_dir} diverged: {what}; no model is saved from it, and {where}")

    # A run ends diverged when the loss its final weights give is this many times the loss of
    # its first update (and above this many times 1): far past anything a sane run ends with.
    DIVERGED_RATIO = 1e4

    @torch.no_grad()
    def _final_check(self) -> str | None:
        """What is wrong with the weights training ends with, judged by their loss on the last
        micro-batch (one forward in eval mode: no dropout, no random numbers drawn); None when
        nothing is. The last update's own loss was computed before that update, so only this
        catches a blow-up in the last update: a NaN or infinite loss, or (finite but absurd
        weights, e.g. after a learning rate of 1e30) a per-token loss DIVERGED_RATIO times
        the first update's."""
        batch = self._last_batch
        if batch is None:
            return None
        self.model.eval()
        try:
            with self._autocast():
                loss_sum, tokens, _ = self.loss_fn(self.model, batch)
        finally:
            self.model.train()
        values = all_reduce_sum(_float64_on_host([loss_sum, tokens]), self.context).tolist()
        loss = values[0] / values[1] if values[1] else 0.0
        if not math.isfinite(loss):
            return "a NaN or infinite loss on its batch"
        first = self._first_loss
        if first is not None and math.isfinite(first) and loss > self.DIVERGED_RATIO * max(first, 1.0):
            return f"a loss of {loss:.3g} per token on its batch, against {first:.3g} at the start of the run"
        return None

    def _remember(self, sums: _Sums) -> None:
        """Keep the last ``log_every`` updates' sums for :meth:`final_metrics`."""
        if self._first_loss is None and sums.tokens:
            self._first_loss = sums.loss / sums.tokens
        self._recent.append((sums.loss, sums.tokens, dict(sums.logs)))

    def final_metrics(self) -> dict[str, float]:
        """Per-token means over the last ``log_every`` updates (skipped non-finite updates
        left out) as ``loss``, ``nll``, ... with ``updates`` (how many), plus the last
        validation (``valid_*``, ``valid_step``)."""
        kept = [(loss, tokens, logs) for loss, tokens, logs in self._recent if math.isfinite(loss) and tokens]
        result: dict[str, float] = {}
        if kept:
            total = _Sums()
            for loss, tokens, logs in kept:
                total.add(loss, tokens, logs)
            result.update(total.means())
            result["updates"] = len(kept)
        if self.last_validation is not None:
            result.update(self.last_validation)
            result["valid_step"] = self.validation_step
        return result

    def summary(self, keys: Sequence[str] = ("loss", "valid_loss"), unit: str = "") -> str:
        """One line for a verb's ``done:``: updates and time, the training figures as the mean
        over the last updates (not one stale log line), and the last held-out figures with
        their step. ``keys`` picks the figures (``loss``, ``ppl``, ``valid_loss``, ...)."""
        metrics = self.final_metrics()
        if self.resumed_from is not None:
            text = (f"{self.step:,} updates ({self.run_updates:,} in this run, from step {self.resumed_from:,}, "
                    f"{self.run_seconds:.0f} s)")
        else:
            text = f"{self.step:,} updates in {self.run_seconds:.0f} s"
        train = [f"{key} {metrics[key]:.4f}" for key in keys if not key.startswith("valid_") and key in metrics]
        if train:
            count = int(metrics["updates"])
            text += f"; {', '.join(train)} (mean of the last {count:,} update{'s' if count != 1 else ''})"
        held_out = [f"{key} {metrics[key]:.4f}" for key in keys if key.startswith("valid_") and key in metrics]
        if held_out:
            text += f"; {', '.join(held_out)} (held-out, step {int(metrics['valid_step']):,})"
        return text + (f" ({unit})" if unit and (train or held_out) else "")

    # ------------------------------------------------------------------ #
    def _budget_minutes(self) -> float | None:
        if self.budget is not None:
            return self.budget.minutes
        return self.config.max_minutes

    def _seconds_left(self, started: float) -> float | None:
        if self.budget is not None:
            return self.budget.left()
        if self.config.max_minutes is None:
            return None
        return max(0.0, 60.0 * self.config.max_minutes - (time.perf_counter() - started))

    def _out_of_time(self, started: float) -> bool:
        """This process's clock says the budget is spent (see :meth:`_sync_flags`)."""
        if self.budget is not None:
            return self.budget.spent()
        if self.config.max_minutes is None:
            return False
        return time.perf_counter() - started > 60.0 * self.config.max_minutes

    def _sync_flags(self, started: float, saved_clock: float) -> tuple[bool, bool, bool]:
        """``(out of time, a timed checkpoint is due, a signal asked to stop)``, the same on
        every rank: rank 0's clock decides the first two, a signal on any rank the third
        (one small all-reduce per update under torchrun)."""
        minutes = self.config.checkpoint_every_minutes
        over = self._out_of_time(started)
        due = minutes is not None and time.perf_counter() - saved_clock >= 60.0 * minutes
        stop = self._stop_signal is not None
        if self.context.is_distributed:
            main = self.context.is_main
            flags = torch.tensor([float(over and main), float(due and main), float(stop),
                                  float(self._stop_signal or 0) if stop else 0.0], dtype=torch.float64)
            flags = all_reduce_sum(flags, self.context).tolist()
            over, due, stop = flags[0] > 0, flags[1] > 0, flags[2] > 0
            if stop and self._stop_signal is None:  # another rank got it: stop with the same kind of exit
                self._stop_signal = int(round(flags[3] / flags[2]))
        return over, due, stop

    # ------------------------------------------------------------------ #
    def _fit_schedule(self, run_length: int, run: str) -> bool:
        """Shorten a warm-up longer than ``run_length`` updates to a tenth of the run (at
        least 1); say so. A Noam schedule keeps its peak learning rate (its scale grows
        with the square root of the shorter warm-up); a cosine one decays over the run."""
        config = self.config
        if self.schedule_fit is not None or config.warmup_steps <= run_length:
            return False
        warmup = max(1, run_length // 10)
        fit: dict[str, Any] = {"warmup_steps": warmup, "lr_scale": config.lr_scale, "total_steps": config.max_steps,
                               "reason": f"the {config.warmup_steps:,}-update warm-up does not fit {run}",
                               "at_step": self.step}
        if config.schedule == "noam":
            fit["lr_scale"] = config.lr_scale * math.sqrt(warmup / config.warmup_steps)
            peak = NoamSchedule(config.d_model, warmup, fit["lr_scale"])(warmup)
            how = f"peak learning rate {peak:.3g} kept (Noam)"
        else:
            fit["total_steps"] = max(warmup, min(config.max_steps, run_length))
            how = f"peak learning rate {config.peak_lr:.3g}, cosine decay to step {fit['total_steps']:,}"
        self._apply_schedule_fit(fit)
        self._say(f"schedule: {fit['reason']}: warming up over {warmup:,} update{'s' if warmup != 1 else ''} "
                  f"instead, {how}")
        return True

    def _budget_clock(self) -> float:
        return self.budget.clock() if self.budget is not None else time.perf_counter()

    def _fit_schedule_to_budget(self, started: float, seconds_per_update: float) -> None:
        """After a few updates: the updates the time budget buys, and a warm-up that fits them."""
        left = self._seconds_left(started)
        if left is None or self.step >= self.config.warmup_steps:
            return
        if self.context.is_distributed:  # rank 0's estimate decides for all
            local = torch.tensor([left, seconds_per_update] if self.context.is_main else [0.0, 0.0],
                                 dtype=torch.float64)
            left, seconds_per_update = all_reduce_sum(local, self.context).tolist()
        affordable = self.step + int(left / max(seconds_per_update, 1e-9))
        if affordable < self.config.max_steps:
            minutes = self._budget_minutes()
            budget = f"the {minutes:g}-minute budget" if minutes else "the time budget"
            self._fit_schedule(affordable, f"{budget} (about {affordable:,} updates at {seconds_per_update:.2g} s "
                                           "each)")

    def _apply_schedule_fit(self, fit: Mapping[str, Any]) -> None:
        self.schedule_fit = dict(fit)
        schedule = self.config.build_schedule(self.schedule_fit)
        self.scheduler.schedule = schedule
        lr = schedule(self.scheduler.last_epoch + 1)  # the next update's
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.scheduler._last_lr = [lr for _ in self.optimizer.param_groups]

    def _update(self) -> dict[str, Any]:
        """One optimizer update over ``grad_accum_steps`` micro-batches per rank."""
        started = time.perf_counter()
        self.train_model.train()
        accum = self.config.grad_accum_steps
        local = _Sums()
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
            self._nonfinite_run = 0
            self.optimizer.step()
        else:
            self._skip_nonfinite(total.loss, grad_norm)
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"sums": total, "grad_norm": grad_norm, "seconds": time.perf_counter() - started}

    def _skip_nonfinite(self, loss: float, grad_norm: float | None) -> None:
        """Skip an update whose loss or gradient is not finite (every rank sees the same
        all-reduced numbers, so all skip together); too many in a row end training."""
        self._nonfinite_run += 1
        step = self.step + 1
        what = f"loss {loss:.4g}" + (f", gradient norm {grad_norm:.4g}" if grad_norm is not None else "")
        if self._nonfinite_run >= self.config.max_nonfinite_updates:
            raise ValueError(
                f"step {step}: {self._nonfinite_run} updates in a row had a NaN or infinite loss or gradient "
                f"({what}); training diverged and stops here. The weights were not updated by those steps and "
                f"the last checkpoint under {self.checkpoint_root} is finite: resume from it with a lower "
                "learning rate (or clip the gradient norm)")
        if self.context.is_main:
            warnings.warn(f"step {step}: {what} is not finite; this update is skipped "
                          f"({self._nonfinite_run} in a row, training stops at {self.config.max_nonfinite_updates})",
                          RuntimeWarning, stacklevel=3)

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
        local = _Sums()
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
        # Every rank's RNG state is kept so each rank's dropout continues exactly on resume.
        rng_states = gather_bytes(json.dumps(capture_rng_state()).encode(), self.context)
        path = None
        if self.context.is_main:
            state = {
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "data": self.train_batches.state_dict(),
                "rng": [json.loads(state) for state in rng_states],
                "world_size": self.context.world_size,
                "train_config": self.config.to_dict(),
            }
            if self.run_info is not None:
                state["run_info"] = self.run_info
            if self.schedule_fit is not None:
                state["schedule_fit"] = self.schedule_fit
            path = save_checkpoint(
                self.checkpoint_root,
                self.step,
                self.model,
                state,
                model_config=self.model_config,
                extra_files=self.model_files,
                keep_last=self.config.keep_last,
            )
        # Nobody runs ahead (or exits) before the checkpoint is complete on disk.
        self.context.barrier()
        return path

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore model, optimizer, schedule, data position and this rank's RNG from ``path``."""
        path = Path(path)
        state = load_training_state(path)
        load_model_weights(path, self.model)
        try:
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.train_batches.load_state_dict(state["data"])
        except (KeyError, TypeError, RuntimeError) as error:
            raise ValueError(f"{path}: training state does not fit this model/optimizer ({error!r})") from error
        self._stream.restart()
        self._warn_changed_config(path, state.get("train_config"), state.get("run_info"))
        fit = state.get("schedule_fit")
        if isinstance(fit, dict):  # the schedule this run chose when it started: continue it
            try:
                self._apply_schedule_fit(fit)
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

    # Settings that may change on resume without changing what is trained.
    _RESUME_FREE = {"max_steps", "max_minutes", "progress_bar", "progress_unit", "tensorboard", "out_dir", "log_every",
                    "validate_every", "checkpoint_every", "keep_last", "tune_malloc", "max_nonfinite_updates",
                    "checkpoint_every_minutes"}

    def _warn_changed_config(self, path: Path, saved: Any, saved_run: Any) -> None:
        """Warn, naming each one, about training settings and ``run_info`` entries (the
        data) that differ from the checkpoint's."""
        if not self.context.is_main:
            return
        changed = []
        for current, before, free in ((self.config.to_dict(), saved, self._RESUME_FREE),
                                      (self.run_info, saved_run, ())):
            if isinstance(current, dict) and isinstance(before, dict):
                changed += [f"{key} {before[key]!r} -> {current[key]!r}" for key in sorted(current)
                            if key in before and key not in free and json_safe(current[key]) != json_safe(before[key])]
        if changed:
            warnings.warn(f"{path}: resuming with different training settings or data: {'; '.join(changed)}",
                          UserWarning, stacklevel=3)

    # ------------------------------------------------------------------ #
    def _open_logs(self, step: int = 0) -> None:
        if not self.context.is_main:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: never append through a symlink planted where the log goes.
        fd = os.open(self.out_dir / "metrics.jsonl", os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        _drop_partial_line(fd)
        if _drop_records_after(fd, self.out_dir / "metrics.jsonl", step):
            os.close(fd)  # the file was replaced: append to the new one
            fd = os.open(self.out_dir / "metrics.jsonl", os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW)
        self._metrics_file = open(fd, "a", encoding="utf-8")
        if self.config.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # TensorBoard is optional
                SummaryWriter = None
            if SummaryWriter is not None:
                self._tensorboard = SummaryWriter(log_dir=str(self.out_dir / "tensorboard"))

    def _log(self, record: dict[str, Any]) -> None:
        if self._metrics_file is None:
            return
        record = {"time": time.time(), **record}
        # Strict JSON: a non-finite number (a diverged loss) is written as null.
        self._metrics_file.write(json.dumps(json_safe(record), allow_nan=False) + "\n")
        self._metrics_file.flush()
        if self._tensorboard is not None:
            for key, value in record.items():
                if key not in ("step", "time") and isinstance(value, (int, float)):
                    self._tensorboard.add_scalar(key, value, record["step"])

    def _close_logs(self) -> None:
        if self._metrics_file is not None:
            self._metrics_file.close()
            self._metrics_file = None
        if self._tensorboard is not None:
            self._tensorboard.close()
            self._tensorboard = None


def _drop_partial_line(fd: int) -> None:
    """A run killed in the middle of writing a log line leaves it unterminated; cut it off
    so the lines appended on resume stay valid JSON lines."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    tail = os.pread(fd, min(size, 1 << 16), max(0, size - (1 << 16)))
    cut = tail.rfind(b"\n")
    os.ftruncate(fd, max(0, size - len(tail)) + cut + 1 if cut >= 0 else 0)


def _drop_records_after(fd: int, path: Path, step: int) -> bool:
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


@dataclass
class _Sums:
    """A token count with the loss and logs summed over it (micro-batches, updates or ranks).

    Tensors are summed as tensors, on their device: adding a micro-batch's results costs no
    host sync; :meth:`all_reduce` brings everything to the host at once (once per update)."""

    tokens: Any = 0
    loss: Any = 0.0
    logs: dict[str, Any] = field(default_factory=dict)

    def add(self, loss_sum: torch.Tensor | float, num_tokens, logs: Mapping[str, Any]) -> None:
        self.tokens = self.tokens + _detached(num_tokens)
        self.loss = self.loss + _detached(loss_sum)
        for key, value in logs.items():
            self.logs[key] = self.logs.get(key, 0.0) + _detached(value)

    def all_reduce(self, context: DistributedContext) -> _Sums:
        """The sums over all ranks as Python numbers, in one collective and one host sync
        (log keys are the same on every rank)."""
        keys = sorted(self.logs)
        local = _float64_on_host([self.tokens, self.loss, *(self.logs[k] for k in keys)])
        total = all_reduce_sum(local, context).tolist()
        return _Sums(int(total[0]), total[1], dict(zip(keys, total[2:])))

    def means(self, prefix: str = "") -> dict[str, float]:
        """Per-token means of the loss and every log; a log named ``nll`` also gives ``ppl``."""
        result = {f"{prefix}loss": self.loss / self.tokens}
        result.update({f"{prefix}{key}": value / self.tokens for key, value in self.logs.items()})
        if "nll" in self.logs:
            result[f"{prefix}ppl"] = math.exp(min(self.logs["nll"] / self.tokens, 700.0))  # exp overflows past ~709
        return result


class _Progress:
    """The progress bar: steps, running loss, lr, tokens/s and an honest time left.

    The figures refresh about once a second (not only at log steps). Under a
    ``max_minutes`` budget the time left is the sooner of the budget and the remaining
    steps at the current rate, since whichever comes first ends the run; tqdm's own ETA
    (towards ``max_steps`` only) is not shown.
    """

    REFRESH_SECONDS = 1.0

    def __init__(self, config: TrainConfig, *, initial: int, main: bool, budget: Budget | None = None) -> None:
        self.config, self.initial, self.main, self.budget = config, initial, main, budget
        self.bar = tqdm(total=config.max_steps, initial=initial, disable=not (main and config.progress_bar), desc="train",
                        dynamic_ncols=True, bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                                                       "[{elapsed}{postfix}]")
        self.shown_at = 0.0

    def update(self, window: _Window | Mapping[str, float], lr: float, started: float, force: bool = False) -> None:
        self.bar.update(1)
        now = time.perf_counter()
        if self.bar.disable or not (force or now - self.shown_at >= self.REFRESH_SECONDS):
            return
        self.shown_at = now
        summary = window.summary() if isinstance(window, _Window) else window
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
        postfix["left"] = _clock(left) if left != float("inf") else "?"
        self.bar.set_postfix(postfix, refresh=False)

    def write(self, message: str) -> None:
        """A line above the bar (or alone, without a bar) on the main process."""
        if self.main:
            self.bar.write(message, file=sys.stderr)

    def close(self) -> None:
        self.bar.close()


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"


def _detached(value):
    return value.detach() if isinstance(value, torch.Tensor) else value


def _float64_on_host(values: Sequence[Any]) -> torch.Tensor:
    """``(len(values),)`` float64 CPU tensor of numbers and scalar tensors, with one copy
    from the device for all tensors (the only host sync of a training update)."""
    tensors = [(i, v) for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
    out = torch.tensor([0.0 if isinstance(v, torch.Tensor) else float(v) for v in values], dtype=torch.float64)
    if tensors:
        device = tensors[0][1].device
        stacked = torch.stack([v.detach().reshape(()).to(device=device, dtype=torch.float64) for _, v in tensors])
        out[[i for i, _ in tensors]] = stacked.cpu()
    return out


class _Window:
    """What happened since the last log line."""

    def __init__(self) -> None:
        self.sums = _Sums()
        self.seconds = 0.0
        self.grad_norm: float | None = None

    def add(self, update: Mapping[str, Any]) -> None:
        sums = update["sums"]
        self.sums.add(sums.loss, sums.tokens, sums.logs)
        self.seconds += update["seconds"]
        self.grad_norm = update["grad_norm"]

    def summary(self) -> dict[str, float]:
        # Throughput of the updates themselves: validation and checkpoints are not counted.
        summary = {
            **self.sums.means(),
            "tokens": self.sums.tokens,
            "tokens_per_s": self.sums.tokens / max(self.seconds, 1e-9),
        }
        if self.grad_norm is not None:
            summary["grad_norm"] = self.grad_norm
        return summary
