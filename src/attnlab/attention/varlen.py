"""Attention over variable-length sequences packed end to end, without padding.

A right-padded batch ``(B, L)`` becomes one packed run of its ``T`` real tokens (row after
row) and the cumulative lengths ``cu`` ``(B + 1,)``: sequence b is tokens ``cu[b]:cu[b+1]``.
Everything in a Transformer except attention acts on each token alone (embeddings,
projections, the FFN, norms, the head), so on packed tokens it skips the padding's work;
attention needs the segments, which a :class:`Segments` carries in place of a boolean
mask through the stack (``self_mask=`` / ``memory_mask=``) down to the pattern.

:func:`attend_varlen` computes one attention call on packed ``(1, H, T, D)`` tensors: on a
CUDA device in float16/bfloat16 without attention dropout through PyTorch's pad-free flash
kernel (``torch.nn.attention.varlen.varlen_attn``, cumulative lengths); otherwise — the
CPU, float32/float64, dropout — by scattering the tokens back into a padded batch and
calling the ordinary masked :func:`~attnlab.attention.core.attend_unchecked`, the
reference the tests compare the model's packed forward with. Only patterns that declare
``varlen = True`` (full and causal) accept segments; the others refuse them.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.attention.core import attend_unchecked
from attnlab.attention.masks import combine_masks

__all__ = ["Packing", "Segments", "attend_varlen", "pack_right_padded"]


@dataclass(frozen=True)
class Packing:
    """Where the real tokens of a right-padded ``(batch, length)`` batch sit once packed.

    ``index`` ``(T,)``: each packed token's place in the flattened batch (row-major);
    ``cu`` ``(batch + 1,)`` int32: cumulative lengths; ``lengths`` ``(batch,)``.
    """

    index: Tensor
    cu: Tensor
    lengths: Tensor
    batch: int
    length: int

    @property
    def tokens(self) -> int:
        return self.index.shape[0]

    def pack(self, x: Tensor) -> Tensor:
        """``(B, L, ...)`` -> ``(T, ...)``: the real tokens, row after row."""
        return x.reshape(self.batch * self.length, *x.shape[2:]).index_select(0, self.index)

    def unpack(self, x: Tensor, fill: float = 0.0) -> Tensor:
        """``(T, ...)`` -> ``(B, L, ...)`` with ``fill`` at the padding."""
        out = x.new_full((self.batch * self.length, *x.shape[1:]), fill)
        return out.index_copy(0, self.index, x).view(self.batch, self.length, *x.shape[1:])

    def real(self) -> Tensor:
        """``(B, L)`` boolean: True at real tokens."""
        return torch.arange(self.length, device=self.lengths.device) < self.lengths[:, None]


def pack_right_padded(real: Tensor, what: str = "batch") -> Packing:
    """The :class:`Packing` of a ``(B, L)`` boolean mask of real tokens, which must be
    right-padded (each row's real tokens first): ValueError naming ``what`` otherwise.
    Reads the check and the token count on the host (on an accelerator, two
    synchronisations per call: a forward packs each side once)."""
    if real.dim() != 2 or real.dtype != torch.bool:
        raise ValueError(f"{what}: expected a (batch, length) boolean mask, got {tuple(real.shape)} {real.dtype}")
    batch, length = real.shape
    lengths = real.sum(1)
    right_padded = real == (torch.arange(length, device=real.device) < lengths[:, None])
    if not bool(right_padded.all()):
        raise ValueError(f"{what}: variable-length attention needs right padding (each row's real tokens first)")
    cu = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
    index = real.reshape(-1).nonzero().squeeze(1)
    return Packing(index=index, cu=cu, lengths=lengths, batch=batch, length=length)


@dataclass(frozen=True)
class Segments:
    """Given as the mask of an attention call on packed tokens: the queries' packing and
    the keys' (the same one for self-attention)."""

    queries: Packing
    keys: Packing


@functools.lru_cache(maxsize=1)
def _flash_varlen():
    """torch's ``varlen_attn`` and how it takes causality (``window_size`` in newer
    releases, ``is_causal`` in the first), or None where this torch has none."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    parameters = inspect.signature(varlen_attn).parameters
    if "window_size" in parameters:
        return varlen_attn, lambda causal: {"window_size": (-1, 0) if causal else (-1, -1)}
    if "is_causal" in parameters:
        return varlen_attn, lambda causal: {"is_causal": causal}
    return None


def _flash_varlen_ok(q: Tensor, dropout_p: float, need_weights: bool) -> bool:
    return (q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and dropout_p == 0.0 and not need_weights
            and q.shape[-1] % 8 == 0 and q.shape[-1] <= 256 and _flash_varlen() is not None)


def attend_varlen(q: Tensor, k: Tensor, v: Tensor, segments: Segments, *, causal: bool = False,
                  dropout_p: float = 0.0, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
    """Attention of packed queries ``(1, H, Tq, D)`` over packed keys and values
    ``(1, H, Tk, D)``, each query seeing only its own sequence's keys (``causal``: only
    those up to its own position: self-attention, ``segments.queries is segments.keys``).
    Returns ``(out (1, H, Tq, D), weights)``;
    weights, when asked, are per padded batch ``(B, H, Lq, Lk)``."""
    queries, keys = segments.queries, segments.keys
    if causal and queries is not keys:
        raise ValueError("causal variable-length attention is self-attention: the queries' and the keys' packing "
                         "must be the same")
    if _flash_varlen_ok(q, dropout_p, need_weights):
        varlen_attn, causality = _flash_varlen()
        out = varlen_attn(q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1), queries.cu, keys.cu,
                          queries.length, keys.length, **causality(causal))
        return out.transpose(0, 1)[None], None
    # The reference: back into a padded batch, the ordinary masked call, packed again.
    heads = q.shape[1]
    padded_q, padded_k, padded_v = (
        packing.unpack(x[0].transpose(0, 1)).transpose(1, 2)  # (B, H, L, D)
        for packing, x in ((queries, q), (keys, k), (keys, v)))
    mask = keys.real()[:, None, None, :]
    if causal:  # positions count from each sequence's start, for queries and keys alike
        mask = combine_masks(mask, torch.ones(queries.length, keys.length, dtype=torch.bool, device=q.device).tril())
    out, weights = attend_unchecked(padded_q, padded_k, padded_v, mask=mask, dropout_p=dropout_p,
                                    need_weights=need_weights)
    out = queries.pack(out.transpose(1, 2))  # (Tq, H, D)
    return out.transpose(0, 1).reshape(1, heads, queries.tokens, -1), weights
