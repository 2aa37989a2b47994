"""Attention heatmaps: one panel per layer and head, keys (e.g. source tokens) across,
queries (e.g. target tokens) down, as in the figures of Vaswani et al. (2017).

Uses matplotlib's Agg canvas directly (no pyplot, no display, no global figure state), so
it works on headless machines and in threads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["plot_attention_grid"]


def plot_attention_grid(weights, key_labels: Sequence[str], query_labels: Sequence[str],
                        path: str | os.PathLike, *, title: str | None = None, dpi: int = 100,
                        panel_inches: float | None = None) -> Path:
    """Write a PNG grid of attention maps: rows are layers, columns are heads.

    Args:
        weights: ``(layers, heads, queries, keys)`` array or tensor of attention
            probabilities (each query row sums to 1).
        key_labels: one label per key (x axis), e.g. source subword pieces.
        query_labels: one label per query (y axis), e.g. target subword pieces.
        path: the ``.png`` file to write (its directory is created).
        title: drawn above the grid.
        panel_inches: size of one panel; default grows with the number of tokens.

    Returns:
        ``path`` as a ``Path``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    array = weights.detach().float().cpu().numpy() if hasattr(weights, "detach") else np.asarray(weights, float)
    if array.ndim != 4:
        raise ValueError(f"weights must be (layers, heads, queries, keys), got shape {array.shape}")
    layers, heads, queries, keys = array.shape
    if len(key_labels) != keys or len(query_labels) != queries:
        raise ValueError(f"weights have {queries} queries x {keys} keys but {len(query_labels)} query labels "
                         f"and {len(key_labels)} key labels")
    size = panel_inches or min(6.0, max(2.5, 0.22 * max(keys, queries) + 1.0))
    figure = Figure(figsize=(size * heads, size * layers + (0.6 if title else 0.0)), dpi=dpi)
    FigureCanvasAgg(figure)
    axes = figure.subplots(layers, heads, squeeze=False)
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer][head]
            ax.imshow(array[layer, head], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto",
                      interpolation="nearest")
            ax.set_xticks(range(keys))
            ax.set_xticklabels(key_labels, rotation=90, fontsize=7)
            ax.set_yticks(range(queries))
            ax.set_yticklabels(query_labels if head == 0 else [], fontsize=7)
            ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=8)
    if title:
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path = Path(path)
    from attnlab.files import atomic_write  # makes missing directories above path

    atomic_write(path, lambda temporary: figure.savefig(temporary, format="png"))  # never through a symlink
    return path
