"""Weights of ``torch.nn.Transformer`` in attnlab's layers."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.layers.blocks import DecoderLayer, EncoderLayer, TransformerStack


class TransformerStacks(nn.Module):
    """An attnlab encoder stack and decoder stack, without embeddings: the same thing
    ``torch.nn.Transformer`` is. Inputs are embedded sequences."""

    def __init__(self, encoder: TransformerStack, decoder: TransformerStack):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def forward(self, src: Tensor, tgt: Tensor, *, src_mask: Tensor | None = None) -> Tensor:
        """src ``(B, S, d)``, tgt ``(B, T, d)`` embedded; ``src_mask`` boolean ``(B, 1, 1, S)``
        (True = real token). The decoder is causal; target padding must be on the right."""
        memory, _ = self.encoder(src, self_mask=src_mask)
        out, _ = self.decoder(tgt, memory=memory, memory_mask=src_mask)
        return out


def _copy_attention(target, source: nn.MultiheadAttention) -> None:
    if not source._qkv_same_embed_dim:
        raise ValueError("from_torch_transformer: attention with kdim/vdim different from embed_dim is not supported")
    target.qkv_proj.weight.copy_(source.in_proj_weight)
    target.qkv_proj.bias.copy_(source.in_proj_bias)
    target.out_proj.weight.copy_(source.out_proj.weight)
    target.out_proj.bias.copy_(source.out_proj.bias)


def _copy_linear_or_norm(target: nn.Module, source: nn.Module) -> None:
    target.weight.copy_(source.weight)
    target.bias.copy_(source.bias)


def _layer_settings(layer) -> dict:
    activation = layer.activation
    if activation is F.relu or isinstance(activation, nn.ReLU):
        name = "relu"
    elif activation is F.gelu or isinstance(activation, nn.GELU):
        # nn.GELU(approximate="tanh") is GPT-2's approximation, not the exact GELU.
        name = "gelu_tanh" if getattr(activation, "approximate", "none") == "tanh" else "gelu"
    else:
        raise ValueError(f"from_torch_transformer: unsupported activation {activation!r} (relu and gelu are)")
    if layer.linear1.bias is None or layer.norm1.bias is None:
        raise ValueError("from_torch_transformer: layers without biases (bias=False) are not supported")
    return dict(activation=name, norm_first=layer.norm_first, layer_norm_eps=layer.norm1.eps,
                dropout=layer.dropout.p, attention_dropout=layer.self_attn.dropout,
                activation_dropout=layer.dropout.p)


@torch.no_grad()
def from_torch_transformer(transformer: nn.Transformer) -> TransformerStacks:
    """Copy the weights of a ``torch.nn.Transformer`` into attnlab layers.

    Returns a :class:`TransformerStacks` whose outputs equal ``transformer``'s (in eval mode)
    for the same embedded inputs, a causal target mask and source key padding.
    """
    enc_layers, dec_layers = transformer.encoder.layers, transformer.decoder.layers
    d_model = enc_layers[0].self_attn.embed_dim

    def shape(layer) -> tuple[int, int, int]:
        return layer.self_attn.embed_dim, layer.self_attn.num_heads, layer.linear1.out_features

    def final_norm_eps(stack) -> float:
        return stack.norm.eps if stack.norm is not None else 1e-5

    # Settings are read per layer, not copied from the first encoder layer: the layers can
    # differ. In particular nn.TransformerDecoderLayer's __setstate__ turns an activation
    # *module* (nn.GELU()) into F.relu when nn.Transformer deep-copies the layer, so torch's
    # decoder then runs ReLU while its encoder runs GELU; we copy what torch computes.
    encoder = TransformerStack([EncoderLayer(*shape(layer), **_layer_settings(layer)) for layer in enc_layers],
                               d_model=d_model, final_norm=transformer.encoder.norm is not None,
                               layer_norm_eps=final_norm_eps(transformer.encoder))
    decoder = TransformerStack([DecoderLayer(*shape(layer), **_layer_settings(layer)) for layer in dec_layers],
                               d_model=d_model, final_norm=transformer.decoder.norm is not None,
                               layer_norm_eps=final_norm_eps(transformer.decoder))
    for ours, theirs in zip(encoder.layers, enc_layers):
        _copy_attention(ours.self_attn, theirs.self_attn)
        _copy_linear_or_norm(ours.ffn.linear1, theirs.linear1)
        _copy_linear_or_norm(ours.ffn.linear2, theirs.linear2)
        _copy_linear_or_norm(ours.self_attn_norm, theirs.norm1)
        _copy_linear_or_norm(ours.ffn_norm, theirs.norm2)
    for ours, theirs in zip(decoder.layers, dec_layers):
        _copy_attention(ours.self_attn, theirs.self_attn)
        _copy_attention(ours.cross_attn, theirs.multihead_attn)
        _copy_linear_or_norm(ours.ffn.linear1, theirs.linear1)
        _copy_linear_or_norm(ours.ffn.linear2, theirs.linear2)
        _copy_linear_or_norm(ours.self_attn_norm, theirs.norm1)
        _copy_linear_or_norm(ours.cross_attn_norm, theirs.norm2)
        _copy_linear_or_norm(ours.ffn_norm, theirs.norm3)
    for ours, theirs in ((encoder, transformer.encoder), (decoder, transformer.decoder)):
        if theirs.norm is not None:
            _copy_linear_or_norm(ours.final_norm, theirs.norm)
    stacks = TransformerStacks(encoder, decoder)
    return stacks.train(transformer.training)
