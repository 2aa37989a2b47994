"""Relative-position self-attention: Shaw et al. 2018 and the Music Transformer's skewing.

Both patterns add a learned term that depends only on the distance between a query and a
key to the attention logits (Shaw et al. 2018, "Self-Attention with Relative Position
Representations", eq. 5 with relative keys only; Huang et al. 2018, "Music Transformer",
§3.4):

    softmax((q_i k_jᵀ + q_i E[r(i, j)]ᵀ) / sqrt(D)) v

where ``r(i, j)`` indexes the embedding of the distance ``d = pos(i) - pos(j)``:

* causal (decoder): one row per distance ``0 .. max_relative_position`` (keys in the
  future are masked, so negative distances never count);
* non-causal (encoder, both directions): one row per distance ``-max .. +max`` (separate
  embeddings for keys before and after the query).

**Distances beyond** ``max_relative_position`` **use the last row** (clipping, as in Shaw
et al. §3.2), so any length runs, past the trained length and past the span, and the two
patterns compute the same function; the skewed pattern and Shaw's are tested equal, and
each equal to a float64 loop that gathers ``E[clip(d)]`` for every (i, j).

Embeddings are per head ``(H, R, D)`` or shared by all heads ``(R, D)`` (``shared=True``).
The pattern owns them as ``nn.Parameter`` s, created when
:class:`~attnlab.attention.multihead.MultiHeadAttention` binds it to its head geometry
(:meth:`~attnlab.attention.patterns.AttentionPattern.bind`), so they are saved, loaded and
counted with the model (``...self_attn.pattern.relative_embeddings``).

Queries and keys may sit anywhere (``ctx.query_offset``, ``ctx.key_offset``: a cache, a
fixed-shape step whose offset is a device tensor): every query gets its relative logits
against every key it is given; relative attention keeps all keys (``cache_window`` None),
so a cached step equals full recomputation at any length.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.attention.core import attend_unchecked
from attnlab.attention.masks import causal_mask, combine_masks
from attnlab.attention.patterns import AttentionContext, AttentionPattern, register_pattern

MAX_RELATIVE_POSITION = 1 << 16  # a loaded config may not ask for more embedding rows
# RelativeSkew computes long inputs in query chunks of at most this many logits (B·H·rows·Lk,
# 8 MB in float32): at L = 2048 with 8 heads, 128 queries at a time.
CHUNK_ELEMENTS = 1 << 21


def skew(relative: Tensor, key_len: int) -> Tensor:
    """Move relative logits into absolute (query, key) places: Huang et al. §3.4.1's
    pad–reshape–slice, for ``Lq`` queries at the *end* of a window of distances.

    ``relative`` ``(..., Lq, W)``: column ``c`` of row ``i`` holds the logit of distance
    ``d_max - c`` (``d_max`` = the distance of the last query to the first key, so the
    columns run from the farthest key down). Returns ``(..., Lq, Lk)`` (a view) with
    ``out[i, j] = relative[i, j + Lq - 1 - i]`` wherever that column exists
    (``j + Lq - 1 - i < W``): query i at ``d_max - (Lq - 1 - i)`` against key j is exactly
    that distance. Elsewhere the entries are other rows' values (the garbage of the trick,
    which a causal mask hides; with ``W = Lk + Lq - 1`` there is none). Needs ``W >= Lk``.

    Padding each row with one zero column makes rows ``W + 1`` long; reading the flat
    buffer with rows ``W`` long shifts each row one place left of the one above it.
    """
    *lead, query_len, width = relative.shape
    if width < key_len:
        raise ValueError(f"skew: {width} relative columns cannot cover {key_len} keys")
    padded = F.pad(relative, (0, 1))  # (..., Lq, W + 1)
    flat = padded.reshape(*lead, query_len * (width + 1))
    rows = flat.narrow(-1, query_len - 1, query_len * width).reshape(*lead, query_len, width)
    return rows.narrow(-1, 0, key_len)


class _Relative(AttentionPattern):
    """What the two relative patterns share: parameters, distances and their embedding rows."""

    encodes_positions = True  # a stack may go without absolute positions, in both directions

    def __init__(self, max_relative_position: int = 64, causal: bool = True, shared: bool = False):
        super().__init__()
        if isinstance(max_relative_position, bool) or not isinstance(max_relative_position, int):
            raise ValueError(f"max_relative_position={max_relative_position!r} must be an integer")
        if not 0 <= max_relative_position <= MAX_RELATIVE_POSITION:
            raise ValueError(f"max_relative_position={max_relative_position} must be in [0, {MAX_RELATIVE_POSITION}] "
                             "(0: one embedding shared by every distance, i.e. no position information)")
        if not isinstance(causal, bool) or not isinstance(shared, bool):
            raise ValueError(f"causal={causal!r} and shared={shared!r} must be true or false")
        self.max_relative_position = max_relative_position
        self.causal = causal
        self.shared = shared
        self.relative_embeddings: nn.Parameter | None = None

    @property
    def num_rows(self) -> int:
        """Embedding rows: distances 0..max (causal) or -max..max."""
        return self.max_relative_position + 1 if self.causal else 2 * self.max_relative_position + 1

    def bind(self, num_heads: int, head_dim: int) -> None:
        shape = (self.num_rows, head_dim) if self.shared else (num_heads, self.num_rows, head_dim)
        if self.relative_embeddings is not None:
            if tuple(self.relative_embeddings.shape) != shape:
                raise ValueError(f"{self.name} pattern is already bound to embeddings of shape "
                                 f"{tuple(self.relative_embeddings.shape)}, not {shape}")
            return
        # tensor2tensor's initialisation of relative embeddings: N(0, D^-1/2).
        self.relative_embeddings = nn.Parameter(torch.randn(shape) * head_dim ** -0.5)

    def spec(self):
        return {"name": self.name, "max_relative_position": self.max_relative_position, "causal": self.causal,
                "shared": self.shared}

    def _row_index(self, distances: Tensor) -> Tensor:
        """Embedding row of each distance (any shape), clipped to the span."""
        m = self.max_relative_position
        return distances.clamp(0, m) if self.causal else distances.clamp(-m, m) + m

    def _embeddings(self, q: Tensor) -> Tensor:
        if self.relative_embeddings is None:
            raise RuntimeError(f"the {self.name} pattern has no embeddings yet: MultiHeadAttention binds it "
                               "to its heads (pattern.bind(num_heads, head_dim))")
        return self.relative_embeddings.to(q.dtype)

    def _mask(self, ctx: AttentionContext, query_len: int, key_len: int, device) -> Tensor | None:
        """ctx.mask, and for a causal pattern no key after its query."""
        if not self.causal:
            return ctx.mask
        if ctx.queries_are_last(query_len, key_len):
            if query_len == 1:
                return ctx.mask  # a single last query: every key is in its past
            return combine_masks(ctx.mask, causal_mask(query_len, key_len, device=device))
        return combine_masks(ctx.mask, ctx.distances(query_len, key_len, device) >= 0)


@register_pattern("relative_skew")
class RelativeSkew(_Relative):
    """Relative attention with the skewing trick (Huang et al. 2018, §3.4.1).

    ``q Eᵀ`` is computed once for the distances present, ``(B, H, Lq, W)``, and moved into
    absolute (query, key) places by :func:`skew` (pad–reshape–slice); the result is added to
    the logits before the softmax. Never an ``Lq × Lk × D`` tensor.

    Cost: time O(Lq·Lk·D) (the same order as ``q kᵀ``); memory O(Lq·Lk) for the relative
    logits plus O((Lk + R)·D) for the embedding rows. Causal: ``W = Lk`` columns (distances
    ``d_max .. d_max - Lk + 1``; the entries the trick fills with other rows' values are all
    future keys, masked). Non-causal: ``W = Lk + Lq - 1``, every distance.

    When the span is shorter than the distances (``R`` rows < ``W``), the logits are
    computed for the ``R`` rows, ``(B, H, Lq, R)``, and their columns gathered by the
    clipped distance, instead of multiplying ``q`` by ``W`` gathered rows.

    Long inputs (more than ``chunk_elements`` = 2²¹ logits, e.g. L = 2048 with 8 heads) are
    computed in query chunks, checkpointed under autograd (:meth:`_attend_in_chunks`), so
    memory is O(chunk·Lk) rather than O(Lq·Lk) in training too; tested equal, values and
    gradients, to the whole computation. Not when the weights are asked for.
    """

    chunk_elements = CHUNK_ELEMENTS  # an instance may set its own (tests, benchmarks); not part of the spec

    def forward(self, q, k, v, ctx):
        batch, heads, query_len, _ = q.shape
        key_len = k.shape[-2]
        rows = max(1, self.chunk_elements // max(1, batch * heads * key_len))
        if (ctx.need_weights or rows >= query_len or self.chunk_elements <= 0
                or not (ctx.query_offset is None or isinstance(ctx.query_offset, int))):
            return self._attend(q, k, v, ctx)
        return self._attend_in_chunks(q, k, v, ctx, rows), None

    def _attend_in_chunks(self, q, k, v, ctx, rows: int) -> Tensor:
        """The same outputs, ``rows`` queries at a time, so no ``(B, H, Lq, Lk)`` tensor
        exists at once: each chunk's relative logits, scores and softmax live only while
        the chunk is computed, and under autograd each chunk is checkpointed (recomputed in
        the backward pass, with the same dropout), so training keeps only the chunks'
        inputs and outputs. A causal chunk reads only the keys up to its last query."""
        from torch.utils.checkpoint import checkpoint

        query_len, key_len = q.shape[-2], k.shape[-2]
        offset = ctx.key_offset + key_len - query_len if ctx.query_offset is None else ctx.query_offset
        mask = ctx.mask
        track = torch.is_grad_enabled() and any(
            t.requires_grad for t in (q, k, v, self.relative_embeddings) if t is not None)
        outs = []
        for start in range(0, query_len, rows):
            stop = min(query_len, start + rows)
            keys = min(key_len, max(1, offset + stop - ctx.key_offset)) if self.causal else key_len
            part = mask
            if part is not None and part.dim() >= 2 and part.shape[-2] == query_len:
                part = part[..., start:stop, :]
            if part is not None and part.shape[-1] == key_len:
                part = part[..., :keys]
            sub = AttentionContext(query_offset=offset + start, key_offset=ctx.key_offset, mask=part,
                                   geometry=ctx.geometry, dropout_p=ctx.dropout_p)
            args = (q[..., start:stop, :], k[..., :keys, :], v[..., :keys, :])
            if track:
                outs.append(checkpoint(lambda a, b, c, sub=sub: self._attend(a, b, c, sub)[0], *args,
                                       use_reentrant=False))
            else:
                outs.append(self._attend(*args, sub)[0])
        return torch.cat(outs, dim=-2)

    def _attend(self, q, k, v, ctx):
        query_len, key_len = q.shape[-2], k.shape[-2]
        width = key_len if self.causal else key_len + query_len - 1
        # Column c holds distance (last query - first key) - c; a device tensor, no host sync
        # even when the offset is one (a fixed-shape step).
        last = ctx.query_positions(query_len, key_len, q.device)[-1:] - ctx.key_offset  # (1,)
        columns = last - torch.arange(width, device=q.device)  # (W,)
        rows = self._row_index(columns)  # (W,)
        embeddings = self._embeddings(q)  # (H, R, D) or (R, D)
        scaled = q * (1.0 / math.sqrt(q.shape[-1]))
        if self.num_rows < width:  # q Eᵀ for the R rows, then spread over the W columns
            relative = torch.matmul(scaled, embeddings.transpose(-2, -1))  # (B, H, Lq, R)
            relative = relative.index_select(-1, rows)  # (B, H, Lq, W)
        else:  # the W rows present, then q Eᵀ
            picked = embeddings.index_select(-2, rows)  # (H, W, D) or (W, D)
            relative = torch.matmul(scaled, picked.transpose(-2, -1))  # (B, H, Lq, W)
        bias = skew(relative, key_len)  # (B, H, Lq, Lk)
        mask = self._mask(ctx, query_len, key_len, q.device)
        return attend_unchecked(q, k, v, mask=mask, bias=bias, dropout_p=ctx.dropout_p,
                                need_weights=ctx.need_weights, finite_bias=True)


@register_pattern("relative_shaw")
class RelativeShaw(_Relative):
    """Relative attention as Shaw et al. 2018 wrote it (relative keys, eq. 5): the
    embedding of every (query, key) pair's clipped distance is gathered into an
    ``(Lq, Lk, D)`` tensor (``(H, Lq, Lk, D)`` per head) and multiplied with the queries.

    Cost: time O(Lq·Lk·D), memory O(Lq·Lk·D) (O(H·Lq·Lk·D) per head): the readable
    reference and the memory baseline of :class:`RelativeSkew`, which computes the same.
    """

    def forward(self, q, k, v, ctx):
        query_len, key_len = q.shape[-2], k.shape[-2]
        distances = ctx.distances(query_len, key_len, q.device)  # (Lq, Lk)
        pairs = self._embeddings(q).index_select(-2, self._row_index(distances).flatten())
        pairs = pairs.unflatten(-2, (query_len, key_len))  # (Lq, Lk, D) or (H, Lq, Lk, D)
        scaled = q * (1.0 / math.sqrt(q.shape[-1]))
        if self.shared:
            bias = torch.einsum("bhqd,qkd->bhqk", scaled, pairs)
        else:
            bias = torch.einsum("bhqd,hqkd->bhqk", scaled, pairs)
        mask = self._mask(ctx, query_len, key_len, q.device)
        return attend_unchecked(q, k, v, mask=mask, bias=bias, dropout_p=ctx.dropout_p,
                                need_weights=ctx.need_weights, finite_bias=True)


__all__ = ["RelativeSkew", "RelativeShaw", "skew"]
