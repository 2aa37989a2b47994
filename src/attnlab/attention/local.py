"""Local attention patterns of the Image Transformer (Parmar et al. 2018, §3.2): each query
block attends only a nearby memory, computed blockwise so that no L×L matrix is formed.

* ``local_1d`` (:class:`Local1D`): the sequence is cut into blocks of ``block_length`` b.
  Masked: a query block attends itself (causally) and the previous block (memory 2b).
  Unmasked (``masked=False``, for encoders): the previous, its own and the next block (3b).
* ``local_2d`` (:class:`Local2D`): the sequence is a raster of ``width`` positions per row
  (for an image of H×W×C sub-pixels, the grid H × W·C, as tensor2tensor reshapes it),
  cut into query blocks of ``query_shape`` (qh, qw). The *sequence order* is the generation
  order: blocks in raster order, raster order inside a block (:func:`block_raster_order`
  maps it to the image raster). Masked: a block's memory is the block itself (causally), fh
  rows above it and fw columns on each side of those rows, and the fw columns left of it
  (tensor2tensor's ``masked_local_attention_2d`` with ``make_2d_block_raster_mask``: the
  right flange of the block's own rows comes later in the generation order). Unmasked: the
  block with a flange of fh rows above and below and fw columns on each side. Positions
  outside the raster are never attended (tensor2tensor attends zero padding there).

Both patterns work in two ways with the same rule:

* the whole sequence at once (training, a prefill into an empty cache): queries in blocks,
  keys gathered per block by :meth:`_BlockedLocal.memory_index`; time O(L·M·D) and memory
  O(L·M) for a memory of M keys per block;
* queries and keys at explicit positions (cached decoding, a fixed-shape step): the mask
  :meth:`_BlockedLocal.allowed` of query and key positions, O(Lq·Lk) for the keys a cache
  passes — its :attr:`cache_window` is the exact farthest key a query may attend, so
  sampling one sequence costs O(L · window · D).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from attnlab.attention.core import attend_unchecked
from attnlab.attention.masks import combine_masks
from attnlab.attention.patterns import AttentionContext, AttentionPattern, register_pattern


def _positive_int(value: Any, name: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")
    return value


def _pair(value: Any, name: str, *, minimum: int) -> tuple[int, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"{name}={value!r} must be a pair [rows, columns]")
    return (_positive_int(value[0], f"{name}[0]", minimum=minimum), _positive_int(value[1], f"{name}[1]", minimum=minimum))


def block_raster_coordinates(positions: Tensor, width: int, query_shape: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """Rows and columns of sequence ``positions`` in the generation order of 2D blocks: query
    blocks of ``query_shape`` in raster order over a grid ``width`` wide, raster order inside
    a block. ``width`` must be a multiple of the block width."""
    block_rows, block_cols = query_shape
    per_block = block_rows * block_cols
    blocks_per_row = width // block_cols
    block, inside = torch.div(positions, per_block, rounding_mode="floor"), positions % per_block
    row = torch.div(block, blocks_per_row, rounding_mode="floor") * block_rows + torch.div(
        inside, block_cols, rounding_mode="floor")
    col = (block % blocks_per_row) * block_cols + inside % block_cols
    return row, col


def block_raster_order(height: int, width: int, query_shape: tuple[int, int]) -> Tensor:
    """``(height·width,)``: the raster index (row·width + col) of each generation position
    of :class:`Local2D`; ``order.argsort()`` maps back. The blocks must tile the grid."""
    if height % query_shape[0] or width % query_shape[1]:
        raise ValueError(f"query_shape {tuple(query_shape)} does not tile a {height}×{width} raster")
    row, col = block_raster_coordinates(torch.arange(height * width), width, query_shape)
    return row * width + col


class _BlockedLocal(AttentionPattern):
    """What the two local patterns share: the blockwise kernel and the positional path.

    Subclasses give ``block_size`` (queries per block), :meth:`memory_index` (which key
    positions each block's memory holds) and :meth:`allowed` (the same rule on positions).
    """

    masked: bool = True

    @property
    def causal(self) -> bool:  # a class attribute elsewhere; here it depends on the instance
        return self.masked

    def block_size(self, ctx: AttentionContext) -> int:
        raise NotImplementedError

    def memory_index(self, num_blocks: int, ctx: AttentionContext, device) -> Tensor:
        """``(num_blocks, M)`` key positions of each query block's memory; out-of-range ones
        (negative or >= L) are not keys (the kernel masks them)."""
        raise NotImplementedError

    def allowed(self, query_positions: Tensor, key_positions: Tensor, ctx: AttentionContext) -> Tensor:
        """Whether a query may attend a key, from their positions (broadcasting)."""
        raise NotImplementedError

    def forward(self, q, k, v, ctx):
        query_len, key_len = q.shape[-2], k.shape[-2]
        key_only_mask = ctx.mask is None or (ctx.mask.dim() >= 2 and ctx.mask.shape[-2] == 1)
        if query_len == key_len and ctx.queries_are_last(query_len, key_len) and ctx.key_offset == 0 and key_only_mask:
            return self._blocked(q, k, v, ctx)
        allowed = self.allowed(ctx.query_positions(query_len, key_len, q.device)[:, None],
                               ctx.key_positions(key_len, q.device)[None, :], ctx)
        return attend_unchecked(q, k, v, mask=combine_masks(ctx.mask, allowed), dropout_p=ctx.dropout_p,
                                need_weights=ctx.need_weights)

    def _blocked(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor | None]:
        """Queries and keys are the same positions 0..L-1: attend block by block."""
        batch, heads, length, width = q.shape
        size = self.block_size(ctx)
        blocks = -(-length // size)
        padded = blocks * size
        index = self.memory_index(blocks, ctx, q.device)  # (N, M)
        memory = index.shape[1]
        real = (index >= 0) & (index < length)
        gather = torch.where(real, index, 0).flatten()
        # Blocks as the "heads" of a (B·H, N, ...) call: one (N, Q, M) mask then serves every
        # batch row and head by broadcasting (no copy unless key padding varies by row).
        keys = k.index_select(2, gather).view(batch * heads, blocks, memory, width)  # (B·H, N, M, D)
        values = v.index_select(2, gather).view(batch * heads, blocks, memory, v.shape[-1])
        queries = torch.nn.functional.pad(q, (0, 0, 0, padded - length)).reshape(batch * heads, blocks, size, width)
        mask = real[:, None, :]  # (N, 1, M)
        if self.masked:
            query_positions = torch.arange(padded, device=q.device).view(blocks, size, 1)
            mask = mask & (index[:, None, :] <= query_positions)  # (N, Q, M)
        mask = mask.expand(blocks, size, memory)
        if ctx.mask is not None:  # key padding, broadcastable to (B, H, 1, L)
            key_mask = ctx.mask.reshape((1,) * (4 - ctx.mask.dim()) + tuple(ctx.mask.shape))[:, :, 0, :]
            key_mask = key_mask.expand(*key_mask.shape[:2], length).index_select(2, gather)
            mask = mask & key_mask.view(*key_mask.shape[:2], blocks, 1, memory)  # (B|1, H|1, N, Q, M)
            mask = mask.expand(batch, heads, blocks, size, memory).reshape(batch * heads, blocks, size, memory)
        out, weights = attend_unchecked(queries, keys, values, mask=mask, dropout_p=ctx.dropout_p,
                                        need_weights=ctx.need_weights)
        out = out.view(batch, heads, padded, -1)[:, :, :length]
        if weights is None:
            return out, None
        # Weights were asked for (attention maps): scatter each block's into the (L, L) matrix.
        columns = torch.where(real, index, length)[:, None, :].expand(blocks, size, memory).reshape(1, 1, padded, memory)
        full = weights.new_zeros(batch, heads, padded, length + 1)
        full.scatter_add_(3, columns.expand(batch, heads, padded, memory), weights.reshape(batch, heads, padded, memory))
        return out, full[:, :, :length, :length]


@register_pattern("local_1d")
class Local1D(_BlockedLocal):
    """Local 1D attention (Image Transformer §3.2, "local 1D"): blocks of ``block_length`` b.

    Masked (default): query i attends keys j <= i in its own block and the previous one,
    memory 2b, so a cache needs the last 2b keys (:attr:`cache_window`). Unmasked: the
    previous, own and next block (3b). Time O(L·b·D), memory O(L·b); the padding of a
    length that is not a multiple of b is never attended.
    """

    def __init__(self, block_length: int = 256, masked: bool = True):
        super().__init__()
        self.block_length = _positive_int(block_length, "block_length")
        if not isinstance(masked, bool):
            raise ValueError(f"masked={masked!r} must be true or false")
        self.masked = masked

    @property
    def cache_window(self) -> int | None:
        # The last query of a block reaches back to the first key of the previous block.
        return 2 * self.block_length if self.masked else None

    def spec(self):
        return {"name": "local_1d", "block_length": self.block_length, "masked": self.masked}

    def block_size(self, ctx):
        return self.block_length

    def forward(self, q, k, v, ctx):
        query_len, key_len = q.shape[-2], k.shape[-2]
        if (self.masked and query_len == 1 and not ctx.need_weights and ctx.queries_are_last(1, key_len)
                and (ctx.mask is None or (ctx.mask.dim() >= 2 and ctx.mask.shape[-2] == 1))):
            # A decode step: the keys it attends are one contiguous run, from the start of the
            # previous block to itself; narrow to them instead of masking (no mask at all).
            position = ctx.key_offset + key_len - 1
            first = max((position // self.block_length - 1) * self.block_length - ctx.key_offset, 0)
            mask = ctx.mask
            if mask is not None and mask.shape[-1] != 1:
                mask = mask.narrow(-1, first, key_len - first)
            return attend_unchecked(q, k.narrow(2, first, key_len - first), v.narrow(2, first, key_len - first),
                                    mask=mask, dropout_p=ctx.dropout_p, need_weights=ctx.need_weights)
        return super().forward(q, k, v, ctx)

    def memory_index(self, num_blocks, ctx, device):
        b = self.block_length
        span = 2 * b if self.masked else 3 * b
        return (torch.arange(num_blocks, device=device)[:, None] - 1) * b + torch.arange(span, device=device)

    def allowed(self, query_positions, key_positions, ctx):
        b = self.block_length
        query_block = torch.div(query_positions, b, rounding_mode="floor")
        key_block = torch.div(key_positions, b, rounding_mode="floor")
        near = (key_block >= query_block - 1) & (key_positions >= 0)
        if self.masked:
            return near & (key_positions <= query_positions)
        return near & (key_block <= query_block + 1)


@register_pattern("local_2d")
class Local2D(_BlockedLocal):
    """Local 2D attention (Image Transformer §3.2, "local 2D") over a raster ``width``
    positions wide, in the generation order of query blocks (see the module docstring).

    Args:
        query_shape: (qh, qw) rows and columns of a query block; qw must divide the width.
        memory_flange: (fh, fw) rows above (and below, unmasked) and columns on each side.
        masked: causal in the generation order (decoders) or not (encoders).
        width: the raster width; None = taken from ``ctx.geometry`` (``(H, W)`` or
            ``(H, W, C)``: width W·C) at every call. A model that decodes with a cache sets
            it: the cache window depends on it.

    Memory per block M = fh·(qw+2fw) + qh·(fw+qw) masked (the rows above with both flanges,
    then the block's own rows with the left flange: the right one is all future),
    (qh+2fh)·(qw+2fw) unmasked; time
    O(L·M·D), memory O(L·M). The farthest key a masked query attends is the top-left
    corner of its memory, so :attr:`cache_window` = (⌈fh/qh⌉·(width/qw) + ⌈fw/qw⌉ + 1)·qh·qw
    − (−fh mod qh)·qw − (−fw mod qw) (exact when the raster is at least that wide and tall).
    """

    def __init__(self, query_shape=(8, 16), memory_flange=(8, 16), masked: bool = True, width: int | None = None):
        super().__init__()
        self.query_shape = _pair(query_shape, "query_shape", minimum=1)
        self.memory_flange = _pair(memory_flange, "memory_flange", minimum=0)
        if not isinstance(masked, bool):
            raise ValueError(f"masked={masked!r} must be true or false")
        self.masked = masked
        if width is not None:
            self._check_width(_positive_int(width, "width"))
        self.width = width

    def _check_width(self, width: int) -> int:
        if width % self.query_shape[1]:
            raise ValueError(f"local_2d: the query block width {self.query_shape[1]} does not divide the raster "
                             f"width {width}; choose a query_shape whose columns divide it")
        return width

    def raster_width(self, ctx: AttentionContext | None = None) -> int:
        """The raster width this call uses: ``width``, or the one ``ctx.geometry`` gives."""
        geometry = None if ctx is None else ctx.geometry
        if geometry is not None:
            width = self._check_width(math.prod(geometry[1:]))
            if self.width is not None and width != self.width:
                raise ValueError(f"local_2d: geometry {tuple(geometry)} has raster width {width}, but the pattern "
                                 f"was built for width {self.width}")
            return width
        if self.width is None:
            raise ValueError("local_2d needs the raster width: build it with width=... or pass geometry")
        return self.width

    @property
    def cache_window(self) -> int | None:
        if not self.masked or self.width is None:
            return None
        (qh, qw), (fh, fw) = self.query_shape, self.memory_flange
        blocks_back = -(-fh // qh) * (self.width // qw) + -(-fw // qw)
        return (blocks_back + 1) * qh * qw - ((-fh) % qh) * qw - (-fw) % qw

    def spec(self):
        spec = {"name": "local_2d", "query_shape": list(self.query_shape), "memory_flange": list(self.memory_flange),
                "masked": self.masked}
        if self.width is not None:
            spec["width"] = self.width
        return spec

    def block_size(self, ctx):
        return self.query_shape[0] * self.query_shape[1]

    def memory_index(self, num_blocks, ctx, device):
        # A plain int: under tracing (ONNX export) the grid is then a constant of the image's
        # fixed size, not a shape-dependent computation (whose unfold the exporter cannot read).
        num_blocks = int(num_blocks)
        width = self.raster_width(ctx)
        (qh, qw), (fh, fw) = self.query_shape, self.memory_flange
        blocks_per_row = width // qw
        block_rows = -(-num_blocks // blocks_per_row)
        # The generation position of every cell of a grid of whole block rows, -1 outside.
        rows = torch.arange(block_rows * qh, device=device)[:, None]
        cols = torch.arange(width, device=device)[None, :]
        grid = ((torch.div(rows, qh, rounding_mode="floor") * blocks_per_row + torch.div(cols, qw, rounding_mode="floor"))
                * (qh * qw) + (rows % qh) * qw + cols % qw)
        below = 0 if self.masked else fh
        grid = torch.nn.functional.pad(grid, (fw, fw, fh, below), value=-1)
        memory_rows = qh + fh + below
        patches = grid.unfold(0, memory_rows, qh).unfold(1, qw + 2 * fw, qw)  # (rows, cols, mh, mw)
        patches = patches.reshape(block_rows * blocks_per_row, memory_rows, qw + 2 * fw)[:num_blocks]
        if not self.masked:
            return patches.flatten(1)
        # Masked: the right flange of the block's own rows comes later in the generation order
        # for every query of the block, so it is left out rather than gathered and masked.
        return torch.cat([patches[:, :fh].flatten(1), patches[:, fh:, :fw + qw].flatten(1)], dim=1)

    def allowed(self, query_positions, key_positions, ctx):
        width = self.raster_width(ctx)
        (qh, qw), (fh, fw) = self.query_shape, self.memory_flange
        query_row, query_col = block_raster_coordinates(query_positions, width, self.query_shape)
        key_row, key_col = block_raster_coordinates(key_positions, width, self.query_shape)
        top = torch.div(query_row, qh, rounding_mode="floor") * qh  # the query block's first row and column
        left = torch.div(query_col, qw, rounding_mode="floor") * qw
        inside = ((key_row >= top - fh) & (key_row < top + qh + (0 if self.masked else fh))
                  & (key_col >= left - fw) & (key_col < left + qw + fw) & (key_positions >= 0))
        if self.masked:
            return inside & (key_positions <= query_positions)
        return inside


__all__ = ["Local1D", "Local2D", "block_raster_coordinates", "block_raster_order"]
