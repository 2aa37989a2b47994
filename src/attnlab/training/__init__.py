"""Training shared by every model family: schedules, losses, checkpoints, the loop, DDP.

Import from here::

    from attnlab.training import Trainer, TrainConfig, label_smoothed_cross_entropy
"""

from attnlab.training.batches import Batch, BatchSource, ListBatchSource
from attnlab.training.checkpoint import (
    average_checkpoints,
    average_checkpoints_to_directory,
    latest_checkpoint,
    list_checkpoints,
    load_model_weights,
    load_training_state,
    save_checkpoint,
    write_model_directory,
)
from attnlab.training.distributed import DistributedContext, init_distributed
from attnlab.training.losses import TokenLoss, label_smoothed_cross_entropy
from attnlab.training.optim import build_optimizer
from attnlab.training.schedules import NoamSchedule, ScheduledLR, WarmupCosineSchedule
from attnlab.training.trainer import LossFn, TrainConfig, Trainer

__all__ = [
    "Batch",
    "BatchSource",
    "DistributedContext",
    "ListBatchSource",
    "LossFn",
    "NoamSchedule",
    "ScheduledLR",
    "TokenLoss",
    "TrainConfig",
    "Trainer",
    "WarmupCosineSchedule",
    "average_checkpoints",
    "build_optimizer",
    "average_checkpoints_to_directory",
    "init_distributed",
    "label_smoothed_cross_entropy",
    "latest_checkpoint",
    "list_checkpoints",
    "load_model_weights",
    "load_training_state",
    "save_checkpoint",
    "write_model_directory",
]
