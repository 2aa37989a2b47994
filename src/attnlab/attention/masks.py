"""Attention masks. One convention everywhere: a boolean tensor, True = may attend.

Masks are built small and broadcast: a key-padding mask is ``(B, 1, 1, Lk)``, a causal
mask is ``(Lq, Lk)``; :func:`combine_masks` ANDs any number of them (``None`` = no
restriction).
"""

from __future__ import annotations

import torch
from torch import Tensor


def key_padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """``(B, L)`` token ids -> ``(B, 1, 1, L)`` boolean mask, True at real tokens."""
    return (ids != pad_id)[:, None, None, :]


def lengths_mask(lengths: Tensor, max_len: int) -> Tensor:
    """``(B,)`` lengths -> ``(B, 1, 1, max_len)`` boolean mask, True at positions < length."""
    positions = torch.arange(max_len, device=lengths.device)
    return (positions[None, :] < lengths[:, None])[:, None, None, :]


def causal_mask(query_len: int, key_len: int | None = None, *, device=None) -> Tensor:
    """``(Lq, Lk)`` boolean mask where query i may attend key j iff j <= i + (Lk - Lq).

    The queries are taken to be the *last* ``Lq`` of ``Lk`` positions, which is exactly
    the situation of incremental decoding with a cache (keys = past + current).
    """
    key_len = query_len if key_len is None else key_len
    if key_len < query_len:
        raise ValueError(f"causal_mask: key_len={key_len} is shorter than query_len={query_len}")
    return torch.ones(query_len, key_len, dtype=torch.bool, device=device).tril(key_len - query_len)


def band_mask(query_len: int, key_len: int, *, before: int, after: int = 0, device=None) -> Tensor:
    """``(Lq, Lk)`` mask allowing keys within ``[i - before, i + after]`` of query i.

    Queries are aligned to the last ``Lq`` keys, as in :func:`causal_mask`.
    """
    offset = key_len - query_len
    q = torch.arange(query_len, device=device)[:, None] + offset
    k = torch.arange(key_len, device=device)[None, :]
    return (k >= q - before) & (k <= q + after)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of boolean masks that broadcast together; ``None`` entries are skipped."""
    result = None
    for mask in masks:
        if mask is None:
            continue
        result = mask if result is None else result & mask
    return result


def check_mask(mask: Tensor, batch: int, heads: int, query_len: int, key_len: int, name: str = "mask") -> None:
    """Raise ValueError unless ``mask`` is boolean and broadcasts to ``(B, H, Lq, Lk)``."""
    target = (batch, heads, query_len, key_len)
    if mask.dtype != torch.bool:
        raise ValueError(f"{name} must be a boolean tensor (True = may attend), got dtype {mask.dtype}")
    try:
        fits = mask.dim() <= 4 and torch.broadcast_shapes(tuple(mask.shape), target) == target
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"{name} of shape {tuple(mask.shape)} does not broadcast to (B, H, Lq, Lk) = {target}")
