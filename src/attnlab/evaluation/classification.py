"""What every classifier's evaluation reports from its confusion matrix: accuracy, macro-F1
and per-class precision, recall and F1 (the text classifier; the ViT's ``Evaluation``
keeps its per-class accuracy)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["confusion_matrix", "classification_scores"]


def confusion_matrix(true: Tensor, predicted: Tensor, num_classes: int) -> Tensor:
    """``(num_classes, num_classes)`` counts: row = true class, column = predicted class."""
    true, predicted = torch.as_tensor(true, dtype=torch.long), torch.as_tensor(predicted, dtype=torch.long)
    return torch.bincount(true * num_classes + predicted, minlength=num_classes ** 2).reshape(num_classes, num_classes)


def classification_scores(confusion: Tensor, classes: list[str]) -> dict:
    """``{"accuracy", "macro_f1", "items", "per_class": {name: {precision, recall, f1, support}}}``
    from a confusion matrix. A class never predicted has precision 0, one absent from the
    data recall 0 (scikit-learn's ``zero_division=0``); macro-F1 averages the classes that
    occur in the data or the predictions (scikit-learn's ``f1_score(average="macro")``)."""
    counts = confusion.double()
    hits, support, predicted = counts.diagonal(), counts.sum(1), counts.sum(0)
    precision = torch.where(predicted > 0, hits / predicted.clamp_min(1), torch.zeros_like(hits))
    recall = torch.where(support > 0, hits / support.clamp_min(1), torch.zeros_like(hits))
    f1 = torch.where(precision + recall > 0, 2 * precision * recall / (precision + recall).clamp_min(1e-300),
                     torch.zeros_like(hits))
    present = (support > 0) | (predicted > 0)
    total = float(counts.sum())
    return {"accuracy": float(hits.sum()) / total if total else float("nan"),
            "macro_f1": float(f1[present].mean()) if bool(present.any()) else float("nan"),
            "items": int(total),
            "per_class": {name: {"precision": float(precision[i]), "recall": float(recall[i]), "f1": float(f1[i]),
                                 "support": int(support[i])} for i, name in enumerate(classes)}}
