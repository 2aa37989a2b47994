"""The encoder–decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import torch

from torch import Tensor, nn

from attnlab.attention.cache import StackCache, StaticKVCache
from attnlab.attention.masks import check_mask
from attnlab.attention.varlen import Segments, pack_right_padded
from attnlab.layers.blocks import LayerAttention
from attnlab.layers.embedding import TokenEmbedding
from attnlab.layers.positional import build_positional
from attnlab.linear import Linear
from attnlab.models.base import AttnlabModel, StackConfig, check_token_ids, require_positive
from attnlab.models.parts import TokenDecoder, TokenEncoder, build_stack
from attnlab.models.registry import register_model_class, register_preset


@dataclasses.dataclass(frozen=True)
class TransformerConfig(StackConfig):
    """Configuration of the encoder–decoder Transformer.

    The stack fields are :class:`~attnlab.models.base.StackConfig`'s (the paper's base
    model by default). ``tgt_vocab_size=None`` means source and target share one
    vocabulary of ``vocab_size``. ``share_embeddings`` ties the source and target
    embeddings (needs a shared vocabulary); ``tie_output_projection`` ties the target
    embedding and the pre-softmax projection. Both together are the paper's three-way
    tying (§3.4). ``encoder_attention`` / ``decoder_attention`` are the self-attention
    pattern specs of the two stacks (the decoder's must be causal).

    Options for converted models (MarianMT, :mod:`attnlab.interop.hf_marian`), off by
    default: ``scale_embeddings`` (multiply embeddings by sqrt(d_model), the paper's §3.4;
    on by default), ``output_bias`` (a bias on the output projection: Marian's
    ``final_logits_bias``), ``suppress_ids`` (token ids decoding never proposes: their
    logits are -inf in :meth:`Transformer.decode`, the decoding API, and in the decoder's
    cached forward and step; the teacher-forced ``forward`` keeps the raw logits; Marian's
    ``bad_words_ids``, its pad token, which is also its decoder start token).
    """

    family = "transformer"
    pattern_fields = {"encoder_attention": False, "decoder_attention": True}
    positional_kinds = ("sinusoidal", "learned", "none", "sinusoidal_halves")  # + Marian's layout

    vocab_size: int = 32000
    tgt_vocab_size: int | None = None
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    activation_dropout: float = 0.0
    final_norm: bool = True
    encoder_attention: str | dict[str, Any] = "full"
    decoder_attention: str | dict[str, Any] = "causal"
    share_embeddings: bool = True
    tie_output_projection: bool = True
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    scale_embeddings: bool = True
    output_bias: bool = False
    suppress_ids: list[int] | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.suppress_ids is not None:
            if not isinstance(self.suppress_ids, (list, tuple)) or not all(
                    isinstance(i, int) and not isinstance(i, bool) and 0 <= i < self.target_vocab_size
                    for i in self.suppress_ids):
                raise ValueError(f"suppress_ids={self.suppress_ids!r} must be a list of target token ids "
                                 f"in [0, {self.target_vocab_size})")
            if self.eos_id in self.suppress_ids:
                raise ValueError(f"suppress_ids={self.suppress_ids!r} holds eos_id={self.eos_id}: "
                                 "decoding could never stop")
        require_positive(self, "vocab_size", "num_encoder_layers", "num_decoder_layers")
        if self.tgt_vocab_size is not None and self.tgt_vocab_size < 1:
            raise ValueError(f"tgt_vocab_size={self.tgt_vocab_size} must be >= 1")
        if self.share_embeddings and self.tgt_vocab_size not in (None, self.vocab_size):
            raise ValueError(f"share_embeddings needs one shared vocabulary, but vocab_size={self.vocab_size} "
                             f"and tgt_vocab_size={self.tgt_vocab_size}")
        for name in ("pad_id", "bos_id", "eos_id"):
            if not 0 <= getattr(self, name) < min(self.vocab_size, self.target_vocab_size):
                raise ValueError(f"{name}={getattr(self, name)} is outside the vocabulary")

    @property
    def target_vocab_size(self) -> int:
        return self.vocab_size if self.tgt_vocab_size is None else self.tgt_vocab_size


class Seq2SeqAttention(NamedTuple):
    """Per-layer attention weights of one forward pass, each ``(B, H, Lq, Lk)``."""

    encoder: list[Tensor]
    decoder_self: list[Tensor]
    cross: list[Tensor]


@register_model_class
class Transformer(AttnlabModel):
    """Encoder–decoder Transformer: a :class:`TokenEncoder` and a :class:`TokenDecoder`.

    ``model(src_ids, tgt_in_ids)`` with ``(B, S)`` and ``(B, T)`` ids returns logits
    ``(B, T, V)``. Padding (``config.pad_id``) is masked in the source; target padding must
    be on the right, where causal masking already keeps it out of every real position.
    """

    config_class = TransformerConfig
    # Before the halves became parts (attnlab <= 03ab32e); one position table served both.
    legacy_names = (("src_embed.", "encoder.embed."), ("tgt_embed.", "decoder.embed."),
                    ("output_proj.", "decoder.head."), ("positions.", "encoder.positions."),
                    ("encoder.layers.", "encoder.stack.layers."), ("encoder.final_norm.", "encoder.stack.final_norm."),
                    ("decoder.layers.", "decoder.stack.layers."), ("decoder.final_norm.", "decoder.stack.final_norm."))

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        c = config
        src_embed = TokenEmbedding(c.vocab_size, c.d_model, padding_idx=c.pad_id, scale=c.scale_embeddings)
        tgt_embed = (src_embed if c.share_embeddings
                     else TokenEmbedding(c.target_vocab_size, c.d_model, padding_idx=c.pad_id,
                                         scale=c.scale_embeddings))
        positions = build_positional(c.positional, c.d_model, c.max_positions)  # one table for both halves
        head = None
        if not c.tie_output_projection:
            head = Linear(c.d_model, c.target_vocab_size, bias=c.output_bias)
            nn.init.normal_(head.weight, std=c.d_model ** -0.5)
            if c.output_bias:
                nn.init.zeros_(head.bias)
        self.encoder = TokenEncoder(src_embed, positions,
                                    build_stack(c, c.num_encoder_layers, c.encoder_attention, cross_attention=False,
                                                final_norm=c.final_norm, activation_dropout=c.activation_dropout),
                                    dropout=c.dropout, pad_id=c.pad_id)
        self.decoder = TokenDecoder(tgt_embed, positions,
                                    build_stack(c, c.num_decoder_layers, c.decoder_attention, cross_attention=True,
                                                final_norm=c.final_norm, activation_dropout=c.activation_dropout),
                                    dropout=c.dropout, head=head, head_bias=c.output_bias,
                                    suppress_ids=c.suppress_ids)
        self._init_linear_layers()

    # Names of the parts' pieces as the model had them before the split.
    src_embed = property(lambda self: self.encoder.embed)
    tgt_embed = property(lambda self: self.decoder.embed)
    output_proj = property(lambda self: self.decoder.head)
    positions = property(lambda self: self.decoder.positions)

    def _init_linear_layers(self) -> None:
        # Xavier-uniform weights and zero biases for the feed-forward layers, as in the
        # paper's tensor2tensor code; attention projections initialise themselves.
        for part in (self.encoder, self.decoder):
            for layer in part.layers:
                for linear in (layer.ffn.linear1, layer.ffn.linear2):
                    nn.init.xavier_uniform_(linear.weight)
                    nn.init.zeros_(linear.bias)

    # -- the two halves (the EncoderDecoder protocol) ---------------------------------------
    @property
    def max_source_length(self) -> int | None:
        """The longest source the encoder accepts (a learned position table), None: any."""
        return getattr(self.encoder.positions, "max_positions", None)

    def max_output_length(self) -> int | None:
        """The most tokens the decoder can produce (its input is BOS + all but the last)."""
        return self.decoder.max_positions

    def encode(self, src_ids: Tensor, *, need_weights: bool = False):
        """``(B, S)`` ids -> ``(memory (B, S, d_model), memory_mask (B, 1, 1, S))``; with
        ``need_weights`` also the per-layer encoder self-attention weights."""
        check_token_ids(src_ids, self.config.vocab_size, "src_ids")
        if need_weights:
            memory, memory_mask, weights = self.encoder(src_ids, need_weights=True)
            return memory, memory_mask, [w.self_attn for w in weights]
        return self.encoder(src_ids)

    def decode(self, tgt_ids: Tensor, memory: Tensor | None, memory_mask: Tensor | None, *,
               cache: StackCache | None = None, need_weights: bool = False):
        """Target ids ``(B, T)`` -> logits ``(B, T, V)``.

        With a ``cache`` (from :meth:`new_cache`), ``tgt_ids`` are the next positions after
        those already cached; the result then equals the last ``T`` positions of a full
        recomputation. ``memory`` may be None once the cache holds the cross-attention
        keys/values. With ``need_weights`` also returns ``list[LayerAttention]``.
        """
        out = self._decode(tgt_ids, memory, memory_mask, cache=cache, need_weights=need_weights)
        if self.config.suppress_ids is None:
            return out
        logits = self.decoder.suppress(out[0] if need_weights else out)
        return (logits, out[1]) if need_weights else logits

    def _decode(self, tgt_ids: Tensor, memory: Tensor | None, memory_mask: Tensor | None, *,
                cache: StackCache | None = None, need_weights: bool = False):
        # decode() without the suppression of config.suppress_ids (teacher forcing: raw logits)
        check_token_ids(tgt_ids, self.config.target_vocab_size, "tgt_ids")
        if memory_mask is not None:
            batch = tgt_ids.shape[0]
            source_len = memory.shape[1] if memory is not None else memory_mask.shape[-1]
            check_mask(memory_mask, batch, self.config.num_heads, tgt_ids.shape[1], source_len, "memory_mask")
        offset = 0 if cache is None else cache.length
        positions = torch.arange(offset, offset + tgt_ids.shape[1], device=tgt_ids.device)
        return self.decoder(tgt_ids, positions, memory=memory, memory_mask=memory_mask, cache=cache,
                            need_weights=need_weights, positions_bound=offset + tgt_ids.shape[1])

    def new_cache(self, capacity: int = 64) -> StackCache:
        """An empty growing decoder cache for incremental decoding (search reorders it)."""
        return self.decoder.new_growing_cache(capacity)

    def new_step_cache(self, memory: Tensor, *, rows_per_source: int = 1, capacity: int = 64,
                       fixed_shape: bool = False, memory_keys_values: list[Tensor] | None = None) -> StaticKVCache:
        """A preallocated cache for :meth:`decode_step` over ``rows_per_source`` consecutive
        rows per source of the encoded ``memory`` (the search's fast path), with the
        cross-attention keys and values already computed from it, one row per source.
        ``cache.reorder`` moves decoder rows (any number per source, e.g. one before beam
        search expands to k); ``cache.reorder_memory`` keeps sources. ``memory_keys_values``: the
        cross-attention layers' keys and values of ``memory`` where the caller has them
        (``decoder.memory_keys_values``; an encoder package, :func:`~attnlab.generation.aot.aot_encode`)."""
        return self.decoder.new_search_cache(memory, rows_per_source, capacity, fixed_shape=fixed_shape,
                                             memory_keys_values=memory_keys_values)

    def decode_step(self, tokens: Tensor, cache: StaticKVCache, memory_mask: Tensor | None) -> Tensor:
        """One token per row ``(R,)`` -> next-token logits ``(R, V)`` (suppressed ids -inf):
        :meth:`decode` with a cache for one position, through the decoder's step path (the
        same layers, no argument checks or host syncs). ``memory_mask`` ``(B, 1, 1, S)``, one
        row per source of the cache's memory (each source's R / B consecutive rows read it),
        or None when every memory position is real."""
        return self.decoder.step(tokens, cache, memory_mask)

    def forward(self, src_ids: Tensor, tgt_in_ids: Tensor, *, varlen: bool = False) -> Tensor:
        """Teacher-forced logits ``(B, T, V)``.

        ``varlen=True``: the same logits of the real (non-padding) target positions only,
        packed row after row ``(T_real, V)``, computed without the padding: every token-wise
        part on the real tokens alone and attention on packed variable-length sequences
        (:mod:`attnlab.attention.varlen`; on a GPU in half precision the pad-free flash
        kernel). Both sides must be right-padded; the attention patterns full and causal.
        """
        if varlen:
            return self._forward_varlen(src_ids, tgt_in_ids)
        memory, memory_mask = self.encode(src_ids)
        return self._decode(tgt_in_ids, memory, memory_mask)

    def _forward_varlen(self, src_ids: Tensor, tgt_in_ids: Tensor) -> Tensor:
        c = self.config
        check_token_ids(src_ids, c.vocab_size, "src_ids")
        check_token_ids(tgt_in_ids, c.target_vocab_size, "tgt_ids")
        if src_ids.shape[0] != tgt_in_ids.shape[0]:
            raise ValueError(f"{src_ids.shape[0]} sources for {tgt_in_ids.shape[0]} targets")
        source = pack_right_padded(src_ids != c.pad_id, "src_ids")
        target = pack_right_padded(tgt_in_ids != c.pad_id, "tgt_ids")
        encoder, decoder = self.encoder, self.decoder
        memory = encoder.packed_memory(src_ids, source)
        hidden, _ = decoder.stack(decoder.embed_packed(tgt_in_ids, target), self_mask=Segments(target, target),
                                  memory=memory, memory_mask=Segments(target, source))
        return decoder.head(hidden[0])

    def attention_maps(self, src_ids: Tensor, tgt_in_ids: Tensor) -> tuple[Tensor, Seq2SeqAttention]:
        """Logits and every layer's attention weights (for visualisation)."""
        memory, memory_mask, encoder_weights = self.encode(src_ids, need_weights=True)
        logits, decoder_weights = self.decode(tgt_in_ids, memory, memory_mask, need_weights=True)
        return logits, Seq2SeqAttention(encoder_weights, [w.self_attn for w in decoder_weights],
                                        [w.cross_attn for w in decoder_weights])

    def num_parameters_without_embeddings(self) -> int:
        """Parameters of the encoder and decoder stacks only (what ``torch.nn.Transformer`` has)."""
        return self.num_parameters(exclude=("encoder.embed", "decoder.embed", "decoder.head", "encoder.positions",
                                            "decoder.positions"))


# -- presets ---------------------------------------------------------------------------
@register_preset
def transformer_base() -> TransformerConfig:
    """The paper's base model: N=6, d_model=512, d_ff=2048, h=8, dropout 0.1 (Table 3)."""
    return TransformerConfig(d_model=512, num_heads=8, d_ff=2048, num_encoder_layers=6, num_decoder_layers=6,
                             dropout=0.1)


@register_preset
def transformer_big() -> TransformerConfig:
    """The paper's big model: d_model=1024, d_ff=4096, h=16, dropout 0.3 (Table 3)."""
    return TransformerConfig(d_model=1024, num_heads=16, d_ff=4096, num_encoder_layers=6, num_decoder_layers=6,
                             dropout=0.3)


@register_preset
def transformer_tiny() -> TransformerConfig:
    """A tiny model for tests and the copy task: 2+2 layers, d_model=32, 4 heads."""
    return TransformerConfig(vocab_size=64, d_model=32, num_heads=4, d_ff=64, num_encoder_layers=2,
                             num_decoder_layers=2, dropout=0.0, max_positions=256)


@register_preset
def transformer_small() -> TransformerConfig:
    """A small model for CPU experiments: 3+3 layers, d_model=256, 4 heads, d_ff=1024."""
    return TransformerConfig(vocab_size=8000, d_model=256, num_heads=4, d_ff=1024, num_encoder_layers=3,
                             num_decoder_layers=3, dropout=0.1)


@register_preset
def multi30k() -> TransformerConfig:
    """Small corpora (Multi30k's 29k pairs, trans-de-en's 15k) on a CPU: 3+3 layers,
    d_model=256, 4 heads, d_ff=1024 (the size of the 36.5-BLEU small-Transformer anchor on
    Multi30k), pre-LN (Xiong et al. 2020), which takes a higher learning rate and learns
    faster early on than the paper's post-LN: in trials on trans-de-en it reached validation
    perplexity 71 after 530k target tokens (1,500-token batches, peak lr 3e-3), where
    post-LN ``transformer_small`` had 95 after 1M (3,000-token batches, peak lr 2e-3).
    The vocabulary comes from training."""
    return TransformerConfig(vocab_size=8000, d_model=256, num_heads=4, d_ff=1024, num_encoder_layers=3,
                             num_decoder_layers=3, dropout=0.1, norm_first=True)


__all__ = ["Transformer", "TransformerConfig", "Seq2SeqAttention", "LayerAttention"]
