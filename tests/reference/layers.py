"""Reference layers in float64: the paper's formulas written out by hand."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from reference.attention import reference_causal_mask, reference_multihead_of


def reference_sinusoidal_table(length: int, d_model: int, base: float = 10000.0) -> Tensor:
    """"Attention Is All You Need" §3.5, one element at a time with Python's math:
    PE(pos, 2i) = sin(pos / base^(2i/d_model)), PE(pos, 2i+1) = cos(pos / base^(2i/d_model))."""
    rows = []
    for pos in range(length):
        row = []
        for dim in range(d_model):
            i = dim // 2
            angle = pos / base ** (2 * i / d_model)
            row.append(math.sin(angle) if dim % 2 == 0 else math.cos(angle))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64).reshape(length, d_model)


def reference_layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """(x - mean) / sqrt(biased variance + eps) · weight + bias over the last dimension."""
    x = x.double()
    mean = x.mean(dim=-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(variance + eps) * weight.double() + bias.double()


def reference_activation(x: Tensor, name: str) -> Tensor:
    if name == "relu":
        return torch.where(x > 0, x, torch.zeros_like(x))
    if name == "gelu":  # x·Φ(x), Φ the standard normal CDF
        return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if name == "gelu_tanh":
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    raise ValueError(name)


def reference_feedforward(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor, activation: str) -> Tensor:
    """FFN(x) = act(x W1ᵀ + b1) W2ᵀ + b2 ("Attention Is All You Need" §3.3)."""
    hidden = reference_activation(x.double() @ w1.double().T + b1.double(), activation)
    return hidden @ w2.double().T + b2.double()


def reference_transformer_layer(layer, x: Tensor, *, causal: bool, self_mask: Tensor | None = None,
                                memory: Tensor | None = None, memory_mask: Tensor | None = None) -> Tensor:
    """One attnlab ``TransformerLayer`` (eval mode) written as the formula, with its weights.

    Post-LN (the paper): h = LN(x + Sublayer(x)) per sub-layer.
    Pre-LN:              h = x + Sublayer(LN(x)) per sub-layer.
    Sub-layers in order: self-attention (causal if ``causal``), cross-attention on
    ``memory`` (if the layer has it), feed-forward.
    """
    x = x.double()
    if causal:
        causal_part = reference_causal_mask(x.shape[1], x.shape[1])
        self_mask = causal_part if self_mask is None else self_mask & causal_part

    def norm(module, h):
        return reference_layer_norm(h, module.weight.detach(), module.bias.detach(), module.eps)

    def residual(h, norm_module, sublayer):
        if layer.norm_first:
            return h + sublayer(norm(norm_module, h))
        return norm(norm_module, h + sublayer(h))

    h = residual(x, layer.self_attn_norm, lambda y: reference_multihead_of(layer.self_attn, y, mask=self_mask)[0])
    if layer.cross_attn is not None:
        h = residual(h, layer.cross_attn_norm,
                     lambda y: reference_multihead_of(layer.cross_attn, y, memory, mask=memory_mask)[0])
    ffn = layer.ffn
    return residual(h, layer.ffn_norm, lambda y: reference_feedforward(
        y, ffn.linear1.weight.detach(), ffn.linear1.bias.detach(), ffn.linear2.weight.detach(),
        ffn.linear2.bias.detach(), ffn.activation))
