"""Weights of a HuggingFace GPT-2 (``GPT2LMHeadModel``) in attnlab's :class:`DecoderLM`.

GPT-2 stores its projections as ``Conv1D`` modules whose weight is ``(in, out)``, the
transpose of ``nn.Linear``'s ``(out, in)``; ``c_attn`` is the fused query/key/value
projection in the same q|k|v order as attnlab's ``qkv_proj``. Key map (per layer i):

=============================================  ==================================================
HuggingFace (``transformer.`` prefix)          attnlab
=============================================  ==================================================
wte.weight                                     decoder.embed.weight (= decoder.head.weight, tied)
wpe.weight                                     decoder.positions.weight
h.i.ln_1                                       decoder.stack.layers.i.self_attn_norm
h.i.attn.c_attn (transposed)                   decoder.stack.layers.i.self_attn.qkv_proj
h.i.attn.c_proj (transposed)                   decoder.stack.layers.i.self_attn.out_proj
h.i.ln_2                                       decoder.stack.layers.i.ffn_norm
h.i.mlp.c_fc (transposed)                      decoder.stack.layers.i.ffn.linear1
h.i.mlp.c_proj (transposed)                    decoder.stack.layers.i.ffn.linear2
ln_f                                           decoder.stack.final_norm
=============================================  ==================================================
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from attnlab.interop.weights import copy_converted_weights
from attnlab.models.lm import DecoderLM, DecoderLMConfig

_TRANSPOSED = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
_LAYER_KEYS = {
    "ln_1.weight": "self_attn_norm.weight", "ln_1.bias": "self_attn_norm.bias",
    "attn.c_attn.weight": "self_attn.qkv_proj.weight", "attn.c_attn.bias": "self_attn.qkv_proj.bias",
    "attn.c_proj.weight": "self_attn.out_proj.weight", "attn.c_proj.bias": "self_attn.out_proj.bias",
    "ln_2.weight": "ffn_norm.weight", "ln_2.bias": "ffn_norm.bias",
    "mlp.c_fc.weight": "ffn.linear1.weight", "mlp.c_fc.bias": "ffn.linear1.bias",
    "mlp.c_proj.weight": "ffn.linear2.weight", "mlp.c_proj.bias": "ffn.linear2.bias",
}


def config_from_hf_gpt2(hf_config) -> DecoderLMConfig:
    """The :class:`DecoderLMConfig` of a ``transformers.GPT2Config``."""
    activation = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu",
                  "relu": "relu"}.get(hf_config.activation_function)
    if activation is None:
        raise ValueError(f"from_hf_gpt2: unsupported activation_function={hf_config.activation_function!r}")
    if not getattr(hf_config, "scale_attn_weights", True) or getattr(hf_config, "scale_attn_by_inverse_layer_idx",
                                                                     False):
        raise ValueError("from_hf_gpt2: only the standard 1/sqrt(head_dim) attention scaling is supported")
    return DecoderLMConfig(
        vocab_size=hf_config.vocab_size, d_model=hf_config.n_embd, num_heads=hf_config.n_head,
        d_ff=hf_config.n_inner or 4 * hf_config.n_embd, num_layers=hf_config.n_layer,
        max_positions=hf_config.n_positions, positional="learned", norm_first=True, activation=activation,
        dropout=hf_config.resid_pdrop, attention_dropout=hf_config.attn_pdrop,
        layer_norm_eps=hf_config.layer_norm_epsilon, scale_embeddings=False,
        bos_id=hf_config.bos_token_id if hf_config.bos_token_id is not None and hf_config.bos_token_id < hf_config.vocab_size else None,
        eos_id=hf_config.eos_token_id if hf_config.eos_token_id is not None and hf_config.eos_token_id < hf_config.vocab_size else None,
    )


def gpt2_state_dict_to_attnlab(state_dict: Mapping[str, Tensor], num_layers: int) -> dict[str, Tensor]:
    """Rename and transpose a GPT-2 state dict (with or without the ``transformer.`` prefix)."""
    source = {key.removeprefix("transformer."): value for key, value in state_dict.items()}
    out = {"decoder.embed.weight": source["wte.weight"], "decoder.positions.weight": source["wpe.weight"],
           "decoder.stack.final_norm.weight": source["ln_f.weight"],
           "decoder.stack.final_norm.bias": source["ln_f.bias"]}
    for i in range(num_layers):
        for theirs, ours in _LAYER_KEYS.items():
            key = f"h.{i}.{theirs}"
            if key not in source:
                raise ValueError(f"from_hf_gpt2: the GPT-2 state dict has no {key!r}")
            value = source[key]
            out[f"decoder.stack.layers.{i}.{ours}"] = value.t() if theirs in _TRANSPOSED else value
    return out


@torch.no_grad()
def from_hf_gpt2(hf_model_or_state_dict, config: DecoderLMConfig | None = None) -> DecoderLM:
    """Build a :class:`DecoderLM` with the weights of a HuggingFace GPT-2.

    Args:
        hf_model_or_state_dict: a ``GPT2LMHeadModel`` / ``GPT2Model``, or its state dict.
        config: the matching :class:`DecoderLMConfig`; default: derived from the model's
            ``config`` (required when passing a bare state dict).
    Returns:
        A DecoderLM in eval mode whose logits equal the HuggingFace model's.
    """
    if isinstance(hf_model_or_state_dict, Mapping):
        state_dict = hf_model_or_state_dict
        if config is None:
            raise ValueError("from_hf_gpt2: pass config= when converting a bare state dict")
    else:
        state_dict = hf_model_or_state_dict.state_dict()
        if config is None:
            config = config_from_hf_gpt2(hf_model_or_state_dict.config)
    weights = gpt2_state_dict_to_attnlab(state_dict, config.num_layers)
    # the tied lm_head appears once, as decoder.embed.weight
    return copy_converted_weights(DecoderLM(config), weights, "from_hf_gpt2", "the GPT-2 weights")

__all__ = ["config_from_hf_gpt2", "from_hf_gpt2", "gpt2_state_dict_to_attnlab"]
