"""Image classification with the shared Trainer: loss, prediction, evaluation.

* :func:`classification_loss`: label-smoothed cross-entropy summed over the images, with
  the NLL and the number of correct predictions as logs (the trainer reports their means:
  ``nll``, ``ppl`` and ``correct`` = accuracy);
* :func:`evaluate_classifier`: accuracy, per-class accuracy and the confusion matrix.

Batches come from :class:`attnlab.training.image_batches.ImageBatches`; pixels go into the
model as ``(x / 255 - 0.5) / 0.5`` (:func:`attnlab.data.images.normalize`), the same in
training, evaluation and ``attnlab classify``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from attnlab.data.images import ImageSet, normalize
from attnlab.training.losses import label_smoothed_cross_entropy

CLASSES_FILE = "classes.json"


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
