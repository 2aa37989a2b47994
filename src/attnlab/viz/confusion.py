"""The confusion-matrix figure every classifier verb draws (``train vit``/``evaluate-vit``,
``evaluate-text-classifier``): rows the true class, columns the predicted one."""

from __future__ import annotations

from pathlib import Path

from torch import Tensor

from attnlab.viz.figures import new_figure, save_figure

__all__ = ["plot_confusion_matrix"]


def plot_confusion_matrix(confusion: Tensor, classes: list[str], path, *, title: str, dpi: int = 100) -> Path:
    """A PNG of a confusion matrix (rows: true class, columns: predicted; colour: share of
    the row; counts written in the cells for up to 20 classes)."""
    k = len(classes)
    counts = confusion.double()
    shares = (counts / counts.sum(1, keepdim=True).clamp_min(1)).numpy()
    figure = new_figure(6.4, 5.6, dpi)
    ax = figure.subplots()
    image = ax.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
    figure.colorbar(image, ax=ax, label="share of the true class")
    rotate = 90 if k > 10 or max(map(len, classes)) > 3 else 0
    ax.set_xticks(range(k), classes, rotation=rotate, fontsize=7)
    ax.set_yticks(range(k), classes, fontsize=7)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    if k <= 20:
        for i in range(k):
            for j in range(k):
                if int(confusion[i, j]):
                    ax.text(j, i, str(int(confusion[i, j])), ha="center", va="center", fontsize=6,
                            color="white" if shares[i, j] > 0.5 else "black")
    ax.set_title(title, fontsize=9)
    figure.tight_layout()
    return save_figure(figure, path)
