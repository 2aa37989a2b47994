"""Image grids as PNG: samples, completions, super-resolution strips."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def image_grid(rows: Sequence[Sequence[Tensor]], *, padding: int = 2, background: int = 255) -> Tensor:
    """Rows of ``(C, H, W)`` uint8 images (the same C; sizes may differ) -> one ``(C, H', W')``
    image, each cell as large as the largest image, separated by ``padding`` pixels."""
    cells = [image for row in rows for image in row]
    if not cells:
        raise ValueError("image_grid: no images")
    channels = max(image.shape[0] for image in cells)
    height = max(image.shape[1] for image in cells)
    width = max(image.shape[2] for image in cells)
    columns = max(len(row) for row in rows)
    grid = torch.full((channels, padding + len(rows) * (height + padding), padding + columns * (width + padding)),
                      background, dtype=torch.uint8)
    for r, row in enumerate(rows):
        for c, image in enumerate(row):
            top, left = padding + r * (height + padding), padding + c * (width + padding)
            grid[:, top:top + image.shape[1], left:left + image.shape[2]] = image.expand(channels, -1, -1)
    return grid


def upscale(image: Tensor, factor: int) -> Tensor:
    """Nearest-neighbour enlargement ``(C, H, W)`` -> ``(C, H·f, W·f)`` (pixels stay visible)."""
    return image.repeat_interleave(factor, dim=-2).repeat_interleave(factor, dim=-1) if factor > 1 else image


__all__ = ["image_grid", "upscale"]  # PNG bytes: attnlab.data.images.to_bytes_png
