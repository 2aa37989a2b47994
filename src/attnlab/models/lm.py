"""Decoder-only language models (GPT): next-token prediction with masked self-attention.

Radford et al. 2018 ("Improving Language Understanding by Generative Pre-Training", §3.1)
and 2019 (GPT-2, §2.3): token + learned position embeddings, a stack of causal
self-attention blocks (GPT-2: pre-LN with a final LayerNorm), and an output projection
tied to the token embeddings. The model is a :class:`~attnlab.models.parts.TokenDecoder`
without cross-attention; its self-attention pattern comes from ``config.attention``.

Two ways to run the model, through the same layers:

* ``model(ids, attention_mask=..., positions=...)`` — full forward pass over ``(B, L)``
  ids, for training and for checking. Left-padded batches work: positions are counted per
  row from the first real token, and padding keys are masked.
* ``model.prefill(ids, cache)`` then ``model.step(tokens, cache)`` with a cache from
  :meth:`DecoderLM.new_cache` (a preallocated :class:`~attnlab.attention.cache.StaticKVCache`)
  — generation: the step runs the decoder's layers without input validation, mask
  building or host syncs. Tests check that it equals the full forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from attnlab.attention.cache import StaticKVCache
from attnlab.layers.embedding import TokenEmbedding
from attnlab.layers.positional import build_positional
from attnlab.models.base import AttnlabModel, StackConfig, check_token_ids, require_positive
from attnlab.models.parts import TokenDecoder, build_stack
from attnlab.models.registry import register_model_class, register_preset


@dataclass(frozen=True)
class DecoderLMConfig(StackConfig):
    """Configuration of a :class:`DecoderLM` (defaults: GPT-2 small).

    The stack fields are :class:`~attnlab.models.base.StackConfig`'s. ``positional`` is
    "learned" (GPT), "sinusoidal" or "none" (NoPE); ``max_positions`` is the context
    length. ``attention`` is the (causal) self-attention pattern spec. ``scale_embeddings``
    multiplies token embeddings by sqrt(d_model) as the original Transformer does (GPT-2
    does not). ``pad_id`` is only the filler written into padded slots; which slots are
    padding is given by ``attention_mask``.
    """

    family: ClassVar[str] = "decoder_lm"
    pattern_fields: ClassVar[dict[str, bool]] = {"attention": True}

    vocab_size: int = 50257
    d_model: int = 768
    num_heads: int = 12
    d_ff: int = 3072
    num_layers: int = 12
    positional: str = "learned"
    norm_first: bool = True
    activation: str = "gelu_tanh"
    attention: str | dict[str, Any] = "causal"
    scale_embeddings: bool = False
    pad_id: int = 0
    bos_id: int | None = None
    eos_id: int | None = None

    def __post_init__(self):
        super().__post_init__()
        require_positive(self, "vocab_size", "num_layers")
        for name in ("pad_id", "bos_id", "eos_id"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < self.vocab_size:
                raise ValueError(f"{name}={value} is outside the vocabulary [0, {self.vocab_size})")


@register_model_class
class DecoderLM(AttnlabModel):
    """GPT-style decoder-only language model.

    ``model(ids)`` with ``(B, L)`` ids returns next-token logits ``(B, L, V)``: position t
    predicts token t+1 from tokens 0..t.
    """

    config_class = DecoderLMConfig
    # Before the decoder became a part (attnlab <= 03ab32e): embed, positions, stack, lm_head.
    legacy_names = (("embed.", "decoder.embed."), ("positions.", "decoder.positions."),
                    ("stack.", "decoder.stack."), ("lm_head.", "decoder.head."))

    def __init__(self, config: DecoderLMConfig):
        super().__init__(config)
        c = config
        # GPT-2 §2.3, Press & Wolf 2017: the output projection is tied to the embedding.
        self.decoder = TokenDecoder(TokenEmbedding(c.vocab_size, c.d_model, scale=c.scale_embeddings),
                                    build_positional(c.positional, c.d_model, c.max_positions),
                                    build_stack(c, c.num_layers, c.attention, cross_attention=False, final_norm=True),
                                    dropout=c.dropout)
        self._init_weights()

    @property
    def embed(self) -> TokenEmbedding:
        return self.decoder.embed

    @property
    def lm_head(self) -> nn.Linear:
        return self.decoder.head

    def _init_weights(self) -> None:
        # GPT-2: N(0, 0.02) everywhere, zero biases, and the projections that write into
        # the residual stream scaled by 1/sqrt(2·num_layers) (GPT-2 §2.3).
        residual_std = 0.02 / math.sqrt(2 * self.config.num_layers)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear) and module is not self.decoder.head:
                is_residual = name.endswith("out_proj") or name.endswith("linear2")
                nn.init.normal_(module.weight, std=residual_std if is_residual else 0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        nn.init.normal_(self.decoder.embed.weight, std=0.02)
        if self.config.positional == "learned":
            nn.init.normal_(self.decoder.positions.weight, std=0.01)

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
            cache: a cache from :meth:`new_cache` or ``decoder.new_growing_cache()``
                holding ``L_past`` positions.
        Returns:
            logits ``(B, L, V)``.
        """
        check_token_ids(ids, self.config.vocab_size, "ids")
        batch, length = ids.shape
        past = 0 if cache is None else cache.length
        key_mask = None
        given_positions = positions is not None
        if attention_mask is not None:
            if attention_mask.shape != (batch, past + length):
                raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, expected "
                                 f"(batch, past + length) = {(batch, past + length)}")
            attention_mask = attention_mask.bool()
            if isinstance(cache, StaticKVCache):
                cache.set_key_padding(attention_mask)  # the cache hands the attention its keys' padding
            else:
                key_mask = attention_mask[:, None, None, :]  # (B, 1, 1, Lk)
            if positions is None:
                positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, past:]
        if positions is None:
            positions = torch.arange(past, past + length, device=ids.device).expand(batch, length)
        if not given_positions:  # built here, all below past + length: checked on the host, no sync
            bound = past + length
        elif positions.shape != (batch, length):
            raise ValueError(f"positions has shape {tuple(positions.shape)}, expected {(batch, length)}")
        else:
            bound = int(positions.max()) + 1 if positions.numel() else 0  # given positions: look (a sync)
        if bound > self.config.max_positions:
            raise ValueError(f"position {bound - 1} is beyond the context of "
                             f"max_positions={self.config.max_positions}")
        logits = self.decoder(ids, positions, self_mask=key_mask, cache=cache, positions_bound=bound)
        if isinstance(cache, StaticKVCache) and length:
            cache.set_positions(positions[:, -1] + 1)
        return logits

    # -- generation (the CausalLM protocol) ------------------------------------------------
    def new_cache(self, batch: int, capacity: int | None = None, *, fixed_shape: bool = False) -> StaticKVCache:
        """An empty preallocated cache for ``batch`` rows and ``capacity`` positions
        (default: the whole context), in the model's dtype and device."""
        return self.decoder.new_cache(batch, self.config.max_positions if capacity is None else capacity,
                                      fixed_shape=fixed_shape)

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
        if attention_mask is not None and bool(attention_mask.bool().all()):
            attention_mask = None  # no padding: the steps need no key mask
        return self(ids, attention_mask=attention_mask, cache=cache)[:, -1]

    @torch.inference_mode()
    def step(self, tokens: Tensor, cache: StaticKVCache) -> Tensor:
        """One new token per row ``(B,)`` -> next-token logits ``(B, V)``, extending ``cache``
        (:meth:`TokenDecoder.step`: the decoder's layers, no checks, no host syncs). The
        caller keeps ``cache.length < cache.capacity``. Eval mode (no dropout)."""
        return self.decoder.step(tokens, cache)

    @torch.inference_mode()
    def greedy_step(self, tokens: Tensor, cache: StaticKVCache) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`step` for greedy decoding, its head screened in int8: ``(next_tokens, sure, hidden)``
        (:meth:`TokenDecoder.greedy_step`; what a greedy package computes, generation/aot.py)."""
        return self.decoder.greedy_step(tokens, cache)

    def greedy_screen(self):
        """The head's int8 screen :meth:`greedy_step` reads, made current (None: not screened;
        :meth:`TokenDecoder.greedy_screen`)."""
        return self.decoder.greedy_screen()

    def step_logits(self, hidden: Tensor) -> Tensor:
        """The logits of :meth:`greedy_step`'s ``hidden`` rows (where its screen was not sure)."""
        return self.decoder.step_logits(hidden)


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
def lm_char_mini() -> DecoderLMConfig:
    """A character model sized for minutes of CPU training (the README's 10-minute
    Shakespeare line): 4 layers, d_model=192, 6 heads, context 128, no dropout (about 1.8M
    parameters; about a fifth of ``lm_char_small``'s work per character).
    ``vocab_size`` is set from the character tokenizer when training."""
    return DecoderLMConfig(vocab_size=128, d_model=192, num_heads=6, d_ff=768, num_layers=4, max_positions=128,
                           dropout=0.0)


@register_preset
def gpt2_small() -> DecoderLMConfig:
    """GPT-2 small (Radford et al. 2019, Table 2): 12 layers, d_model=768, 12 heads,
    1024 positions, vocabulary 50257 (byte-level BPE), 124M parameters."""
    return DecoderLMConfig(vocab_size=50257, d_model=768, num_heads=12, d_ff=3072, num_layers=12, max_positions=1024,
                           dropout=0.1, bos_id=50256, eos_id=50256)


__all__ = ["DecoderLM", "DecoderLMConfig", "lm_tiny", "lm_char_mini", "lm_char_small", "gpt2_small"]
