"""Multi-head attention: projections, head split/merge and caches around a pattern.

"Attention Is All You Need" §3.2.2: MultiHead(Q, K, V) = Concat(head_1..head_h) W^O,
head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V), each head d_model/h wide.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.attention.cache import KVCache, MemoryKVCache
from attnlab.attention.patterns import AttentionPattern, FullAttention
from attnlab.linear import Linear


class MultiHeadAttention(nn.Module):
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

    def _split_heads(self, x: Tensor, parts: int) -> tuple[Tensor, ...]:
        # (B, L, parts·d_model) -> parts × (B, H, L, head_dim)
        batch, length, _ = x.shape
        x = x.view(batch, length, parts, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return x.unbind(0)

    def forward(self, x: Tensor, memory: Tensor | None = None, *, mask: Tensor | None = None,
                cache: KVCache | MemoryKVCache | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """
        Args:
            x: ``(B, Lq, d_model)`` queries (and keys/values in self-attention).
            memory: ``(B, Lk, d_model)`` for cross-attention, None for self-attention.
            mask: boolean, broadcastable to ``(B, H, Lq, Lk)``; True = may attend.
            cache: a :class:`KVCache` (self-attention: new keys/values are appended) or a
                :class:`MemoryKVCache` (cross-attention: filled on first use, reused after;
                ``memory`` may then be None).
            need_weights: also return per-head weights ``(B, H, Lq, Lk)``.
        Returns:
            ``(out (B, Lq, d_model), weights or None)``.
        """
        d = self.d_model
        weight, bias = self.qkv_proj.weight, self.qkv_proj.bias
        if memory is None and not isinstance(cache, MemoryKVCache):
            q, k, v = self._split_heads(self.qkv_proj(x), 3)
            if cache is not None:
                k, v = cache.append(k, v)
        else:
            (q,) = self._split_heads(F.linear(x, weight[:d], None if bias is None else bias[:d]), 1)
            if isinstance(cache, MemoryKVCache) and cache.is_set:
                k, v = cache.k, cache.v
            else:
                k, v = self._split_heads(F.linear(memory, weight[d:], None if bias is None else bias[d:]), 2)
                if cache is not None:
                    cache.set(k, v)
        dropout_p = self.dropout if self.training else 0.0
        out, weights = self.pattern(q, k, v, mask=mask, dropout_p=dropout_p, need_weights=need_weights)
        batch, _, length, _ = out.shape
        out = out.transpose(1, 2).reshape(batch, length, d)  # (B, Lq, d_model)
        return self.out_proj(out), weights
