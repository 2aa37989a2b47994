"""Attention patterns: what is special about a variant of attention, and their registry.

A pattern turns projected, head-split ``q, k, v`` into outputs. Besides the tensors it
receives an :class:`AttentionContext` saying *where* the queries and keys sit in their
sequence (a cache offset, or explicit positions), which keys are padding, and any
geometry (e.g. the height and width of an image raster), so that local and relative
variants can be written as patterns alone. :class:`~attnlab.attention.multihead.
MultiHeadAttention` owns projections and caches and does not know which pattern it holds.

Patterns are named in model configs (``attention="causal"``, or a dict spec such as
``{"name": "local_1d", "block_length": 256}``), built by :func:`build_pattern` and listed by
:func:`list_patterns`. A new variant is one class::

    @register_pattern("banded_causal")
    class BandedCausal(AttentionPattern):
        causal = True
        def __init__(self, width: int):
            super().__init__()
            self.width = width
        @property
        def cache_window(self):
            return self.width + 1                    # a cache need keep no older keys
        def spec(self):
            return {"name": "banded_causal", "width": self.width}
        def forward(self, q, k, v, ctx):
            distance = ctx.distances(q.shape[-2], k.shape[-2], q.device)   # (Lq, Lk)
            mask = combine_masks(ctx.mask, (distance >= 0) & (distance <= self.width))
            return attend_unchecked(q, k, v, mask=mask, dropout_p=ctx.dropout_p, need_weights=ctx.need_weights)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.attention.core import attend_unchecked
from attnlab.attention.masks import causal_mask, combine_masks
from attnlab.attention.varlen import attend_varlen


class AttentionContext:
    """Where the queries and keys of one attention call sit, and what else a pattern may use.

    Attributes:
        query_offset: sequence position of the first query; an int, or a ``(1,)`` long
            tensor when the caller must not sync with the host (a fixed-shape decode step,
            see :class:`~attnlab.attention.cache.StaticKVCache`). None: the queries are the
            last ``Lq`` of the keys (self-attention, with or without a growing cache).
        key_offset: sequence position of the first key (a cache that keeps only a window);
            an int, or a ``(1,)`` long tensor in a fixed-shape step over a window (it may then
            be negative: keys before position 0 come masked).
        mask: boolean, broadcastable to ``(B, H, Lq, Lk)``, True = may attend: key padding
            and any other restriction the caller has; None = none.
        geometry: the shape of the sequence's raster for 2D patterns, e.g. ``(H, W, C)``.
        dropout_p: dropout on the attention weights (0.0 in eval mode).
        need_weights: return the ``(B, H, Lq, Lk)`` weights.
        segments: a :class:`~attnlab.attention.varlen.Segments` when q, k and v are packed
            variable-length sequences ``(1, H, T, D)``; only patterns with ``varlen = True``
            get one (:class:`~attnlab.attention.multihead.MultiHeadAttention` checks).

    Positions are slots of the sequence (cache slots), not the per-row token positions of
    a left-padded batch; padding is contiguous, so distances between real tokens are the same.
    """

    __slots__ = ("query_offset", "key_offset", "mask", "geometry", "dropout_p", "need_weights", "segments")

    def __init__(self, *, query_offset: int | Tensor | None = None, key_offset: int = 0, mask: Tensor | None = None,
                 geometry: tuple[int, ...] | None = None, dropout_p: float = 0.0, need_weights: bool = False,
                 segments=None):
        self.segments = segments
        self.query_offset = query_offset
        self.key_offset = key_offset
        self.mask = mask
        self.geometry = geometry
        self.dropout_p = dropout_p
        self.need_weights = need_weights

    def queries_are_last(self, query_len: int, key_len: int) -> bool:
        """True when the queries are the last ``Lq`` of the ``Lk`` keys (no host sync)."""
        offset = self.query_offset
        return offset is None or (isinstance(offset, int) and offset == self.key_offset + key_len - query_len)

    def query_positions(self, query_len: int, key_len: int, device=None) -> Tensor:
        """``(Lq,)`` sequence positions of the queries."""
        offset = self.key_offset + key_len - query_len if self.query_offset is None else self.query_offset
        return torch.arange(query_len, device=device) + offset

    def key_positions(self, key_len: int, device=None) -> Tensor:
        """``(Lk,)`` sequence positions of the keys."""
        return torch.arange(key_len, device=device) + self.key_offset

    def distances(self, query_len: int, key_len: int, device=None) -> Tensor:
        """``(Lq, Lk)`` query position minus key position (> 0: the key is in the past)."""
        return self.query_positions(query_len, key_len, device)[:, None] - self.key_positions(key_len, device)[None, :]


class AttentionPattern(nn.Module):
    """Base class. Subclasses implement :meth:`forward` and are registered by name.

    ``causal``: a query never sees later positions; generation reads it (only a causal
    self-attention pattern can be decoded step by step with a cache of the past).
    ``cache_window``: how many keys up to and including its own position a query may
    attend (None = all); a cache need keep no older keys, so a decode step passes only
    that window. A pattern must mask by position itself whenever the keys it gets reach
    beyond what it attends (a fixed-shape step passes the whole preallocated cache).
    """

    causal: bool = False
    encodes_positions: bool = False  # the pattern itself tells positions apart (relative attention)
    name: str = ""

    @property
    def cache_window(self) -> int | None:
        return None

    def bind(self, num_heads: int, head_dim: int) -> None:
        """Called once by the :class:`~attnlab.attention.multihead.MultiHeadAttention` that
        holds the pattern, with its head geometry: a pattern with parameters of its own
        (relative embeddings) creates them here. Nothing by default."""

    def spec(self) -> str | dict[str, Any]:
        """What a config stores to rebuild this pattern with :func:`build_pattern`."""
        return self.name

    def forward(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor | None]:
        """q ``(B, H, Lq, D)``, k/v ``(B, H, Lk, D)`` -> ``(out (B, H, Lq, D), weights (B, H, Lq, Lk) or None)``."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        spec = self.spec()
        return "" if isinstance(spec, str) else ", ".join(f"{k}={v!r}" for k, v in spec.items() if k != "name")


_PATTERNS: dict[str, type[AttentionPattern]] = {}


def register_pattern(name: str) -> Callable[[type[AttentionPattern]], type[AttentionPattern]]:
    """Class decorator: make a pattern buildable from configs as ``name``."""

    def decorate(cls: type[AttentionPattern]) -> type[AttentionPattern]:
        if name in _PATTERNS:
            raise ValueError(f"attention pattern {name!r} is registered twice")
        cls.name = name
        _PATTERNS[name] = cls
        return cls

    return decorate


def list_patterns() -> list[str]:
    """Names of all registered attention patterns, sorted."""
    return sorted(_PATTERNS)


def build_pattern(spec: str | dict[str, Any] | AttentionPattern) -> AttentionPattern:
    """A pattern from its config spec: a name (``"causal"``) or ``{"name": ..., **parameters}``.

    Raises ValueError naming the spec when the name is unknown or the parameters do not fit.
    """
    if isinstance(spec, AttentionPattern):
        return spec
    if isinstance(spec, str):
        name, parameters = spec, {}
    elif isinstance(spec, dict) and isinstance(spec.get("name"), str):
        name, parameters = spec["name"], {k: v for k, v in spec.items() if k != "name"}
    else:
        raise ValueError(f"attention pattern {spec!r}: give a name or a dict with a 'name' and its parameters")
    if name not in _PATTERNS:
        raise ValueError(f"unknown attention pattern {name!r}; registered patterns: {', '.join(list_patterns())}")
    try:
        return _PATTERNS[name](**parameters)
    except TypeError as error:  # wrong or missing parameters
        raise ValueError(f"attention pattern {spec!r}: {error}") from None


@register_pattern("full")
class FullAttention(AttentionPattern):
    """Every query attends every (unmasked) key. Time O(Lq·Lk·D), memory O(Lq·Lk) for the
    weights when they are requested (the fused kernel avoids materialising them)."""

    varlen = True

    def forward(self, q, k, v, ctx):
        if ctx.segments is not None:
            return attend_varlen(q, k, v, ctx.segments, dropout_p=ctx.dropout_p, need_weights=ctx.need_weights)
        return attend_unchecked(q, k, v, mask=ctx.mask, dropout_p=ctx.dropout_p, need_weights=ctx.need_weights)


@register_pattern("causal")
class CausalAttention(AttentionPattern):
    """Query i attends keys j <= i (masked self-attention, "Attention Is All You Need" §3.2.3).

    Same cost as :class:`FullAttention`. When the queries are the last keys: without an
    extra mask and with ``Lq == Lk`` the fused kernel applies the triangle itself, and a
    single new query (``Lq == 1``, cached decoding) needs no causal mask at all since every
    key is in its past. Otherwise (explicit positions) the mask comes from the positions.
    """

    causal = True
    varlen = True

    def forward(self, q, k, v, ctx):
        if ctx.segments is not None:
            return attend_varlen(q, k, v, ctx.segments, causal=True, dropout_p=ctx.dropout_p,
                                 need_weights=ctx.need_weights)
        query_len, key_len = q.shape[-2], k.shape[-2]
        mask = ctx.mask
        if not ctx.queries_are_last(query_len, key_len):
            mask = combine_masks(mask, ctx.distances(query_len, key_len, q.device) >= 0)
        elif mask is None and query_len == key_len and query_len > 1:
            return attend_unchecked(q, k, v, dropout_p=ctx.dropout_p, need_weights=ctx.need_weights, is_causal=True)
        elif query_len > 1:
            mask = combine_masks(mask, causal_mask(query_len, key_len, device=q.device))
        return attend_unchecked(q, k, v, mask=mask, dropout_p=ctx.dropout_p, need_weights=ctx.need_weights)
