"""Patch embedding and 2-D position embeddings ("An Image is Worth 16x16 Words", §3.1).

An image ``(B, C, H, W)`` is cut into non-overlapping ``P x P`` patches, each flattened
to ``C·P·P`` numbers and projected linearly to ``d_model``. A convolution with kernel and
stride ``P`` computes exactly that projection for all patches at once.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class PatchEmbedding(nn.Module):
    """``(B, C, H, W)`` images -> ``(B, (H/P)·(W/P), d_model)`` patch vectors, row-major.

    ``proj`` is a ``Conv2d(C, d_model, kernel_size=P, stride=P)``; its weight reshaped to
    ``(d_model, C·P·P)`` is the paper's matrix E (transposed).
    """

    def __init__(self, patch_size: int, in_channels: int, d_model: int):
        super().__init__()
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.proj = nn.Conv2d(in_channels, d_model, kernel_size=patch_size, stride=patch_size)
        # Xavier-uniform on the flattened (d_model, C·P·P) matrix, as for a linear layer.
        nn.init.xavier_uniform_(self.proj.weight.view(d_model, -1))
        nn.init.zeros_(self.proj.bias)

    def grid(self, images: Tensor) -> tuple[int, int]:
        """The patch grid ``(H/P, W/P)`` of ``images``; ValueError for a wrong shape."""
        if images.dim() != 4:
            raise ValueError(f"images must be (batch, channels, height, width), got shape {tuple(images.shape)}")
        _, channels, height, width = images.shape
        if channels != self.in_channels:
            raise ValueError(f"images have {channels} channel(s), the model expects {self.in_channels}")
        p = self.patch_size
        if height % p or width % p:
            raise ValueError(f"image size {height}x{width} is not divisible by the patch size {p}")
        return height // p, width // p

    def forward(self, images: Tensor) -> Tensor:
        self.grid(images)
        return self.proj(images).flatten(2).transpose(1, 2)  # (B, d, h, w) -> (B, h·w, d)


def sincos_position_embedding_2d(grid: tuple[int, int], d_model: int) -> Tensor:
    """Fixed 2-D sine-cosine position embeddings ``(h·w, d_model)`` (MoCo v3 / MAE layout):
    the first half of the channels encode the row, the second half the column, each
    as [sin | cos] of the coordinate at ``d_model/4`` geometric frequencies."""
    if d_model % 4:
        raise ValueError(f"2-D sine-cosine position embeddings need d_model divisible by 4, got {d_model}")
    quarter = d_model // 4
    omega = 1.0 / 10000 ** (torch.arange(quarter, dtype=torch.float64) / quarter)
    rows, cols = torch.meshgrid(torch.arange(grid[0], dtype=torch.float64),
                                torch.arange(grid[1], dtype=torch.float64), indexing="ij")
    parts = []
    for coordinate in (rows.flatten(), cols.flatten()):
        angles = coordinate[:, None] * omega[None]
        parts += [angles.sin(), angles.cos()]
    return torch.cat(parts, dim=1).float()


def resize_position_embedding(embedding: Tensor, old_grid: tuple[int, int], new_grid: tuple[int, int],
                              num_prefix: int) -> Tensor:
    """Bicubic interpolation of ``(1, num_prefix + h·w, d)`` position embeddings from the
    ``old_grid`` of patches to ``new_grid``; the prefix (class token) rows are kept as they
    are. Resizing to the same grid returns the same values."""
    prefix, patches = embedding[:, :num_prefix], embedding[:, num_prefix:]
    if patches.shape[1] != old_grid[0] * old_grid[1]:
        raise ValueError(f"position embedding has {patches.shape[1]} patch positions, not the "
                         f"{old_grid[0]}x{old_grid[1]} grid it was said to have")
    d = patches.shape[-1]
    image = patches.reshape(1, old_grid[0], old_grid[1], d).permute(0, 3, 1, 2)
    image = F.interpolate(image.float(), size=new_grid, mode="bicubic", align_corners=False).to(patches.dtype)
    patches = image.permute(0, 2, 3, 1).reshape(1, new_grid[0] * new_grid[1], d)
    return torch.cat([prefix, patches], dim=1)


def square_grid(num_positions: int) -> tuple[int, int]:
    """The ``(n, n)`` grid of ``num_positions`` patches; ValueError if it is not a square."""
    side = math.isqrt(num_positions)
    if side * side != num_positions:
        raise ValueError(f"{num_positions} patch positions do not form a square grid")
    return side, side
