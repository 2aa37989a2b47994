"""Reference relative attention: gather E[clip(i - j)] for every (query, key) pair by a loop.

No skewing, no batched algebra: the bias of every pair is the dot product of the query with
the embedding row of its clipped distance, summed in Python floats (float64), then
:func:`reference.attention.naive_attention` does the rest.
"""

from __future__ import annotations

import math

import torch
from reference.attention import naive_attention


def relative_bias(q, embeddings, query_positions, key_positions, *, max_relative_position: int, causal: bool):
    """``(B, H, Lq, Lk)`` float64 bias ``q_i · E[row(pos_i - pos_j)] / sqrt(D)``.

    ``embeddings``: ``(H, R, D)`` per head or ``(R, D)`` shared; rows are distances
    0..max (causal) or -max..max (row = d + max); distances beyond the span use the last row.
    """
    batch, heads, query_len, width = q.shape
    table = embeddings.double().tolist()
    shared = embeddings.dim() == 2
    qs = q.double().tolist()
    m = max_relative_position
    bias = []
    for b in range(batch):
        per_head = []
        for h in range(heads):
            rows = []
            for i, pi in enumerate(query_positions):
                row = []
                for pj in key_positions:
                    d = pi - pj
                    index = min(max(d, 0), m) if causal else min(max(d, -m), m) + m
                    e = table[index] if shared else table[h][index]
                    row.append(sum(qs[b][h][i][c] * e[c] for c in range(width)) / math.sqrt(width))
                rows.append(row)
            per_head.append(rows)
        bias.append(per_head)
    return torch.tensor(bias, dtype=torch.float64)


def naive_relative_attention(q, k, v, embeddings, *, max_relative_position: int, causal: bool,
                             query_positions=None, key_positions=None, mask=None):
    """softmax(q kᵀ/sqrt(D) + bias) v with the causal restriction by positions; float64."""
    query_len, key_len = q.shape[-2], k.shape[-2]
    key_positions = list(range(key_len)) if key_positions is None else list(key_positions)
    if query_positions is None:
        query_positions = key_positions[key_len - query_len:]
    query_positions = list(query_positions)
    bias = relative_bias(q, embeddings, query_positions, key_positions, max_relative_position=max_relative_position,
                         causal=causal)
    allowed = mask
    if causal:
        future = torch.tensor([[pj <= pi for pj in key_positions] for pi in query_positions])
        allowed = future if allowed is None else allowed & future
    return naive_attention(q, k, v, mask=allowed, bias=bias)
