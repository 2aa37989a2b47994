"""Image classification with the shared Trainer: batches, augmentation, loss, evaluation.

* :class:`ImageBatches`: a resumable batch source over an :class:`~attnlab.data.images.ImageSet`
  (a fresh seeded permutation each epoch; random shifts and optional left-right flips drawn
  from a generator seeded by (seed, epoch, batch), so a resumed run sees exactly the same
  augmented batches);
* :func:`classification_loss`: label-smoothed cross-entropy summed over the images, with
  the NLL and the number of correct predictions as logs (the trainer reports their means:
  ``nll``, ``ppl`` and ``correct`` = accuracy);
* :func:`train_classifier`: model + data + AdamW / warm-up + cosine -> a model directory;
* :func:`evaluate_classifier`: accuracy, per-class accuracy and the confusion matrix.

Pixels go into the model as ``(x / 255 - 0.5) / 0.5`` (:func:`normalize`), the same in
training, evaluation and ``attnlab classify``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.data.images import ImageSet
from attnlab.training.batches import EpochPosition
from attnlab.training.losses import label_smoothed_cross_entropy

CLASSES_FILE = "classes.json"


def normalize(images: Tensor) -> Tensor:
    """uint8 ``(B, C, H, W)`` -> float32 in [-1, 1]."""
    return images.float().div(127.5).sub(1.0)


def random_shift(images: Tensor, max_shift: int, generator: torch.Generator) -> Tensor:
    """Shift each image by up to ``max_shift`` pixels in each direction (zero fill): pad,
    then crop at a random offset (the usual "random crop with padding")."""
    if max_shift <= 0:
        return images
    batch, _, height, width = images.shape
    padded = F.pad(images, (max_shift,) * 4)
    offsets = torch.randint(0, 2 * max_shift + 1, (batch, 2), generator=generator).tolist()
    return torch.stack([padded[i, :, dy:dy + height, dx:dx + width] for i, (dy, dx) in enumerate(offsets)])


def random_hflip(images: Tensor, generator: torch.Generator, p: float = 0.5) -> Tensor:
    """Mirror each image left-right with probability ``p`` (for data whose classes survive a
    mirror, e.g. clothes; not digits)."""
    flip = torch.rand(images.shape[0], generator=generator) < p
    if not flip.any():
        return images
    return torch.where(flip[:, None, None, None], images.flip(-1), images)


class ImageBatches(EpochPosition):
    """Shuffled mini-batches ``{"images": float (B, C, H, W), "labels": (B,)}`` of an image set,
    with optional random shifts and left-right flips; resumable (``state_dict`` = epoch and position).
    ``raw=True`` keeps the uint8 pixels (generative models predict them)."""

    def __init__(self, data: ImageSet, batch_size: int, *, seed: int = 0, shuffle: bool = True, max_shift: int = 0,
                 hflip: bool = False, drop_last: bool = True, raw: bool = False):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if len(data) == 0:
            raise ValueError(f"{data.name} {data.split}: no images")
        self.data, self.batch_size, self.seed = data, batch_size, seed
        self.shuffle, self.max_shift, self.drop_last, self.raw = shuffle, max_shift, drop_last, raw
        self.hflip = hflip
        self.epoch, self.position = 0, 0

    def __len__(self) -> int:
        full, rest = divmod(len(self.data), self.batch_size)
        return max(1, full) if self.drop_last else full + bool(rest)

    def _order(self) -> Tensor:
        if not self.shuffle:
            return torch.arange(len(self.data))
        return torch.randperm(len(self.data), generator=torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch))

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        if self.position >= len(self):
            self.epoch, self.position = self.epoch + 1, 0
        order = self._order()
        while self.position < len(self):
            index = order[self.position * self.batch_size:(self.position + 1) * self.batch_size]
            images = self.data.images[index]
            if self.max_shift or self.hflip:
                generator = torch.Generator().manual_seed(
                    (self.seed * 1_000_003 + self.epoch) * 1_000_003 + self.position)
                images = random_shift(images, self.max_shift, generator)
                if self.hflip:
                    images = random_hflip(images, generator)
            self.position += 1
            yield {"images": images if self.raw else normalize(images), "labels": self.data.labels[index]}


def evaluation_batches(data: ImageSet, batch_size: int = 500) -> list[dict[str, Tensor]]:
    """Every image once, in order, not augmented."""
    return list(ImageBatches(data, batch_size, shuffle=False, drop_last=False))


def classification_loss(model, batch, *, label_smoothing: float = 0.0):
    """``(loss_sum, num_images, {"nll": sum, "correct": count})`` for the shared Trainer."""
    logits = model(batch["images"])
    loss = label_smoothed_cross_entropy(logits, batch["labels"], epsilon=label_smoothing)
    correct = (logits.detach().argmax(dim=-1) == batch["labels"]).sum()
    return loss.loss_sum, loss.num_tokens, {"nll": loss.nll_sum.detach(), "correct": correct}


@dataclass
class Evaluation:
    accuracy: float
    per_class: list[float]
    confusion: Tensor  # (true class, predicted class) counts
    classes: list[str]

    def summary(self) -> str:
        lines = [f"accuracy {100 * self.accuracy:.2f}% ({int(self.confusion.trace())} of {int(self.confusion.sum())})"]
        for name, value, count in zip(self.classes, self.per_class, self.confusion.sum(1).tolist()):
            lines.append(f"  {name:>12}: {100 * value:6.2f}% of {count}")
        return "\n".join(lines)


@torch.no_grad()
def predict(model, images: Tensor, *, batch_size: int = 500) -> Tensor:
    """Class probabilities ``(N, num_classes)`` for uint8 images ``(N, C, H, W)``."""
    model.eval()
    device = next(model.parameters()).device
    parts = [model(normalize(images[i:i + batch_size]).to(device)).float().softmax(-1).cpu()
             for i in range(0, len(images), batch_size)]
    return torch.cat(parts)


def evaluate_classifier(model, data: ImageSet, *, batch_size: int = 500) -> Evaluation:
    """Accuracy, per-class accuracy (NaN for a class absent from ``data``) and confusion matrix."""
    predicted = predict(model, data.images, batch_size=batch_size).argmax(-1)
    k = len(data.classes)
    confusion = torch.bincount(data.labels * k + predicted, minlength=k * k).reshape(k, k)
    totals = confusion.sum(1).double()
    per_class = (confusion.diagonal().double() / totals).tolist()
    return Evaluation(float(confusion.trace()) / max(1, len(data)), per_class, confusion, list(data.classes))


def save_confusion_matrix(evaluation: Evaluation, path: str | Path, *, title: str = "") -> Path:
    """The confusion matrix as a PNG (see :func:`attnlab.viz.vit.plot_confusion_matrix`)."""
    from attnlab.viz.vit import plot_confusion_matrix

    return plot_confusion_matrix(evaluation.confusion, evaluation.classes, path,
                                 title=title or f"confusion matrix, accuracy {100 * evaluation.accuracy:.2f}%")
