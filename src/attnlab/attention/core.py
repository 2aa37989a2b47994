"""The attention core: one pure function, softmax(q kᵀ · scale + bias, masked) v.

"Attention Is All You Need", section 3.2.1 (scaled dot-product attention).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.attention.masks import check_mask
from attnlab.linear import thread_setting, thread_setting_on


def _check_values(q: Tensor, k: Tensor, v: Tensor, *, bias: Tensor | None, dropout_p: float,
                  scale: float | None) -> None:
    """The values :func:`attend` accepts: floating-point q, k, v and bias without NaN (and
    without infinity, except -inf in ``bias``, which blocks a key), a finite ``scale``, and
    ``dropout_p`` in [0, 1). Refusing NaN keeps every path's answer the same: the fused
    kernel and the explicit softmax treat a NaN score differently."""
    for name, tensor in (("q", q), ("k", k), ("v", v), ("bias", bias)):
        if tensor is None:
            continue
        if not isinstance(tensor, Tensor) or not tensor.is_floating_point():
            kind = tensor.dtype if isinstance(tensor, Tensor) else type(tensor).__name__
            raise ValueError(f"attend: {name} must be a floating-point tensor, got {kind}")
        allowed = torch.isfinite(tensor) | torch.isneginf(tensor) if name == "bias" else torch.isfinite(tensor)
        if not bool(allowed.all()):
            raise ValueError(f"attend: {name} holds NaN" + (" or +inf" if name == "bias" else " or infinity"))
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"attend: dropout_p={dropout_p!r} must be a number in [0, 1)")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                              or not math.isfinite(scale)):
        raise ValueError(f"attend: scale={scale!r} must be a finite number")


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    scale: float | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Scaled dot-product attention with a boolean mask and an additive bias.

    Args:
        q: ``(B, H, Lq, D)`` queries.
        k: ``(B, H, Lk, D)`` keys.
        v: ``(B, H, Lk, Dv)`` values (Dv may differ from D).
        mask: boolean, broadcastable to ``(B, H, Lq, Lk)``; True = may attend.
        bias: additive, broadcastable to ``(B, H, Lq, Lk)``, added after scaling
            (relative-position logits, ALiBi, ...).
        dropout_p: dropout on the attention weights (pass 0.0 in eval mode).
        need_weights: return the ``(B, H, Lq, Lk)`` softmax weights (before dropout).
        scale: multiplier of ``q kᵀ``; default ``1/sqrt(D)``.

    Returns:
        ``(out, weights)``: out ``(B, H, Lq, Dv)``; weights or None. A query row with no
        allowed key gets zero output (and zero weights), never NaN.

    When weights are not requested this calls the fused
    ``torch.nn.functional.scaled_dot_product_attention``; fused kernels cannot return the
    weights, so ``need_weights=True`` always takes the explicit path.
    """
    _check_values(q, k, v, bias=bias, dropout_p=dropout_p, scale=scale)
    if not q.dim() == k.dim() == v.dim() == 4:
        raise ValueError(f"attend: q, k, v must have 4 dimensions (B, H, L, D), got shapes "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    batch, heads, query_len, _ = q.shape
    if not q.shape[:2] == k.shape[:2] == v.shape[:2]:
        raise ValueError(f"attend: q, k, v must share batch and heads (B, H), got {tuple(q.shape[:2])}, "
                         f"{tuple(k.shape[:2])}, {tuple(v.shape[:2])}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"attend: keys have length {k.shape[-2]} but values have length {v.shape[-2]}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"attend: queries have width {q.shape[-1]} but keys have width {k.shape[-1]}")
    key_len = k.shape[-2]
    if mask is not None:
        check_mask(mask, batch, heads, query_len, key_len)
    if bias is not None:
        try:
            fits = bias.dim() <= 4 and torch.broadcast_shapes(tuple(bias.shape), (batch, heads, query_len, key_len)) == (
                batch, heads, query_len, key_len)
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"bias of shape {tuple(bias.shape)} does not broadcast to (B, H, Lq, Lk) = "
                             f"{(batch, heads, query_len, key_len)}")
    return attend_unchecked(q, k, v, mask=mask, bias=bias, dropout_p=dropout_p, need_weights=need_weights, scale=scale)


def _additive(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """A boolean mask as 0 (allowed) / -inf (blocked) in ``dtype``, to add to scores: the
    same values as ``scores.masked_fill(~mask, -inf)``, with a backward that passes the
    gradient straight through (it is exactly 0 at blocked places, where the weight is 0)
    instead of one more pass over the scores."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


def capturing() -> bool:
    """Under ONNX/JIT tracing, torch.compile or torch.export a branch on a tensor's value would
    be baked into the graph (or break it): keep the data-independent form there."""
    return torch.jit.is_tracing() or torch.compiler.is_compiling() or torch.compiler.is_exporting()


def one_query_sums():
    """Within: a call with one query and no bias is :func:`_one_query`'s sums, not SDPA. Entered
    by ``MultiHeadAttention.step`` for a self-attention step without a cache window while the step
    is exported for a folded package (``linear.folding()``). Not for cross-attention over the
    memory (inductor compiled the sums wrongly there: logits 2.6-3.7 away from the eager step's in
    a greedy search package, torch 2.13, while self-attention's are right), nor for a window's
    gathered keys (slower as sums: an Image Transformer sample 0.143 -> 0.203 s;
    docs/benchmarks.md)."""
    return thread_setting("one_query_sums")


def _one_query(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float | None) -> Tensor:
    """One query per row, as sums over products that inductor fuses into its own loops: a
    decode step being exported for a package with its weights folded in (:func:`one_query_sums`), where
    SDPA would be an external call per layer doing a matrix-vector product per (row, head) (MKL's
    ``sgemv``: ~9 % of a small LM's int8 package step, a tenth of a multi30k beam step at 128
    rows). The same values up to float rounding; a row with no allowed key gives zeros."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = ((q * scale) * k).sum(dim=-1, dtype=torch.promote_types(q.dtype, torch.float32)).unsqueeze(-2)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # (B, H, 1, Lk)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # no allowed key: zeros, not NaN
    return (weights.transpose(-2, -1).to(v.dtype) * v).sum(dim=-2, keepdim=True)


def attend_unchecked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    scale: float | None = None,
    is_causal: bool = False,
    finite_bias: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """:func:`attend` without argument checks, for inner code that built its own inputs.

    ``is_causal=True`` (only with ``mask=None`` and ``Lq == Lk``) lets the fused kernel
    apply the causal mask itself instead of reading a materialised one.

    ``finite_bias=True`` is the caller's promise that ``bias`` holds no -inf (relative
    logits, ``q Eᵀ``): empty rows then come from the mask alone, without a pass of
    ``isneginf``/``all`` over the ``(B, H, Lq, Lk)`` bias (about a tenth of a relative
    training step on a CPU).
    """
    if is_causal:
        if mask is not None or q.shape[-2] != k.shape[-2]:
            raise ValueError("attend: is_causal needs mask=None and equal query and key lengths")
        if need_weights or bias is not None:
            mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
            is_causal = False
    if (q.shape[-2] == 1 and bias is None and not need_weights and dropout_p == 0.0 and not is_causal
            and thread_setting_on("one_query_sums")):
        return _one_query(q, k, v, mask, scale), None
    # A row is "empty" when its mask allows no key, or its bias is -inf at every allowed
    # key; such rows must come out as zeros (on both paths alike).
    empty_rows = None if mask is None else ~mask.any(dim=-1, keepdim=True)
    if bias is not None and bias.is_floating_point() and not finite_bias:
        blocked = torch.isneginf(bias) if mask is None else torch.isneginf(bias) | ~mask
        empty_rows = blocked.all(dim=-1, keepdim=True)

    if (empty_rows is not None and q.device.type == "cpu" and not capturing()
            and not bool(empty_rows.any())):
        empty_rows = None  # the usual case (a causal mask): two fewer passes over (B, H, Lq, Lk); no sync on CPU

    # A bias that needs a gradient (relative logits in training) leaves SDPA's fused CPU
    # kernel for its decomposed math path (a "safe" softmax with isneginf/all/where and a
    # masked_fill backward): the explicit path below is the same arithmetic with fewer
    # passes (a relative training step at L = 256: 0.98 -> 0.88 s on one core, bf16).
    explicit = need_weights or (bias is not None and bias.requires_grad and torch.is_grad_enabled()
                                and q.device.type == "cpu")
    if not explicit:
        attn_mask = mask
        if bias is not None:
            attn_mask = bias.to(q.dtype)
            if mask is not None:
                # bias + (0 | -inf) rather than masked_fill: the same values, and the gradient
                # passes straight through (SDPA's gradient is exactly 0 where the weight is
                # 0), where masked_fill's backward is one more pass over (B, H, Lq, Lk).
                attn_mask = attn_mask + _additive(mask, attn_mask.dtype)
        if attn_mask is not None and attn_mask.dim() < 2:
            attn_mask = attn_mask.reshape(1, -1)  # the fused kernel needs (..., Lq, Lk); (Lk,) broadcasts as (1, Lk)
        elif attn_mask is not None and attn_mask.dim() == 3 and q.dim() == 4:
            # The same broadcast as four dimensions: with a 3-D mask SDPA leaves its fused CPU
            # kernel for the explicit math path (a local_2d 8x8/4x8 block call at L=4,096,
            # forward + backward, 1 thread: 130 ms with the mask as 3-D, 84 ms as 4-D).
            attn_mask = attn_mask[None]
        # scale=None is the kernel's own 1/sqrt(D); passing it explicitly measured slower per call.
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p,
                                             is_causal=is_causal, scale=scale)
        if empty_rows is not None:
            out = out.masked_fill(empty_rows, 0.0)
        return out, None

    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    # The scale on q (Lq x D numbers) rather than on the (Lq x Lk) scores: one pass less over
    # the largest tensor (a tenth of a BERT forward with weights at 512 tokens).
    scores = torch.matmul(q * scale, k.transpose(-2, -1))  # (B, H, Lq, Lk)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores + _additive(mask, scores.dtype)
    if empty_rows is not None:
        # Softmax of an all -inf row is NaN, and so is its gradient: give it finite scores,
        # then zero its weights.
        scores = scores.masked_fill(empty_rows, 0.0)
    # Softmax in at least float32: half-precision softmax loses the small weights.
    weights = torch.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(q.dtype)
    if empty_rows is not None:
        weights = weights.masked_fill(empty_rows, 0.0)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return torch.matmul(dropped, v), (weights if need_weights else None)
