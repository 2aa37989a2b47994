"""Multi-head attention: projections, head split/merge and caches around a pattern.

"Attention Is All You Need" §3.2.2: MultiHead(Q, K, V) = Concat(head_1..head_h) W^O,
head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V), each head d_model/h wide.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.utils.weak import WeakIdKeyDictionary

from attnlab.attention.cache import KVCache, MemoryKVCache
from attnlab.attention.core import one_query_sums
from attnlab.attention.patterns import AttentionContext, AttentionPattern, FullAttention
from attnlab.attention.varlen import Segments
from attnlab.linear import DecodeCaches, Linear, derived_key, folding, linear_rows, step_linear, step_weights

_QUERY_ROWS = WeakIdKeyDictionary()
"""qkv weight -> (its derived_key, its query rows): the slice a cross-attention step multiplies,
taken once per weight (see :meth:`MultiHeadAttention.prepare_step`). Beside the weights, not
on the module, so that ``copy.deepcopy`` and ``torch.save`` of a model never carry it."""


class MultiHeadAttention(DecodeCaches, nn.Module):
    """Self- or cross-attention with ``num_heads`` heads.

    The query, key and value projections of all heads are one ``(3·d_model, d_model)``
    matrix, ``qkv_proj`` (the layout of ``torch.nn.MultiheadAttention``'s ``in_proj``):
    self-attention runs one matrix product for all three, cross-attention uses its query
    rows on the decoder states and its key/value rows on the memory.

    Args:
        d_model: model width; must be divisible by ``num_heads``.
        num_heads: h.
        dropout: dropout on the attention weights, in training only.
        pattern: the attention pattern (default :class:`FullAttention`).
        bias: biases on the projections.
    """

    def __init__(self, d_model: int, num_heads: int, *, dropout: float = 0.0,
                 pattern: AttentionPattern | None = None, bias: bool = True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.dropout = dropout
        self.pattern = pattern if pattern is not None else FullAttention()
        self.pattern.bind(num_heads, self.head_dim)  # a pattern's own parameters (relative embeddings)
        self.qkv_proj = Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = Linear(d_model, d_model, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Xavier-uniform per projection matrix (as the paper's tensor2tensor and
        # nn.MultiheadAttention initialise them), zero biases.
        for part in self.qkv_proj.weight.data.chunk(3, dim=0):
            nn.init.xavier_uniform_(part)
        nn.init.xavier_uniform_(self.out_proj.weight)
        for linear in (self.qkv_proj, self.out_proj):
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)

    def _split_heads(self, x: Tensor, parts: int) -> Tensor:
        # (B, L, parts·d_model) -> (parts, B, H, L, head_dim)
        batch, length, _ = x.shape
        return x.view(batch, length, parts, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)

    def forward(self, x: Tensor, memory: Tensor | None = None, *, mask: Tensor | None = None,
                cache=None, need_weights: bool = False,
                geometry: tuple[int, ...] | None = None) -> tuple[Tensor, Tensor | None]:
        """
        Args:
            x: ``(B, Lq, d_model)`` queries (and keys/values in self-attention).
            memory: ``(B, Lk, d_model)`` for cross-attention, None for self-attention.
            mask: boolean, broadcastable to ``(B, H, Lq, Lk)``; True = may attend.
            cache: self-attention: a :class:`KVCache` or a layer of a :class:`StaticKVCache`
                (new keys/values are written, the pattern sees the past too, or the part
                of it its ``cache_window`` needs); cross-attention: a :class:`MemoryKVCache`
                (filled on first use, reused after; ``memory`` may then be None).
            need_weights: also return per-head weights ``(B, H, Lq, Lk)``.
            geometry: passed to the pattern (2D patterns: the raster's shape).
        Returns:
            ``(out (B, Lq, d_model), weights or None)``.

        This is the only attention code path: the full forward, a cached decode step and
        a fixed-shape step differ only in the cache, which says where the keys sit.
        """
        segments = None
        if isinstance(mask, Segments):  # packed variable-length sequences (attnlab.attention.varlen)
            if not getattr(self.pattern, "varlen", False) or cache is not None:
                raise ValueError(f"attention pattern {self.pattern.spec()!r} cannot attend packed variable-length "
                                 "sequences" + (" with a cache" if cache is not None else ""))
            segments, mask = mask, None
        q, k, v, query_offset, key_offset, mask = self._project(x, memory, cache, mask)
        ctx = AttentionContext(query_offset=query_offset, key_offset=key_offset, mask=mask, geometry=geometry,
                               dropout_p=self.dropout if self.training else 0.0, need_weights=need_weights,
                               segments=segments)
        out, weights = self.pattern(q, k, v, ctx)
        return self._merge_heads(out), weights

    def step(self, x: Tensor, cache, mask: Tensor | None = None) -> tuple[Tensor, None]:
        """:meth:`forward` for a decode step (eval mode, a cache, no weights): the same
        projections, cache update and pattern, on plain tensors gathered once by
        :meth:`prepare_step` (``nn.Module`` attribute lookups and hooks cost more than a
        one-token step's arithmetic on small models). ``cache`` is a self-attention cache,
        or a filled :class:`MemoryKVCache` for cross-attention, whose rows may be fewer than
        ``x``'s: each then serves ``B // rows`` consecutive rows of ``x`` (and ``mask`` has one
        row per memory row)."""
        plan = self._step_plan
        if plan is None:
            plan = self.prepare_step()
        qkv_weight, qkv_bias, q_weight, q_bias, out_weight, out_bias, heads, head_dim, pattern, window, linear = plan
        batch, length, d = x.shape
        query_offset, key_offset = None, 0
        cross = isinstance(cache, MemoryKVCache)
        if cross:
            k, v = cache.k, cache.v
            sources = k.shape[0]
            # Each memory row serves batch // sources consecutive query rows (beam search's
            # hypotheses of one source; one when sources == batch): they attend as that row's
            # queries, reading its keys and values once. ``mask`` is then per memory row.
            q = linear(x, q_weight, q_bias).view(sources, (batch // sources) * length, heads, head_dim).transpose(1, 2)
        else:
            qkv = linear(x, qkv_weight, qkv_bias).view(batch, length, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
            q = qkv.select(0, 0)
            k, v, query_offset, key_offset, cache_mask = cache.update(qkv.narrow(0, 1, 2), window)
            if cache_mask is not None:
                mask = cache_mask if mask is None else mask & cache_mask
        context = AttentionContext(query_offset=query_offset, key_offset=key_offset, mask=mask)
        if not cross and window is None and folding():  # exported for a folded package: see one_query_sums
            with one_query_sums():
                out, _ = pattern(q, k, v, context)
        else:
            out, _ = pattern(q, k, v, context)
        return linear(out.transpose(1, 2).reshape(batch, length, d), out_weight, out_bias), None

    def prepare_step(self):
        """Gather the tensors :meth:`step` reads (called when a static cache is made, so a
        cache always steps with the weights the module has at that time). The query rows of
        the joint projection (cross-attention's queries) are sliced here once, so that the
        same tensor is multiplied at every step: a weight's derived copies (oneDNN's reordered
        weight, :func:`attnlab.linear.skinny_linear`) are kept per tensor object, and a
        fresh slice per step would reorder the weight again at every step. The slices carry no
        autograd history (the step path is inference only), so the module stays deep-copyable."""
        (weight, bias), d = step_weights(self.qkv_proj), self.d_model
        out_weight, out_bias = step_weights(self.out_proj)
        plain = type(weight) in (Tensor, nn.Parameter)
        key = derived_key(weight) if plain else None
        query_rows = _QUERY_ROWS.get(weight) if plain else None
        with torch.no_grad():
            if query_rows is None or query_rows[0] != key:  # one slice while the weight is unchanged
                query_rows = (key, (weight.detach() if plain else weight)[:d])  # the table must not keep its key alive
                if plain:
                    _QUERY_ROWS[weight] = query_rows
            # detached, as the weight's rows: an ahead-of-time compiled step (generation/aot.py)
            # reads both as named inputs, which a view of a Parameter cannot be
            query_bias = None if bias is None else bias.detach()[:d]
        self._step_plan = (weight, bias, query_rows[1], query_bias, out_weight, out_bias,
                           self.num_heads, self.head_dim, self.pattern.forward, self.pattern.cache_window,
                           step_linear(weight))
        return self._step_plan

    def _project(self, x: Tensor, memory: Tensor | None, cache, mask: Tensor | None):
        """Queries, keys and values (through the cache), and where they sit."""
        d = self.d_model
        query_offset, key_offset = None, 0
        if memory is None and not isinstance(cache, MemoryKVCache):
            qkv = self._split_heads(self.qkv_proj.forward(x), 3)  # (3, B, H, L, D)
            q = qkv.select(0, 0)
            if cache is None:
                k, v = qkv.select(0, 1), qkv.select(0, 2)
            else:
                k, v, query_offset, key_offset, cache_mask = cache.update(qkv.narrow(0, 1, 2),
                                                                          self.pattern.cache_window)
                if cache_mask is not None:
                    mask = cache_mask if mask is None else mask & cache_mask
            return q, k, v, query_offset, key_offset, mask
        q = self._split_heads(linear_rows(self.qkv_proj, x, 0, d), 1)[0]
        if isinstance(cache, MemoryKVCache) and cache.is_set:
            k, v = cache.k, cache.v
        else:
            k, v = self._split_heads(linear_rows(self.qkv_proj, memory, d, 3 * d), 2).unbind(0)
            if cache is not None:
                cache.set(k, v)
        return q, k, v, query_offset, key_offset, mask

    def _merge_heads(self, out: Tensor) -> Tensor:
        batch, _, length, _ = out.shape
        return self.out_proj.forward(out.transpose(1, 2).reshape(batch, length, self.d_model))  # (B, Lq, d_model)
