"""Transformer layers and stacks ("Attention Is All You Need" §3.1).

One layer class serves all families: self-attention with any pattern, optional
encoder–decoder (cross) attention, and the feed-forward network, each wrapped in
residual + dropout + LayerNorm, either post-LN as in the paper
(x = LN(x + Dropout(sublayer(x)))) or pre-LN (x = x + Dropout(sublayer(LN(x)))).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from typing import Any

from attnlab.attention.cache import LayerCache, StackCache, StaticKVCache
from attnlab.attention.multihead import MultiHeadAttention
from attnlab.attention.patterns import AttentionPattern, FullAttention, build_pattern
from attnlab.layers.feedforward import ACTIVATIONS, FeedForward
from attnlab.linear import DecodeCaches, step_linear, step_weights


@dataclass
class LayerAttention:
    """Per-head attention weights of one layer, ``(B, H, Lq, Lk)`` each."""

    self_attn: Tensor | None
    cross_attn: Tensor | None = None


class TransformerLayer(DecodeCaches, nn.Module):
    """Self-attention (+ cross-attention) + FFN with residuals and LayerNorm.

    Args:
        d_model, num_heads, d_ff: widths.
        dropout: residual dropout (on each sub-layer's output before the residual sum).
        attention_dropout: dropout on attention weights.
        activation_dropout: dropout after the FFN's activation.
        activation: "relu" or "gelu".
        norm_first: pre-LN if True, post-LN (the paper) if False.
        cross_attention: add encoder–decoder attention (a decoder layer).
        self_pattern: pattern of the self-attention, an object or a registry spec
            (``"full"`` for encoders, ``"causal"`` for decoders, ...).
        drop_path: stochastic depth (Huang et al. 2016): in training, each sample skips each
            residual branch with this probability (the kept ones scaled by 1/(1-p)). Off by default.
        layer_scale_init: LayerScale (CaiT, Touvron et al. 2021): each residual branch is
            multiplied by a learned per-channel vector starting at this value. Off (None) by default.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, *, dropout: float = 0.1,
                 attention_dropout: float = 0.0, activation_dropout: float = 0.0, activation: str = "relu",
                 norm_first: bool = False, layer_norm_eps: float = 1e-5, cross_attention: bool = False,
                 self_pattern: AttentionPattern | str | dict[str, Any] | None = None, drop_path: float = 0.0,
                 layer_scale_init: float | None = None):
        super().__init__()
        if not 0.0 <= drop_path < 1.0:
            raise ValueError(f"drop_path must be in [0, 1), got {drop_path!r}")
        self.norm_first = norm_first
        self.drop_path = drop_path
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=attention_dropout,
                                            pattern=build_pattern(self_pattern or "full"))
        self.self_attn_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        if cross_attention:
            self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=attention_dropout, pattern=FullAttention())
            self.cross_attn_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        else:
            self.cross_attn = None
        self.ffn = FeedForward(d_model, d_ff, activation=activation, dropout=activation_dropout)
        self.ffn_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)
        if layer_scale_init is not None:  # one gain vector per residual branch
            def gain():
                return nn.Parameter(torch.full((d_model,), float(layer_scale_init)))
            self.self_attn_scale = gain()
            self.cross_attn_scale = gain() if cross_attention else None
            self.ffn_scale = gain()
        else:
            self.self_attn_scale = self.cross_attn_scale = self.ffn_scale = None

    def _residual(self, x: Tensor, norm: nn.LayerNorm, sublayer, *args, scale: Tensor | None = None,
                  **kwargs) -> tuple[Tensor, Tensor | None]:
        # Called once per sub-layer per decode step too, so it avoids module calls that do
        # nothing (dropout in eval mode) and calls the norm's function directly.
        pre = self.norm_first
        out, weights = sublayer(_layer_norm(x, norm) if pre else x, *args, **kwargs)
        if self.training and self.dropout.p > 0:
            out = self.dropout(out)
        if scale is not None:  # LayerScale
            out = out * scale
        if self.drop_path and self.training:
            out = drop_path(out, self.drop_path)
        return (x + out if pre else _layer_norm(x + out, norm)), weights

    def _ffn(self, h: Tensor) -> tuple[Tensor, None]:
        return self.ffn.forward(h), None

    def forward(self, x: Tensor, *, self_mask: Tensor | None = None, memory: Tensor | None = None,
                memory_mask: Tensor | None = None, cache: LayerCache | None = None,
                need_weights: bool = False, geometry: tuple[int, ...] | None = None) -> tuple[Tensor, LayerAttention | None]:
        """
        Args:
            x: ``(B, L, d_model)``.
            self_mask: boolean, broadcastable to ``(B, H, L, L_past + L)``.
            memory: ``(B, S, d_model)`` encoder output (cross-attention layers; may be None
                once ``cache`` holds its keys/values).
            memory_mask: boolean, broadcastable to ``(B, H, L, S)``, usually ``(B, 1, 1, S)``.
            cache: this layer's cache (a :class:`LayerCache` or a layer of a
                :class:`StaticKVCache`) for incremental decoding.
            geometry: passed to the self-attention pattern.
        """
        x, self_weights = self._residual(x, self.self_attn_norm, self.self_attn, mask=self_mask,
                                         cache=None if cache is None else cache.self_attn,
                                         need_weights=need_weights, geometry=geometry, scale=self.self_attn_scale)
        cross_weights = None
        if self.cross_attn is not None:
            x, cross_weights = self._residual(x, self.cross_attn_norm, self.cross_attn, memory, mask=memory_mask,
                                              cache=None if cache is None else cache.cross_attn,
                                              need_weights=need_weights, scale=self.cross_attn_scale)
        x, _ = self._residual(x, self.ffn_norm, self._ffn, scale=self.ffn_scale)
        return x, (LayerAttention(self_weights, cross_weights) if need_weights else None)

    def step(self, x: Tensor, cache, memory_mask: Tensor | None = None) -> Tensor:
        """:meth:`forward` for a decode step: the same sub-layers (the attention's step path,
        the same pattern and activation) and the same residual + LayerNorm placement, on
        tensors gathered by :meth:`prepare_step`; eval mode, no dropout, no weights."""
        plan = self._step_plan
        if plan is None:
            plan = self.prepare_step()
        pre, shape, eps, norms, self_attn, cross_attn, ffn, scales = plan
        x = _residual_step(x, pre, shape, eps, norms[0], self_attn.step(
            F.layer_norm(x, shape, *norms[0], eps) if pre else x, cache.self_attn)[0], scales[0])
        if cross_attn is not None:
            x = _residual_step(x, pre, shape, eps, norms[1], cross_attn.step(
                F.layer_norm(x, shape, *norms[1], eps) if pre else x, cache.cross_attn, memory_mask)[0], scales[1])
        fc1_weight, fc1_bias, activation, fc2_weight, fc2_bias, linear = ffn
        h = F.layer_norm(x, shape, *norms[2], eps) if pre else x
        return _residual_step(x, pre, shape, eps, norms[2],
                              linear(activation(linear(h, fc1_weight, fc1_bias)), fc2_weight, fc2_bias), scales[2])

    def prepare_step(self):
        """Gather the tensors :meth:`step` reads (see MultiHeadAttention.prepare_step)."""
        norms = [(n.weight, n.bias) for n in (self.self_attn_norm, self.cross_attn_norm if self.cross_attn is not None
                                               else None, self.ffn_norm) if n is not None]
        if self.cross_attn is None:
            norms.insert(1, None)
        self.self_attn.prepare_step()
        if self.cross_attn is not None:
            self.cross_attn.prepare_step()
        ffn = self.ffn
        (fc1_weight, fc1_bias), (fc2_weight, fc2_bias) = step_weights(ffn.linear1), step_weights(ffn.linear2)
        self._step_plan = (self.norm_first, self.ffn_norm.normalized_shape, self.ffn_norm.eps, norms, self.self_attn,
                           self.cross_attn, (fc1_weight, fc1_bias, ACTIVATIONS[ffn.activation],
                                             fc2_weight, fc2_bias, step_linear(fc1_weight)),
                           (self.self_attn_scale, self.cross_attn_scale, self.ffn_scale))
        return self._step_plan


def _layer_norm(x: Tensor, norm: nn.LayerNorm) -> Tensor:
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


def drop_path(x: Tensor, p: float) -> Tensor:
    """Zero whole samples of ``x`` (B, ...) with probability ``p`` and scale the rest by
    1/(1-p), so the expectation is unchanged (stochastic depth on a residual branch)."""
    keep = torch.empty((x.shape[0],) + (1,) * (x.dim() - 1), dtype=x.dtype, device=x.device).bernoulli_(1.0 - p)
    return x * keep / (1.0 - p)


def _residual_step(x: Tensor, pre: bool, shape, eps: float, norm: tuple[Tensor, Tensor], out: Tensor,
                   scale: Tensor | None = None) -> Tensor:
    # TransformerLayer._residual's placement, for the step path (no dropout, no drop-path).
    if scale is not None:  # LayerScale
        out = out * scale
    return x + out if pre else F.layer_norm(x + out, shape, norm[0], norm[1], eps)


class EncoderLayer(TransformerLayer):
    """Full self-attention + FFN."""

    def __init__(self, d_model, num_heads, d_ff, *, self_pattern=None, **kwargs):
        super().__init__(d_model, num_heads, d_ff, cross_attention=False, self_pattern=self_pattern or "full",
                         **kwargs)


class DecoderLayer(TransformerLayer):
    """Masked (causal) self-attention + encoder–decoder attention + FFN."""

    def __init__(self, d_model, num_heads, d_ff, *, self_pattern=None, **kwargs):
        super().__init__(d_model, num_heads, d_ff, cross_attention=True, self_pattern=self_pattern or "causal",
                         **kwargs)


class TransformerStack(DecodeCaches, nn.Module):
    """A stack of layers with an optional final LayerNorm.

    Pre-LN stacks need the final norm; ``torch.nn.Transformer`` also has one after its
    post-LN stacks, which is why the presets keep it (see docs/architecture.md).
    """

    def __init__(self, layers: list[TransformerLayer], *, d_model: int, final_norm: bool, layer_norm_eps: float = 1e-5):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = nn.LayerNorm(d_model, eps=layer_norm_eps) if final_norm else None

    @property
    def has_cross_attention(self) -> bool:
        return bool(self.layers) and self.layers[0].cross_attn is not None

    @property
    def causal(self) -> bool:
        """Every layer's self-attention pattern is causal: the stack can be decoded step by step."""
        return all(layer.self_attn.pattern.causal for layer in self.layers)

    def new_cache(self, capacity: int = 64) -> StackCache:
        """An empty growing cache for incremental decoding with this stack."""
        self._check_causal()
        return StackCache(len(self.layers), self.has_cross_attention, capacity)

    def new_static_cache(self, batch: int, capacity: int, *, fixed_shape: bool = False, dtype=None,
                         device=None) -> StaticKVCache:
        """An empty preallocated cache of ``capacity`` positions for ``batch`` rows."""
        self._check_causal()
        self.prepare_step()
        attention = self.layers[0].self_attn
        return StaticKVCache(len(self.layers), batch, attention.num_heads, capacity, attention.head_dim,
                             cross_attention=self.has_cross_attention, fixed_shape=fixed_shape,
                             dtype=dtype or attention.qkv_proj.weight.dtype,
                             device=device or attention.qkv_proj.weight.device)

    def _check_causal(self) -> None:
        if not self.causal:
            patterns = sorted({str(layer.self_attn.pattern.spec()) for layer in self.layers})
            raise ValueError(f"a stack with self-attention pattern(s) {patterns} is not causal and cannot be "
                             "decoded step by step with a cache; use a causal pattern")

    def forward(self, x: Tensor, *, self_mask: Tensor | None = None, memory: Tensor | None = None,
                memory_mask: Tensor | None = None, cache: StackCache | StaticKVCache | None = None,
                need_weights: bool = False,
                geometry: tuple[int, ...] | None = None) -> tuple[Tensor, list[LayerAttention] | None]:
        """``(B, L, d_model)`` -> ``(B, L, d_model)``, and per-layer weights if asked.

        With a ``cache``, ``x`` are the L positions after those cached; they are added to it."""
        all_weights = [] if need_weights else None
        for i, layer in enumerate(self.layers):
            x, weights = layer(x, self_mask=self_mask, memory=memory, memory_mask=memory_mask,
                               cache=None if cache is None else cache.layers[i], need_weights=need_weights,
                               geometry=geometry)
            if need_weights:
                all_weights.append(weights)
        if cache is not None:
            cache.advance(x.shape[1])
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, all_weights

    def step(self, x: Tensor, cache, memory_mask: Tensor | None = None) -> Tensor:
        """:meth:`forward` for a decode step with a cache (see :meth:`TransformerLayer.step`)."""
        plan = self._step_plan
        if plan is None:
            plan = self.prepare_step()
        steps, final = plan
        for step, layer_cache in zip(steps, cache.layers):
            x = step(x, layer_cache, memory_mask)
        cache.advance(x.shape[1])
        return x if final is None else F.layer_norm(x, final[0], final[1], final[2], final[3])

    def prepare_step(self):
        """Gather what :meth:`step` reads, for every layer (called by :meth:`new_static_cache`)."""
        for layer in self.layers:
            layer.prepare_step()
        norm = self.final_norm
        self._step_plan = ([layer.step for layer in self.layers],
                           None if norm is None else (norm.normalized_shape, norm.weight, norm.bias, norm.eps))
        return self._step_plan
