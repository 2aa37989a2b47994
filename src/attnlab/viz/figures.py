"""Figures as PNG files: a matplotlib figure on the Agg canvas (no pyplot), written to a
temporary name and renamed into place (the ViT and captioning figures)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["new_figure", "save_figure"]


def new_figure(width: float, height: float, dpi: int):
    """A matplotlib figure on the Agg canvas (no pyplot, no display), ``width`` x ``height`` inches."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure, path: str | os.PathLike) -> Path:
    """Write ``figure`` as PNG to a temporary name in the same directory, then rename
    (missing directories above it are made by :func:`attnlab.files.atomic_write`)."""
    from attnlab.files import atomic_write

    path = Path(path)
    atomic_write(path, lambda tmp: figure.savefig(tmp, format="png"))
    return path
