"""Reference attention: explicit Python loops over every (b, h, i, j), in float64.

Deliberately naive: plain Python floats and ``math.exp``, no batched tensor algebra, so
there is nothing clever to get wrong. Sizes in tests are small enough for this to be fast.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def naive_attention(q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None = None, bias: Tensor | None = None,
                    scale: float | None = None) -> tuple[Tensor, Tensor]:
    """softmax(q·kᵀ·scale + bias, over allowed keys) · v, one element at a time.

    q ``(B, H, Lq, D)``, k ``(B, H, Lk, D)``, v ``(B, H, Lk, Dv)``; mask (True = may attend)
    and bias broadcastable to ``(B, H, Lq, Lk)``. Returns float64 ``(out (B, H, Lq, Dv),
    weights (B, H, Lq, Lk))``; a query with no allowed key gets zero output and zero weights.
    """
    batch, heads, query_len, width = q.shape
    key_len, value_width = k.shape[2], v.shape[3]
    scale = 1.0 / math.sqrt(width) if scale is None else scale
    full = (batch, heads, query_len, key_len)
    qs, ks, vs = q.double().tolist(), k.double().tolist(), v.double().tolist()
    allowed = torch.broadcast_to(mask, full).tolist() if mask is not None else None
    added = torch.broadcast_to(bias.double(), full).tolist() if bias is not None else None

    out = [[[[0.0] * value_width for _ in range(query_len)] for _ in range(heads)] for _ in range(batch)]
    weights = [[[[0.0] * key_len for _ in range(query_len)] for _ in range(heads)] for _ in range(batch)]
    for b in range(batch):
        for h in range(heads):
            for i in range(query_len):
                logits = {}
                for j in range(key_len):
                    if allowed is not None and not allowed[b][h][i][j]:
                        continue
                    score = sum(qs[b][h][i][c] * ks[b][h][j][c] for c in range(width)) * scale
                    if added is not None:
                        score += added[b][h][i][j]
                    if score != -math.inf:  # a bias of -inf forbids the key as a mask would
                        logits[j] = score
                if not logits:
                    continue  # no allowed key: the row stays zero
                top = max(logits.values())
                exps = {j: math.exp(s - top) for j, s in logits.items()}
                total = sum(exps.values())
                for j, e in exps.items():
                    w = e / total
                    weights[b][h][i][j] = w
                    for c in range(value_width):
                        out[b][h][i][c] += w * vs[b][h][j][c]
    return torch.tensor(out, dtype=torch.float64), torch.tensor(weights, dtype=torch.float64)


def reference_causal_mask(query_len: int, key_len: int) -> Tensor:
    """Query i (the (Lk - Lq + i)-th position) may attend key j iff j is not in its future."""
    offset = key_len - query_len
    return torch.tensor([[j <= i + offset for j in range(key_len)] for i in range(query_len)])


def reference_band_mask(query_len: int, key_len: int, before: int, after: int) -> Tensor:
    """Query i (at position Lk - Lq + i) may attend keys within [pos - before, pos + after]."""
    offset = key_len - query_len
    return torch.tensor([[i + offset - before <= j <= i + offset + after for j in range(key_len)]
                         for i in range(query_len)])


def reference_key_padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """``(B, L)`` ids -> ``(B, 1, 1, L)``, True where the token is not padding."""
    return torch.tensor([[[[token != pad_id for token in row]]] for row in ids.tolist()])


def reference_multihead(x: Tensor, memory: Tensor | None, qkv_weight: Tensor, qkv_bias: Tensor | None,
                        out_weight: Tensor, out_bias: Tensor | None, num_heads: int, *,
                        mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Multi-head attention from plain matrices, "Attention Is All You Need" §3.2.2.

    ``qkv_weight`` rows ``[0:d]`` are W_Q, ``[d:2d]`` W_K, ``[2d:3d]`` W_V (nn.Linear layout,
    y = x Wᵀ + b). Keys and values come from ``memory`` (cross-attention) or ``x`` (self).
    Head h uses columns ``[h·d/H, (h+1)·d/H)`` of the projected queries, keys and values.
    Returns float64 ``(out (B, Lq, d), weights (B, H, Lq, Lk))``.
    """
    x = x.double()
    source = x if memory is None else memory.double()
    d = x.shape[-1]
    head_dim = d // num_heads
    w = qkv_weight.double()
    b = torch.zeros(3 * d, dtype=torch.float64) if qkv_bias is None else qkv_bias.double()
    queries = x @ w[0:d].T + b[0:d]
    keys = source @ w[d:2 * d].T + b[d:2 * d]
    values = source @ w[2 * d:3 * d].T + b[2 * d:3 * d]
    full_mask = None
    if mask is not None:
        full_mask = torch.broadcast_to(mask, (x.shape[0], num_heads, x.shape[1], source.shape[1]))
    head_outputs, head_weights = [], []
    for h in range(num_heads):
        cols = slice(h * head_dim, (h + 1) * head_dim)
        out, weights = naive_attention(queries[:, None, :, cols], keys[:, None, :, cols], values[:, None, :, cols],
                                       mask=None if full_mask is None else full_mask[:, h:h + 1])
        head_outputs.append(out[:, 0])
        head_weights.append(weights[:, 0])
    concat = torch.cat(head_outputs, dim=-1)  # (B, Lq, d)
    out = concat @ out_weight.double().T
    if out_bias is not None:
        out = out + out_bias.double()
    return out, torch.stack(head_weights, dim=1)


def reference_multihead_of(module, x: Tensor, memory: Tensor | None = None, *,
                           mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """:func:`reference_multihead` with the weights of an attnlab ``MultiHeadAttention``."""
    return reference_multihead(x, memory, module.qkv_proj.weight.detach(), _detached(module.qkv_proj.bias),
                               module.out_proj.weight.detach(), _detached(module.out_proj.bias), module.num_heads,
                               mask=mask)


def _detached(tensor: Tensor | None) -> Tensor | None:
    return None if tensor is None else tensor.detach()
