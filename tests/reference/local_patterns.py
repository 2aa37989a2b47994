"""Reference masks of the local attention patterns, written from their definitions with
plain loops over cells (float64 attention is :func:`reference.attention.naive_attention`).

2D follows tensor2tensor's ``masked_local_attention_2d`` / ``make_2d_block_raster_mask``
literally: the memory of a query block is a rectangle of fh rows above the block and fw
columns on each side; the rows above are all visible, in the block's own rows the left
flange is visible, the block itself in raster order, the right flange not. Cells outside
the sequence are never visible. Nothing here uses the generation order to decide
visibility, so agreeing with the pattern (which masks by generation order) is a check.
"""

from __future__ import annotations

import torch


def local_1d_mask(length: int, block: int, masked: bool) -> torch.Tensor:
    allowed = torch.zeros(length, length, dtype=torch.bool)
    for i in range(length):
        for j in range(length):
            if masked:
                allowed[i, j] = j <= i and j // block in (i // block, i // block - 1)
            else:
                allowed[i, j] = abs(j // block - i // block) <= 1
    return allowed


def generation_order_2d(length: int, width: int, query_shape) -> list[tuple[int, int]]:
    """(row, col) of the first ``length`` generation positions: blocks in raster order,
    raster order inside each block."""
    qh, qw = query_shape
    cells = []
    block_row = 0
    while len(cells) < length:
        for block_col in range(width // qw):
            for i in range(qh):
                for j in range(qw):
                    cells.append((block_row * qh + i, block_col * qw + j))
        block_row += 1
    return cells[:length]


def local_2d_mask(length: int, width: int, query_shape, memory_flange, masked: bool) -> torch.Tensor:
    qh, qw = query_shape
    fh, fw = memory_flange
    cells = generation_order_2d(length, width, query_shape)
    allowed = torch.zeros(length, length, dtype=torch.bool)
    for i, (row, col) in enumerate(cells):
        top, left = row // qh * qh, col // qw * qw
        for j, (key_row, key_col) in enumerate(cells):
            if not left - fw <= key_col < left + qw + fw:
                continue
            if not masked:
                allowed[i, j] = top - fh <= key_row < top + qh + fh
            elif top - fh <= key_row < top:
                allowed[i, j] = True  # the flange rows above the block
            elif top <= key_row < top + qh:
                if key_col < left:
                    allowed[i, j] = True  # left flange
                elif key_col < left + qw:  # inside the block: raster order
                    allowed[i, j] = (key_row - top) * qw + (key_col - left) <= (row - top) * qw + (col - left)
    return allowed
