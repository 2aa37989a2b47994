"""What one training run is asked to do, as plain data: :class:`TrainConfig` (stored in every
checkpoint) and :class:`TrainConfigError` (a setting out of range, naming its field).

:class:`~attnlab.training.trainer.Trainer` runs a ``TrainConfig``; both names are also
importable from :mod:`attnlab.training.trainer`, where they were first defined.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from attnlab.training.optim import OPTIMIZERS
from attnlab.training.schedules import NoamSchedule, WarmupCosineSchedule

__all__ = ["SCHEDULES", "TrainConfig", "TrainConfigError"]

SCHEDULES = ("noam", "cosine")


class TrainConfigError(ValueError):
    """A :class:`TrainConfig` setting out of range; ``field`` names the setting, so that
    the CLI can name the flag the user typed instead (``validate_every`` -> ``--val-every``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field



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
        if self.schedule not in SCHEDULES:
            raise TrainConfigError("schedule", f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
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
