"""The "Show, Attend and Tell" figure: where each generated word looked in the image.

:func:`plot_caption_attention` draws the image, then one panel per generated word (and
EOS) with the last decoder layer's cross-attention (mean over heads), upsampled from the
encoder's grid to the pixels, over a dimmed copy of the image.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from torch import Tensor

from attnlab.viz.figures import new_figure, save_figure

__all__ = ["caption_attention", "plot_caption_attention", "write_caption_figures"]


def caption_attention(model, tokenizer, image: Tensor, tokens: list[int]) -> tuple[list[str], Tensor]:
    """Labels (each token's piece, then ``<eos>``) and their attention maps ``(n, h, w)``
    (:func:`attnlab.families.caption.task.word_attention`)."""
    from attnlab.families.caption.task import word_attention

    attention = word_attention(model, image, tokens)
    labels = [piece.replace("\u2581", "") or "\u2581" for piece in tokenizer.pieces(tokens)] + ["<eos>"]
    return labels[:attention.shape[0]], attention


def plot_caption_attention(image: Tensor, labels: list[str], attention: Tensor, path: str | os.PathLike, *,
                           title: str = "", columns: int = 6, dpi: int = 100) -> Path:
    """``image`` uint8 ``(3, H, W)``; ``attention`` ``(len(labels), h, w)`` -> a PNG at ``path``."""
    if attention.shape[0] != len(labels):
        raise ValueError(f"{len(labels)} labels for {attention.shape[0]} attention maps")
    picture = image.permute(1, 2, 0).numpy().astype(np.float64) / 255.0
    height, width = picture.shape[:2]
    panels = len(labels) + 1
    columns = min(columns, panels)
    rows = -(-panels // columns)
    figure = new_figure(1.7 * columns, 1.9 * rows + 0.3, dpi)
    if title:
        figure.suptitle(title, fontsize=9)
    axis = figure.add_subplot(rows, columns, 1)
    axis.imshow(picture, interpolation="nearest")
    axis.set_title("image", fontsize=8)
    axis.axis("off")
    for i, (label, weights) in enumerate(zip(labels, attention)):
        up = weights.repeat_interleave(height // weights.shape[0], 0).repeat_interleave(width // weights.shape[1], 1)
        axis = figure.add_subplot(rows, columns, i + 2)
        axis.imshow(picture * 0.45, interpolation="nearest")
        axis.imshow(up.numpy(), cmap="inferno", alpha=0.6, interpolation="nearest", vmin=0.0)
        axis.set_title(label, fontsize=8)
        axis.axis("off")
    figure.tight_layout()
    return save_figure(figure, path)


def write_caption_figures(model, tokenizer, images: Tensor, captions, out_dir: str | os.PathLike, *,
                          names: list[str] | None = None) -> list[Path]:
    """One PNG per image (``out_dir/<name>.png``) for its generated caption (a
    :class:`~attnlab.families.caption.task.CaptionedImage`)."""
    out_dir = Path(out_dir)
    paths = []
    for i, (image, caption) in enumerate(zip(images, captions)):
        labels, attention = caption_attention(model, tokenizer, image, caption.tokens)
        name = names[i] if names else f"image_{i:04d}"
        paths.append(plot_caption_attention(image, labels, attention, out_dir / f"{name}.png",
                                            title=caption.text or "(empty caption)"))
    return paths
