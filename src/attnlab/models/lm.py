"""Decoder-only language models (GPT): next-token prediction with masked self-attention.

Radford et al. 2018 ("Improving Language Understanding by Generative Pre-Training", §3.1)
and 2019 (GPT-2, §2.3): token + learned position embeddings, a stack of causal
self-attention blocks (GPT-2: pre-LN with a final LayerNorm), and an output projection
tied to the token embeddings. The blocks are attnlab's shared
:class:`~attnlab.layers.blocks.TransformerLayer` with :class:`CausalAttention`.

Two ways to run the model:

* ``model(ids, attention_mask=..., positions=...)`` — full forward pass over ``(B, L)``
  ids, for training and for checking. Left-padded batches work: positions are counted per
  row from the first real token, and padding keys are masked.
* ``model.prefill(...)`` then ``model.decode_step(...)`` with a :class:`StaticKVCache` —
  the generation fast path: one preallocated key/value buffer per layer and a hand-written
  single-token step with no input validation, mask building or host syncs (see
  docs/benchmarks.md for what that buys). Tests check that it equals the full forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.attention.patterns import CausalAttention
from attnlab.layers.blocks import TransformerLayer, TransformerStack
from attnlab.layers.embedding import TokenEmbedding
from attnlab.layers.feedforward import ACTIVATIONS
from attnlab.layers.positional import build_positional, sinusoidal_table
from attnlab.models.base import AttnlabModel, ModelConfig, check_token_ids
from attnlab.models.registry import register_family, register_preset


@dataclass(frozen=True)
class DecoderLMConfig(ModelConfig):
    """Configuration of a :class:`DecoderLM` (defaults: GPT-2 small).

    ``positional`` is "learned" (GPT) or "sinusoidal"; either way ``max_positions`` is
    the context length. ``scale_embeddings`` multiplies token embeddings by sqrt(d_model)
    as the original Transformer does (GPT-2 does not). ``pad_id`` is only the filler
    written into padded slots; which slots are padding is given by ``attention_mask``.
    """

    family: ClassVar[str] = "decoder_lm"

    vocab_size: int = 50257
    d_model: int = 768
    num_heads: int = 12
    d_ff: int = 3072
    num_layers: int = 12
    max_positions: int = 1024
    positional: str = "learned"
    norm_first: bool = True
    activation: str = "gelu_tanh"
    dropout: float = 0.1
    attention_dropout: float = 0.0
    layer_norm_eps: float = 1e-5
    scale_embeddings: bool = False
    pad_id: int = 0
    bos_id: int | None = None
    eos_id: int | None = None

    def __post_init__(self):
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}")
        if self.positional not in ("sinusoidal", "learned"):
            raise ValueError(f"positional={self.positional!r}; choose 'sinusoidal' or 'learned'")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r}; choose one of {sorted(ACTIVATIONS)}")
        for name in ("vocab_size", "d_model", "num_heads", "d_ff", "num_layers", "max_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        for name in ("pad_id", "bos_id", "eos_id"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < self.vocab_size:
                raise ValueError(f"{name}={value} is outside the vocabulary [0, {self.vocab_size})")


class StaticKVCache:
    """Preallocated keys and values of every layer for generating up to ``capacity`` positions.

    ``kv[i]`` is layer i's buffer ``(2, B, H, capacity, D)`` (keys, values). ``length`` is
    the number of positions written; ``positions`` ``(B,)`` the position index of the next
    token in each row (rows of a left-padded batch differ); ``key_mask`` ``(B, 1, 1,
    capacity)`` marks real (non-padding) keys, or is None when no row has padding.

    It also offers the ``cache[i].self_attn.append(k, v)`` interface of
    :class:`~attnlab.attention.cache.StackCache`, so the ordinary layer stack can fill it
    (the prompt "prefill") and the fast :meth:`DecoderLM.decode_step` continue from it.
    """

    def __init__(self, num_layers: int, batch: int, num_heads: int, capacity: int, head_dim: int, *,
                 dtype=torch.float32, device=None):
        self.capacity = capacity
        self.kv = [torch.empty(2, batch, num_heads, capacity, head_dim, dtype=dtype, device=device)
                   for _ in range(num_layers)]
        self.length = 0
        self.positions = torch.zeros(batch, dtype=torch.long, device=device)
        self.key_mask: Tensor | None = None
        self.layers = [_StaticLayerView(self, i) for i in range(num_layers)]

    def __getitem__(self, i: int) -> "_StaticLayerView":
        return self.layers[i]


class _StaticLayerView:
    """One layer of a :class:`StaticKVCache`, looking like a ``LayerCache``."""

    cross_attn = None

    def __init__(self, cache: StaticKVCache, index: int):
        self.cache, self.index = cache, index
        self.self_attn = self

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write ``(B, H, T, D)`` keys/values at the next T slots; return all so far."""
        kv, start = self.cache.kv[self.index], self.cache.length
        end = start + k.shape[-2]
        if end > self.cache.capacity:
            raise ValueError(f"StaticKVCache is full: {end} positions > capacity {self.cache.capacity}")
        kv[0, :, :, start:end] = k
        kv[1, :, :, start:end] = v
        if self.index == len(self.cache.layers) - 1:
            self.cache.length = end
        return kv[0, :, :, :end], kv[1, :, :, :end]


@register_family
class DecoderLM(AttnlabModel):
    """GPT-style decoder-only language model.

    ``model(ids)`` with ``(B, L)`` ids returns next-token logits ``(B, L, V)``: position t
    predicts token t+1 from tokens 0..t.
    """

    config_class = DecoderLMConfig

    def __init__(self, config: DecoderLMConfig):
        super().__init__(config)
        c = config
        self.embed = TokenEmbedding(c.vocab_size, c.d_model, scale=c.scale_embeddings)
        self.positions = build_positional(c.positional, c.d_model, c.max_positions)
        self.embed_dropout = nn.Dropout(c.dropout)
        self.stack = TransformerStack(
            [TransformerLayer(c.d_model, c.num_heads, c.d_ff, dropout=c.dropout, attention_dropout=c.attention_dropout,
                              activation_dropout=0.0, activation=c.activation, norm_first=c.norm_first,
                              layer_norm_eps=c.layer_norm_eps, self_pattern=CausalAttention())
             for _ in range(c.num_layers)],
            d_model=c.d_model, final_norm=True, layer_norm_eps=c.layer_norm_eps)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.lm_head.weight = self.embed.weight  # tied (GPT-2 §2.3, Press & Wolf 2017)
        self._init_weights()

    def _init_weights(self) -> None:
        # GPT-2: N(0, 0.02) everywhere, zero biases, and the projections that write into
        # the residual stream scaled by 1/sqrt(2·num_layers) (GPT-2 §2.3).
        residual_std = 0.02 / math.sqrt(2 * self.config.num_layers)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear) and module is not self.lm_head:
                is_residual = name.endswith("out_proj") or name.endswith("linear2")
                nn.init.normal_(module.weight, std=residual_std if is_residual else 0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        nn.init.normal_(self.embed.weight, std=0.02)
        if self.config.positional == "learned":
            nn.init.normal_(self.positions.weight, std=0.01)

    # -- the full forward pass ----------------------------------------------------------
    def forward(self, ids: Tensor, *, attention_mask: Tensor | None = None, positions: Tensor | None = None,
                cache=None) -> Tensor:
        """
        Args:
            ids: ``(B, L)`` token ids.
            attention_mask: ``(B, L_past + L)``, 1/True at real tokens, 0/False at padding
                (left padding for generation, right padding for training both work).
            positions: ``(B, L)`` position indices; default: counted from each row's first
                real token (``cumsum(attention_mask) - 1``), else ``L_past .. L_past+L-1``.
            cache: a :class:`StaticKVCache` or ``StackCache`` holding ``L_past`` positions.
        Returns:
            logits ``(B, L, V)``.
        """
        check_token_ids(ids, self.config.vocab_size, "ids")
        batch, length = ids.shape
        past = 0 if cache is None else cache.length
        key_mask = None
        if attention_mask is not None:
            if attention_mask.shape != (batch, past + length):
                raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, expected "
                                 f"(batch, past + length) = {(batch, past + length)}")
            attention_mask = attention_mask.bool()
            key_mask = attention_mask[:, None, None, :]  # (B, 1, 1, Lk)
            if positions is None:
                positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, past:]
        if positions is None:
            positions = torch.arange(past, past + length, device=ids.device).expand(batch, length)
        elif positions.shape != (batch, length):
            raise ValueError(f"positions has shape {tuple(positions.shape)}, expected {(batch, length)}")
        if positions.numel() and int(positions.max()) >= self.config.max_positions:
            raise ValueError(f"position {int(positions.max())} is beyond the context of "
                             f"max_positions={self.config.max_positions}")
        x = self.embed_dropout(self.embed(ids) + self.positions(positions))  # (B, L, d_model)
        hidden, _ = self.stack(x, self_mask=key_mask, cache=cache)
        return self.lm_head(hidden)  # (B, L, V)

    # -- the generation fast path ---------------------------------------------------------
    def new_static_cache(self, batch: int, capacity: int | None = None) -> StaticKVCache:
        """An empty :class:`StaticKVCache` for ``batch`` rows and ``capacity`` positions
        (default: the whole context), in the model's dtype and device."""
        c = self.config
        capacity = c.max_positions if capacity is None else capacity
        weight = self.embed.weight
        return StaticKVCache(c.num_layers, batch, c.num_heads, capacity, c.d_model // c.num_heads,
                             dtype=weight.dtype, device=weight.device)

    @torch.inference_mode()
    def prefill(self, ids: Tensor, cache: StaticKVCache, attention_mask: Tensor | None = None) -> Tensor:
        """Run the prompt ``(B, L)`` through the model, filling an empty ``cache``.

        Returns the logits of the last position ``(B, V)`` (for left-padded prompts, every
        row's last real token). Afterwards ``cache.positions`` holds each row's next
        position and ``cache.key_mask`` the padding of the whole buffer.
        """
        if cache.length != 0:
            raise ValueError(f"prefill needs an empty cache, this one holds {cache.length} positions")
        if ids.shape[1] > cache.capacity:
            raise ValueError(f"prompt of {ids.shape[1]} tokens does not fit a cache of capacity {cache.capacity}")
        logits = self(ids, attention_mask=attention_mask, cache=cache)[:, -1]
        if attention_mask is None:
            cache.positions.fill_(ids.shape[1])
            cache.key_mask = None
        else:
            mask = attention_mask.bool()
            cache.positions.copy_(mask.sum(-1))
            if bool(mask.all()):
                cache.key_mask = None
            else:
                key_mask = torch.ones(ids.shape[0], 1, 1, cache.capacity, dtype=torch.bool, device=ids.device)
                key_mask[:, 0, 0, :ids.shape[1]] = mask
                cache.key_mask = key_mask
        return logits

    def _decode_plan(self, cache: StaticKVCache):
        # The plain tensors the fast step reads, gathered once: nn.Module attribute lookups
        # cost ~1 µs each, and a step would otherwise make ~20 per layer. Rebuilt when the
        # weights move (dtype/device) or a sinusoidal table must cover a larger cache.
        weight = self.embed.weight
        key = (weight.data_ptr(), weight.dtype, weight.device, cache.capacity)
        if getattr(self, "_plan_key", None) != key:
            if self.config.positional == "learned":
                table = self.positions.weight
            else:
                table = sinusoidal_table(max(cache.capacity, self.config.max_positions), self.config.d_model).to(weight)
            layers = [(layer.self_attn_norm.weight, layer.self_attn_norm.bias,
                       layer.self_attn.qkv_proj.weight, layer.self_attn.qkv_proj.bias,
                       layer.self_attn.out_proj.weight, layer.self_attn.out_proj.bias,
                       layer.ffn_norm.weight, layer.ffn_norm.bias,
                       layer.ffn.linear1.weight, layer.ffn.linear1.bias,
                       layer.ffn.linear2.weight, layer.ffn.linear2.bias) for layer in self.stack.layers]
            final = self.stack.final_norm
            self._plan = (table, layers, final.weight, final.bias)
            self._plan_key = key
        return self._plan

    @torch.inference_mode()
    def decode_step(self, tokens: Tensor, cache: StaticKVCache) -> Tensor:
        """One new token per row ``(B,)`` -> next-token logits ``(B, V)``, using and extending ``cache``.

        The same computation as :meth:`forward` on the cached sequence plus ``tokens``
        (checked by the tests), written out for speed: no input checks, no mask building,
        no host syncs, keys and values written in place into the preallocated buffers with
        one copy per layer. The caller keeps ``cache.length < cache.capacity`` and the
        positions inside the context. Eval mode only (no dropout).
        """
        c = self.config
        batch = tokens.shape[0]
        heads, d = c.num_heads, c.d_model
        head_dim = d // heads
        step = cache.length
        table, layers, final_weight, final_bias = self._decode_plan(cache)
        embed = self.embed.weight
        x = F.embedding(tokens, embed)  # (B, d)
        if c.scale_embeddings:
            x = x * self.embed.multiplier
        x = x + F.embedding(cache.positions, table)
        key_mask = None if cache.key_mask is None else cache.key_mask.narrow(3, 0, step + 1)  # (B, 1, 1, step+1)
        eps, pre_ln = c.layer_norm_eps, c.norm_first
        relu = c.activation == "relu"
        approximate = "tanh" if c.activation == "gelu_tanh" else "none"
        for (ln1_w, ln1_b, qkv_w, qkv_b, out_w, out_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b), kv in zip(
                layers, cache.kv):
            h = F.layer_norm(x, (d,), ln1_w, ln1_b, eps) if pre_ln else x
            qkv = F.linear(h, qkv_w, qkv_b).view(batch, 3, heads, head_dim)
            # narrow/select instead of tensor[...] indexing: Python's multi-slice indexing
            # costs several µs per call, and this loop runs once per layer per token.
            kv.select(3, step).copy_(qkv.narrow(1, 1, 2).transpose(0, 1))  # keys, values (2, B, H, D): one copy
            q = qkv.select(1, 0).unsqueeze(2)  # (B, H, 1, D)
            keys, values = kv.narrow(3, 0, step + 1).unbind(0)  # (B, H, step+1, D) each
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=key_mask)  # (B, H, 1, D)
            out = F.linear(out.view(batch, d), out_w, out_b)
            x = x + out if pre_ln else F.layer_norm(x + out, (d,), ln1_w, ln1_b, eps)
            h = F.layer_norm(x, (d,), ln2_w, ln2_b, eps) if pre_ln else x
            h = F.linear(h, fc1_w, fc1_b)
            h = F.relu(h) if relu else F.gelu(h, approximate=approximate)
            out = F.linear(h, fc2_w, fc2_b)
            x = x + out if pre_ln else F.layer_norm(x + out, (d,), ln2_w, ln2_b, eps)
        x = F.layer_norm(x, (d,), final_weight, final_bias, eps)
        cache.length = step + 1
        cache.positions += 1
        return F.linear(x, embed)  # (B, V)


# -- presets ---------------------------------------------------------------------------
@register_preset
def lm_tiny() -> DecoderLMConfig:
    """A tiny model for tests: 2 layers, d_model=32, 4 heads, 64 positions, vocabulary 64."""
    return DecoderLMConfig(vocab_size=64, d_model=32, num_heads=4, d_ff=64, num_layers=2, max_positions=64,
                           dropout=0.0)


@register_preset
def lm_char_small() -> DecoderLMConfig:
    """The offline character-level Shakespeare model: 6 layers, d_model=256, 8 heads,
    context 256 (about 4.8M parameters; trains in under 30 minutes on 2 CPU cores).
    ``vocab_size`` is set from the character tokenizer when training."""
    return DecoderLMConfig(vocab_size=128, d_model=256, num_heads=8, d_ff=1024, num_layers=6, max_positions=256,
                           dropout=0.1)


@register_preset
def gpt2_small() -> DecoderLMConfig:
    """GPT-2 small (Radford et al. 2019, Table 2): 12 layers, d_model=768, 12 heads,
    1024 positions, vocabulary 50257 (byte-level BPE), 124M parameters."""
    return DecoderLMConfig(vocab_size=50257, d_model=768, num_heads=12, d_ff=3072, num_layers=12, max_positions=1024,
                           dropout=0.1, bos_id=50256, eos_id=50256)


__all__ = ["DecoderLM", "DecoderLMConfig", "StaticKVCache", "lm_tiny", "lm_char_small", "gpt2_small"]
