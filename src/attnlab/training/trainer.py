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
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from attnlab.files import OutputLock, json_safe, refuse_symlinks
from attnlab.training.allocator import tune_allocator
from attnlab.training.batches import Batch, BatchSource
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

__all__ = ["LossFn", "TrainConfig", "Trainer"]

LossFn = Callable[[torch.nn.Module, Batch], tuple[torch.Tensor, int, Mapping[str, Any]]]
"""``loss_fn(model, batch) -> (loss_sum, num_tokens, logs)``; see the module docstring."""

_SCHEDULES = ("noam", "cosine")
TRAINER_OUTPUTS = ("metrics.jsonl", "checkpoints", "tensorboard")
"""What the Trainer writes inside ``out_dir`` (none of them may be a symlink)."""


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

    ``max_minutes`` is a wall-clock budget for one call of :meth:`Trainer.train`
    (a resumed run gets the budget afresh): training stops after the first update
    that ends past it, checkpoints, and returns, even if ``max_steps`` is not
    reached. Under torchrun rank 0's clock decides for all ranks.

    ``max_nonfinite_updates``: that many updates in a row with a NaN or infinite loss
    or gradient norm stop training (each one is skipped, with a warning).

    ``tune_malloc`` keeps freed memory in the process on glibc (about 20 %
    faster steps on CPU; see :mod:`attnlab.training.allocator`).
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
    tensorboard: bool = True
    max_minutes: float | None = None
    tune_malloc: bool = True
    max_nonfinite_updates: int = 5

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)
        for name in ("max_steps", "grad_accum_steps", "log_every", "max_nonfinite_updates"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("validate_every", "checkpoint_every", "keep_last"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        if self.schedule not in _SCHEDULES:
            raise ValueError(f"schedule must be one of {_SCHEDULES}, got {self.schedule!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if not self.weight_decay >= 0.0 or (self.weight_decay and self.optimizer != "adamw"):
            raise ValueError(f"weight_decay must be >= 0 and needs optimizer='adamw', got {self.weight_decay!r}")
        if self.schedule == "noam" and self.d_model is None:
            raise ValueError("d_model is required by schedule='noam'")
        if self.schedule == "cosine" and self.peak_lr is None:
            raise ValueError("peak_lr is required by schedule='cosine'")
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas!r}")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ValueError(f"max_minutes must be positive or None, got {self.max_minutes!r}")
        if self.clip_grad_norm is not None and not self.clip_grad_norm > 0:
            raise ValueError(f"clip_grad_norm must be positive or None, got {self.clip_grad_norm!r}")
        self.build_schedule()  # validates the schedule's own arguments early

    def build_schedule(self) -> Callable[[int], float]:
        """The ``step -> lr`` function this config describes."""
        if self.schedule == "noam":
            return NoamSchedule(self.d_model, self.warmup_steps, self.lr_scale)
        return WarmupCosineSchedule(self.peak_lr, self.warmup_steps, self.max_steps, self.min_lr)

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
        or starts fresh when there is none. On CPU, N steps + resume + N steps
        ends with bit-identical parameters to 2N uninterrupted steps. Without
        ``resume``, an ``out_dir`` that already holds checkpoints is refused.

        The main process holds ``out_dir``'s lock (:class:`attnlab.files.OutputLock`)
        throughout: a second run writing into the same ``out_dir`` is refused. An
        update whose loss or gradient norm is NaN or infinite is skipped (the step
        still counts) with a warning; ``config.max_nonfinite_updates`` such updates in
        a row stop training with a ValueError, keeping the last finite checkpoint.
        """
        lock = OutputLock(self.out_dir, purpose="training") if self.context.is_main else contextlib.nullcontext()
        with lock:
            if self.context.is_main:
                refuse_symlinks(self.out_dir, TRAINER_OUTPUTS)
            return self._train(resume)

    def _train(self, resume: bool) -> dict[str, float]:
        checkpoint = latest_checkpoint(self.checkpoint_root)
        if checkpoint is not None and not resume:
            # Starting over here would interleave two runs' checkpoints and metrics.
            raise ValueError(
                f"out_dir {self.out_dir} already holds checkpoints (latest {checkpoint.name}); "
                "pass resume=True to continue, or choose another out_dir"
            )
        if checkpoint is not None:
            self.load_checkpoint(checkpoint)
        else:
            self._seed()
        last: dict[str, float] = {"step": self.step}
        if self.step >= self.config.max_steps:
            return last
        self._open_logs()
        progress = _Progress(self.config, initial=self.step, main=self.context.is_main)
        window = _Window()
        saved_at = None
        started = time.perf_counter()
        try:
            while self.step < self.config.max_steps:
                lr = self.optimizer.param_groups[0]["lr"]
                update = self._update()
                self.step += 1
                window.add(update)
                if self.step % self.config.log_every == 0 or self.step == self.config.max_steps:
                    last = {"step": self.step, "lr": lr, **window.summary()}
                    window = _Window()
                    progress.update(last, lr, started, force=True)
                    self._log(last)
                else:
                    progress.update(window, lr, started)
                if self.config.validate_every and self.step % self.config.validate_every == 0:
                    valid = self.validate()
                    self._log({"step": self.step, **valid})
                    last.update(valid)
                    progress.write(f"step {self.step}: " + ", ".join(f"{key} {value:.4g}" for key, value in valid.items()))
                if self.config.checkpoint_every and self.step % self.config.checkpoint_every == 0:
                    self.save_checkpoint()
                    saved_at = self.step
                if self._out_of_time(started):
                    progress.write(f"stopping at step {self.step}: the {self.config.max_minutes:g}-minute "
                                   "budget (max_minutes) is spent")
                    self._log({"step": self.step, "stopped": "max_minutes"})
                    break
            if saved_at != self.step:
                self.save_checkpoint()
        finally:
            progress.close()
            self._close_logs()
        return last

    def _out_of_time(self, started: float) -> bool:
        if self.config.max_minutes is None:
            return False
        over = float(time.perf_counter() - started > 60.0 * self.config.max_minutes)
        if self.context.is_distributed:  # rank 0's clock decides, so every rank stops at the same step
            flag = torch.tensor([over if self.context.is_main else 0.0])
            over = float(all_reduce_sum(flag, self.context).item())
        return over > 0

    def _update(self) -> dict[str, Any]:
        """One optimizer update over ``grad_accum_steps`` micro-batches per rank."""
        started = time.perf_counter()
        self.train_model.train()
        accum = self.config.grad_accum_steps
        local = _Sums()
        for index in range(accum):
            batch = self._to_device(self._stream.next())
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
    _RESUME_FREE = {"max_steps", "max_minutes", "progress_bar", "tensorboard", "out_dir", "log_every",
                    "validate_every", "checkpoint_every", "keep_last", "tune_malloc", "max_nonfinite_updates"}

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
    def _open_logs(self) -> None:
        if not self.context.is_main:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: never append through a symlink planted where the log goes.
        fd = os.open(self.out_dir / "metrics.jsonl", os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        _drop_partial_line(fd)
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

    def __init__(self, config: TrainConfig, *, initial: int, main: bool) -> None:
        self.config, self.initial, self.main = config, initial, main
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
            postfix["tok/s"] = f"{summary['tokens_per_s']:.0f}"
        done = self.bar.n - self.initial
        left = (self.config.max_steps - self.bar.n) * elapsed / done if done else float("inf")
        if self.config.max_minutes is not None:
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
