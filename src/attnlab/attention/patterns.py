"""Attention patterns: what is special about a variant of attention.

A pattern turns projected, head-split ``q, k, v`` into outputs. It receives all keys
seen so far (with a cache: past + current) and the queries of the current positions,
which are always the *last* ``Lq`` of the ``Lk`` key positions in self-attention.
:class:`~attnlab.attention.multihead.MultiHeadAttention` owns projections and caches and
does not know which pattern it holds, so a new variant (local 1D/2D, relative) is a new
pattern, not an edit to the models.
"""

from __future__ import annotations

from torch import Tensor, nn

from attnlab.attention.core import attend_unchecked
from attnlab.attention.masks import causal_mask, combine_masks


class AttentionPattern(nn.Module):
    """Base class. Subclasses implement :meth:`forward`.

    ``causal`` says whether a query may see later positions; generation code uses it to
    know that a cache of past keys is all a new position needs.
    """

    causal: bool = False

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None = None,
                dropout_p: float = 0.0, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """q ``(B, H, Lq, D)``, k/v ``(B, H, Lk, D)``, mask boolean broadcastable to
        ``(B, H, Lq, Lk)`` -> ``(out (B, H, Lq, D), weights (B, H, Lq, Lk) or None)``."""
        raise NotImplementedError


class FullAttention(AttentionPattern):
    """Every query attends every (unmasked) key. Time O(Lq·Lk·D), memory O(Lq·Lk) for the
    weights when they are requested (the fused kernel avoids materialising them)."""

    def forward(self, q, k, v, *, mask=None, dropout_p=0.0, need_weights=False):
        return attend_unchecked(q, k, v, mask=mask, dropout_p=dropout_p, need_weights=need_weights)


class CausalAttention(AttentionPattern):
    """Query i attends keys j <= i (masked self-attention, "Attention Is All You Need" §3.2.3).

    Same cost as :class:`FullAttention`. Without an extra mask and with ``Lq == Lk`` the
    fused kernel applies the triangle itself; a single new query (``Lq == 1``, cached
    decoding) needs no causal mask at all since every cached key is in its past.
    """

    causal = True

    def forward(self, q, k, v, *, mask=None, dropout_p=0.0, need_weights=False):
        query_len, key_len = q.shape[-2], k.shape[-2]
        if mask is None and query_len == key_len and query_len > 1:
            return attend_unchecked(q, k, v, dropout_p=dropout_p, need_weights=need_weights, is_causal=True)
        if query_len > 1:
            mask = combine_masks(mask, causal_mask(query_len, key_len, device=q.device))
        return attend_unchecked(q, k, v, mask=mask, dropout_p=dropout_p, need_weights=need_weights)
