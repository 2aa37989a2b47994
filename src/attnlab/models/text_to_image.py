"""Decoder-only text-to-image (DALL·E style, Ramesh et al. 2021): one causal Transformer over
[text tokens; image tokens].

    text  [BOS] prompt pieces [EOS] [PAD]...    text_length slots (ids 0 .. text_vocab_size - 1)
    image VQ-VAE codes of an h x w grid          h·w slots (ids text_vocab_size + code)

Both parts go through ONE :class:`~attnlab.models.parts.TokenDecoder` (the decoder-only
language model's part: embedding, positions, causal stack, head, step road). The parts
have separate embeddings (disjoint rows of the token table: image code k is row
``text_vocab_size + k``) and separate positions (:class:`TextImagePositions`: a learned
table for the text slots, learned row + column embeddings for the image cells). Training
predicts each image token from the text and the image tokens before it (raster order);
the text slots are given, never predicted.

Sampling is :func:`attnlab.generation.sampling.generate` -- the model is a
:class:`~attnlab.generation.protocols.CausalLM` (``prefill`` / ``step`` / ``new_cache``),
whose logits put -inf on every text id, so only image tokens come out; temperature and
top-k come with it, and the step road (a preallocated cache, one token per step).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.attention.cache import StaticKVCache
from attnlab.layers.embedding import TokenEmbedding
from attnlab.models.base import AttnlabModel, StackConfig, check_token_ids
from attnlab.models.parts import TokenDecoder, build_stack
from attnlab.models.registry import register_model_class, register_preset


@dataclasses.dataclass(frozen=True)
class TextToImageConfig(StackConfig):
    """Configuration of a :class:`TextToImage` model.

    ``text_length`` text slots (BOS, the prompt's pieces, EOS, padding), then ``grid`` x
    ``grid`` image tokens from a codebook of ``image_vocab_size``. ``max_positions`` is
    set to ``text_length + grid**2`` (any value given is replaced). ``vocab_size`` (the
    joint id space) is ``text_vocab_size + image_vocab_size``.
    """

    family: ClassVar[str] = "text_to_image"
    pattern_fields: ClassVar[dict[str, bool]] = {"attention": True}

    text_vocab_size: int = 256
    text_length: int = 24
    image_vocab_size: int = 512
    grid: int = 8
    num_layers: int = 4
    attention: str | dict[str, Any] = "causal"
    positional: str = "learned"
    norm_first: bool = True
    activation: str = "gelu"
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    def __post_init__(self):
        object.__setattr__(self, "max_positions", self.text_length + self.grid * self.grid)
        super().__post_init__()
        for name in ("text_vocab_size", "image_vocab_size", "grid", "num_layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.text_length < 3:
            raise ValueError(f"text_length={self.text_length} must be >= 3 (BOS, a piece, EOS)")
        if self.positional != "learned":
            raise ValueError(f"positional={self.positional!r}: a text-to-image model has its own learned text and "
                             "row/column positions; leave it 'learned'")
        for name in ("pad_id", "bos_id", "eos_id"):
            if not 0 <= getattr(self, name) < self.text_vocab_size:
                raise ValueError(f"{name}={getattr(self, name)} is outside the text vocabulary")

    @property
    def vocab_size(self) -> int:
        return self.text_vocab_size + self.image_vocab_size

    @property
    def image_tokens(self) -> int:
        return self.grid * self.grid


class TextImagePositions(nn.Module):
    """Positions of [text; image]: a learned vector per text slot, and for the image cell at
    (row, column) a learned row vector + a learned column vector. The interface of the
    position modules (``forward`` checks the range, ``lookup`` does not, ``ensure_length``,
    ``max_positions``)."""

    def __init__(self, text_length: int, grid: int, d_model: int):
        super().__init__()
        self.text_length, self.grid = text_length, grid
        self.max_positions = text_length + grid * grid
        self.text = nn.Parameter(torch.randn(text_length, d_model) * 0.02)
        self.row = nn.Parameter(torch.randn(grid, d_model) * 0.02)
        self.column = nn.Parameter(torch.randn(grid, d_model) * 0.02)

    def table(self) -> Tensor:
        """``(text_length + grid², d_model)``: every position's vector."""
        cells = (self.row[:, None, :] + self.column[None, :, :]).reshape(self.grid * self.grid, -1)
        return torch.cat([self.text, cells])

    def ensure_length(self, needed: int) -> None:
        if needed > self.max_positions:
            raise ValueError(f"position {needed - 1} is beyond the {self.text_length} text + {self.grid}x{self.grid} "
                             f"image positions")

    def forward(self, positions: Tensor) -> Tensor:
        if positions.numel():
            self.ensure_length(int(positions.max()) + 1)
        return self.lookup(positions)

    def lookup(self, positions: Tensor) -> Tensor:
        return F.embedding(positions, self.table())


@register_model_class
class TextToImage(AttnlabModel):
    """Text tokens + image tokens through one causal :class:`TokenDecoder`; see the module docstring."""

    config_class = TextToImageConfig

    def __init__(self, config: TextToImageConfig):
        super().__init__(config)
        c = config
        self.decoder = TokenDecoder(TokenEmbedding(c.vocab_size, c.d_model, scale=False),
                                    TextImagePositions(c.text_length, c.grid, c.d_model),
                                    build_stack(c, c.num_layers, c.attention, cross_attention=False, final_norm=True),
                                    dropout=c.dropout)
        nn.init.normal_(self.decoder.embed.weight, std=0.02)
        text_columns = torch.zeros(c.vocab_size, dtype=torch.bool)
        text_columns[:c.text_vocab_size] = True
        self.register_buffer("text_columns", text_columns, persistent=False)

    def sequence(self, text_ids: Tensor, codes: Tensor) -> Tensor:
        """``(B, text_length)`` text ids and ``(B, h, w)`` or ``(B, h·w)`` codes -> joint ids
        ``(B, text_length + h·w)``."""
        c = self.config
        check_token_ids(text_ids, c.text_vocab_size, "text_ids")
        if text_ids.shape[1] != c.text_length:
            raise ValueError(f"text_ids must have text_length={c.text_length} slots, got {text_ids.shape[1]}")
        codes = codes.reshape(codes.shape[0], -1)
        check_token_ids(codes, c.image_vocab_size, "codes")
        if codes.shape[1] != c.image_tokens:
            raise ValueError(f"codes must be {c.grid}x{c.grid} = {c.image_tokens} tokens, got {codes.shape[1]}")
        return torch.cat([text_ids, codes + c.text_vocab_size], dim=1)

    def forward(self, text_ids: Tensor, codes: Tensor, *, need_weights: bool = False):
        """Teacher-forced image-token logits ``(B, h·w, image_vocab_size)``: row i predicts
        code i from the text and codes 0 .. i-1 (with ``need_weights`` also the layers'
        attention over the whole sequence)."""
        c = self.config
        ids = self.sequence(text_ids, codes)[:, :-1]
        out = self.decoder(ids, torch.arange(ids.shape[1], device=ids.device), need_weights=need_weights,
                           positions_bound=ids.shape[1])
        logits = out[0] if need_weights else out
        image_logits = logits[:, c.text_length - 1:, c.text_vocab_size:]
        return (image_logits, out[1]) if need_weights else image_logits

    # -- sampling (the CausalLM protocol) ----------------------------------------------------
    def new_cache(self, batch: int, capacity: int | None = None, *, fixed_shape: bool = False) -> StaticKVCache:
        return self.decoder.new_cache(batch, self.config.max_positions if capacity is None else capacity,
                                      fixed_shape=fixed_shape)

    def _image_only(self, logits: Tensor) -> Tensor:
        return logits.masked_fill(self.text_columns, float("-inf"))

    @torch.inference_mode()
    def prefill(self, ids: Tensor, cache: StaticKVCache, attention_mask: Tensor | None = None) -> Tensor:
        """Run ``(B, L)`` ids (the text slots, maybe some image tokens) into an empty cache;
        the next token's logits ``(B, V)`` with every text id at -inf."""
        if attention_mask is not None and not bool(attention_mask.bool().all()):
            raise ValueError("text-to-image prompts fill all text_length slots; they are never padded on the left")
        if cache.length != 0:
            raise ValueError(f"prefill needs an empty cache, this one holds {cache.length} positions")
        check_token_ids(ids, self.config.vocab_size, "ids")
        positions = torch.arange(ids.shape[1], device=ids.device)
        logits = self.decoder(ids, positions, cache=cache, positions_bound=ids.shape[1])[:, -1]
        cache.set_positions(ids.shape[1])
        return self._image_only(logits)

    @torch.inference_mode()
    def step(self, tokens: Tensor, cache: StaticKVCache) -> Tensor:
        """One token per row ``(B,)`` -> the next token's logits ``(B, V)`` (text ids at -inf)."""
        return self._image_only(self.decoder.step(tokens, cache))


@register_preset
def text_to_image_tiny() -> TextToImageConfig:
    """A tiny model for tests: 2 layers, d_model 32, 4x4 image tokens from a codebook of 16."""
    return TextToImageConfig(text_vocab_size=32, text_length=8, image_vocab_size=16, grid=4, d_model=32, num_heads=4,
                             d_ff=64, num_layers=2, dropout=0.0)


@register_preset
def text_to_image_scenes() -> TextToImageConfig:
    """Scenes: 24 text slots + 8x8 tokens of a 512 codebook (vqvae_scenes); 4 layers,
    d_model 128, 4 heads, d_ff 512."""
    return TextToImageConfig(text_vocab_size=256, text_length=24, image_vocab_size=512, grid=8, d_model=128,
                             num_heads=4, d_ff=512, num_layers=4, dropout=0.1)


__all__ = ["TextImagePositions", "TextToImage", "TextToImageConfig", "text_to_image_scenes", "text_to_image_tiny"]
