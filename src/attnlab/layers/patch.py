"""Patch embedding and 2-D position embeddings ("An Image is Worth 16x16 Words", §3.1).

An image ``(B, C, H, W)`` is cut into non-overlapping ``P x P`` patches, each flattened
to ``C·P·P`` numbers and projected linearly to ``d_model``. A convolution with kernel and
stride ``P`` computes exactly that projection for all patches at once.

The paper's hybrid (§3.1, "Hybrid Architecture") takes the patches from a CNN's feature
map instead of the pixels. :class:`ConvStem` is that CNN in its smallest useful form, the
convolutional stem of Xiao et al. 2021 ("Early Convolutions Help Transformers See
Better"): 3x3 convolutions of stride 2, each followed by BatchNorm and ReLU, so ``k`` of
them turn an ``H x W`` image into an ``H/2^k x W/2^k`` map, whose ``P x P`` patches (1x1
in the paper's special case) are then projected as above. One token then stands for
``2^k·P`` pixels a side.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class _BatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d (running averages with momentum 0.1) without its int64 update counter,
    which only momentum=None uses: attnlab's weight files hold floating point only."""

    def __init__(self, width: int):
        super().__init__(width)
        self.register_buffer("num_batches_tracked", None)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args):
        # Without a version in the metadata (safetensors keep none) BatchNorm would add the
        # counter it expects from before PyTorch 0.4.1, and then find it unexpected.
        super()._load_from_state_dict(state_dict, prefix, {**local_metadata, "version": 2}, *args)


def strided_conv_layers(in_channels: int, widths, *, norm: str, activation: str, bias: bool) -> list[nn.Module]:
    """For each entry of ``widths``: a 3x3 convolution of stride 2 and padding 1 (halving
    H and W, rounding up) to that many channels, a norm (``"batch"``: BatchNorm2d;
    ``"group"``: GroupNorm with one group) and an activation (``"relu"`` or ``"gelu"``),
    as one flat list ``[conv, norm, act, conv, ...]``; convolutions keep PyTorch's init."""
    norms = {"batch": _BatchNorm2d, "group": lambda width: nn.GroupNorm(1, width)}
    activations = {"relu": nn.ReLU, "gelu": nn.GELU}
    layers: list[nn.Module] = []
    for width in widths:
        layers += [nn.Conv2d(in_channels, width, 3, stride=2, padding=1, bias=bias), norms[norm](width),
                   activations[activation]()]
        in_channels = width
    return layers


class ConvStem(nn.Sequential):
    """``(B, C, H, W)`` -> ``(B, channels[-1], H/2^k, W/2^k)``: for each entry of
    ``channels`` a 3x3 convolution of stride 2 (padding 1, no bias), BatchNorm and ReLU
    (Xiao et al.), as ``stem.{3i}`` (conv), ``stem.{3i+1}`` (norm); the convolutions start
    He-normal (fan-out)."""

    def __init__(self, in_channels: int, channels: tuple[int, ...]):
        super().__init__(*strided_conv_layers(in_channels, channels, norm="batch", activation="relu", bias=False))
        for layer in self:
            if isinstance(layer, nn.Conv2d):
                nn.init.kaiming_normal_(layer.weight, mode="fan_out", nonlinearity="relu")

    @property
    def first_conv(self) -> nn.Conv2d:
        return self[0]


class PatchEmbedding(nn.Module):
    """``(B, C, H, W)`` images -> ``(B, (H/S)·(W/S), d_model)`` patch vectors, row-major,
    where ``S = 2^len(stem_channels) · P`` pixels is the side one token stands for.

    ``proj`` is a ``Conv2d(C, d_model, kernel_size=P, stride=P)``; its weight reshaped to
    ``(d_model, C·P·P)`` is the paper's matrix E (transposed). With ``stem_channels`` (the
    hybrid) a :class:`ConvStem` runs first and ``proj`` cuts patches from its feature map.
    """

    def __init__(self, patch_size: int, in_channels: int, d_model: int, stem_channels: tuple[int, ...] = ()):
        super().__init__()
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.stem = ConvStem(in_channels, tuple(stem_channels)) if stem_channels else None
        self.stem_convolutions = len(stem_channels)
        self.stride = patch_size * 2 ** self.stem_convolutions
        features = stem_channels[-1] if stem_channels else in_channels
        self.proj = nn.Conv2d(features, d_model, kernel_size=patch_size, stride=patch_size)
        # Xavier-uniform on the flattened (d_model, C·P·P) matrix, as for a linear layer.
        nn.init.xavier_uniform_(self.proj.weight.view(d_model, -1))
        nn.init.zeros_(self.proj.bias)

    def grid(self, images: Tensor) -> tuple[int, int]:
        """The patch grid ``(H/S, W/S)`` of ``images``; ValueError for a wrong shape."""
        if images.dim() != 4:
            raise ValueError(f"images must be (batch, channels, height, width), got shape {tuple(images.shape)}")
        _, channels, height, width = images.shape
        if channels != self.in_channels:
            raise ValueError(f"images have {channels} channel(s), the model expects {self.in_channels}")
        s = self.stride
        if height % s or width % s:
            convs = self.stem_convolutions
            what = (f"the patch size {s}" if not convs else
                    f"{s} (2^{convs} for the stem's stride-2 convolution{'s' * (convs > 1)} times the patch size "
                    f"{self.patch_size})")
            raise ValueError(f"image size {height}x{width} is not divisible by {what}")
        return height // s, width // s

    def forward(self, images: Tensor) -> Tensor:
        self.grid(images)
        if self.stem is not None:
            images = self.stem(images)
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
