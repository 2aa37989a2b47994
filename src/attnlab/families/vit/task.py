"""Image classification with the shared Trainer: loss, prediction, evaluation.

* :func:`classification_loss`: label-smoothed cross-entropy summed over the images, with
  the NLL and the number of correct predictions as logs (the trainer reports their means:
  ``nll``, ``ppl`` and ``correct`` = accuracy);
* :func:`evaluate_classifier`: accuracy, per-class accuracy and the confusion matrix;
* :func:`load_classifier`: a saved ViT and its class names (``classes.json``), as the verbs
  and the pipeline read it.

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


def load_classifier(directory: str, device):
    """A saved ViT and its class names (``classes.json``), or a timm ViT checkpoint directory
    (:func:`attnlab.interop.timm_vit.load_timm_vit`: its label names); ValueError for anything else."""
    import sys

    import attnlab
    from attnlab.interop.timm_vit import is_timm_vit_directory, load_timm_vit
    from attnlab.models.vit import VisionTransformer

    if is_timm_vit_directory(directory):
        return load_timm_vit(directory, device=str(device))
    model = attnlab.load_model(directory, device=str(device))
    if not isinstance(model, VisionTransformer):
        raise ValueError(f"{directory}: holds a {model.config.family} model, not a Vision Transformer")
    path = Path(directory) / CLASSES_FILE
    if not path.exists():  # a model saved without it (e.g. by the Python API): say so, and number the classes
        print(f"note: {directory} has no {CLASSES_FILE}; its {model.config.num_classes} classes are shown as "
              f"'class 0' .. 'class {model.config.num_classes - 1}'", file=sys.stderr)
        return model, [f"class {i}" for i in range(model.config.num_classes)]
    from attnlab.files import read_json_object
    from attnlab.tasks import MAX_TASK_FILE_BYTES

    try:  # size-capped, depth-safe: one line naming the file
        classes = read_json_object(path, max_bytes=MAX_TASK_FILE_BYTES, what="a class list")["classes"]
    except (OSError, KeyError) as error:
        raise ValueError(f"{path}: not a valid class list ({error})") from None
    if not isinstance(classes, list) or not all(isinstance(name, str) for name in classes):
        raise ValueError(f"{path}: not a valid class list (\"classes\" must be a list of names)")
    if len(classes) != model.config.num_classes:
        raise ValueError(f"{path}: names {len(classes)} classes, but the model has {model.config.num_classes}; "
                         "the file does not belong to this model")
    return model, classes


def save_confusion_matrix(evaluation: Evaluation, path: str | Path, *, title: str = "") -> Path:
    """The confusion matrix as a PNG (see :func:`attnlab.viz.confusion.plot_confusion_matrix`)."""
    from attnlab.viz.confusion import plot_confusion_matrix

    return plot_confusion_matrix(evaluation.confusion, evaluation.classes, path,
                                 title=title or f"confusion matrix, accuracy {100 * evaluation.accuracy:.2f}%")
