"""Image captioning: an image encoder + the shared Transformer text decoder with cross-attention.

    images (B, 3, H, W), pixels in [-1, 1]
      -> image encoder: "vit"  the ViT trunk (VisionTransformer.forward_features, no class
                               token, final LayerNorm): one memory vector per P x P patch
                        "cnn"  a small strided CNN (log2 P stride-2 conv blocks) + 2-D
                               sine-cosine positions: one vector per P x P cell
      -> memory (B, (H/P)(W/P), d)        (no padding: memory_mask is None)
      -> TokenDecoder (the encoder-decoder's own part: embedding + positions + causal
         stack with cross-attention + tied head) -> next-word logits (B, T, V)

Training is teacher-forced (``model(images, tgt_in)``); generation goes through
:mod:`attnlab.generation` (greedy, beam search) by the EncoderDecoder protocol
(``encode`` / ``decode`` / ``new_cache`` / ``max_output_length``). ``decode`` -- the
road search takes -- never proposes PAD, BOS or UNK, nor EOS as the first word (their
logits are -inf there; the teacher-forced ``forward`` is not masked), so a caption cannot
come out empty, as ``[UNK]`` tokens or as padding; every caption is cut at ``max_positions`` tokens, so a model that never
emits EOS still stops.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from attnlab.attention.cache import StackCache, StaticKVCache
from attnlab.layers.embedding import TokenEmbedding
from attnlab.layers.patch import sincos_position_embedding_2d, strided_conv_layers
from attnlab.layers.positional import build_positional
from attnlab.models.base import AttnlabModel, StackConfig, check_images, check_token_ids
from attnlab.models.parts import TokenDecoder, build_stack
from attnlab.models.registry import register_model_class, register_preset
from attnlab.models.vit import VisionTransformer, VisionTransformerConfig

IMAGE_ENCODERS = ("vit", "cnn")


@dataclasses.dataclass(frozen=True)
class CaptionerConfig(StackConfig):
    """Configuration of a :class:`Captioner`.

    The stack fields (``d_model``, ``num_heads``, ``d_ff``, dropout, ...) are shared by the
    image encoder and the decoder; ``max_positions`` bounds a caption (tokens incl. EOS).
    ``image_encoder`` is "vit" (``num_encoder_layers`` pre-LN layers over ``patch_size``
    patches) or "cnn" (``patch_size`` must be a power of two). ``unk_id`` is the id generation
    never proposes (with PAD and BOS).
    """

    family: ClassVar[str] = "captioner"
    pattern_fields: ClassVar[dict[str, bool]] = {"decoder_attention": True}

    vocab_size: int = 64
    image_size: int = 32
    patch_size: int = 4
    in_channels: int = 3
    image_encoder: str = "vit"
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    decoder_attention: str | dict[str, Any] = "causal"
    positional: str = "learned"
    max_positions: int = 32
    norm_first: bool = True
    activation: str = "gelu"
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3

    def __post_init__(self):
        super().__post_init__()
        for name in ("vocab_size", "image_size", "patch_size", "in_channels", "num_decoder_layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.num_encoder_layers < 0:
            raise ValueError(f"num_encoder_layers={self.num_encoder_layers} must be >= 0")
        if self.image_encoder not in IMAGE_ENCODERS:
            raise ValueError(f"image_encoder={self.image_encoder!r}; choose one of {IMAGE_ENCODERS}")
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size={self.image_size} is not divisible by patch_size={self.patch_size}")
        if self.image_encoder == "cnn" and self.patch_size & (self.patch_size - 1):
            raise ValueError(f"image_encoder='cnn' needs patch_size a power of two, got {self.patch_size}")
        if self.d_model % 4:
            raise ValueError(f"d_model={self.d_model} must be divisible by 4 (2-D sine-cosine positions)")
        if self.image_encoder == "vit" and self.num_encoder_layers < 1:
            raise ValueError("image_encoder='vit' needs num_encoder_layers >= 1")
        for name in ("pad_id", "bos_id", "eos_id", "unk_id"):
            if not 0 <= getattr(self, name) < self.vocab_size:
                raise ValueError(f"{name}={getattr(self, name)} is outside the vocabulary [0, {self.vocab_size})")

    @property
    def grid(self) -> tuple[int, int]:
        side = self.image_size // self.patch_size
        return side, side


class ConvImageEncoder(nn.Module):
    """A small CNN: log2(P) blocks of [3x3 conv stride 2, GroupNorm, GELU] from ``in_channels``
    to ``d_model`` channels, then a 1x1 projection and fixed 2-D sine-cosine positions;
    ``(B, C, H, W)`` -> ``(B, (H/P)(W/P), d_model)``."""

    def __init__(self, config: CaptionerConfig):
        super().__init__()
        d, blocks = config.d_model, int(math.log2(config.patch_size))
        widths = [d if i == blocks - 1 else max(16, d // 2 ** (blocks - 1 - i)) for i in range(blocks)]
        layers = strided_conv_layers(config.in_channels, widths, norm="group", activation="gelu", bias=True)
        layers.append(nn.Conv2d(widths[-1] if widths else config.in_channels, d, 1))
        self.body = nn.Sequential(*layers)
        self.register_buffer("positions", sincos_position_embedding_2d(config.grid, d)[None], persistent=False)
        self.norm = nn.LayerNorm(d, eps=config.layer_norm_eps)

    def forward(self, images: Tensor) -> Tensor:
        x = self.body(images).flatten(2).transpose(1, 2)  # (B, N, d)
        return self.norm(x + self.positions)


@register_model_class
class Captioner(AttnlabModel):
    """Image encoder + :class:`~attnlab.models.parts.TokenDecoder`; see the module docstring.

    ``model(images, tgt_in_ids)`` -> logits ``(B, T, V)``.
    """

    config_class = CaptionerConfig
    default_beam: ClassVar[int] = 3  # what `attnlab caption` (and `attnlab compile`) take without --beam

    def __init__(self, config: CaptionerConfig):
        super().__init__(config)
        c = config
        if c.image_encoder == "vit":
            self.image_encoder = VisionTransformer(VisionTransformerConfig(
                image_size=c.image_size, patch_size=c.patch_size, in_channels=c.in_channels, num_classes=0,
                d_model=c.d_model, num_layers=c.num_encoder_layers, num_heads=c.num_heads, d_ff=c.d_ff,
                class_token=False, pool="mean", position_embedding="sincos", dropout=c.dropout,
                attention_dropout=c.attention_dropout, layer_norm_eps=c.layer_norm_eps))
        else:
            self.image_encoder = ConvImageEncoder(c)
        self.decoder = TokenDecoder(TokenEmbedding(c.vocab_size, c.d_model, padding_idx=c.pad_id),
                                    build_positional(c.positional, c.d_model, c.max_positions),
                                    build_stack(c, c.num_decoder_layers, c.decoder_attention, cross_attention=True,
                                                final_norm=c.norm_first),
                                    dropout=c.dropout)
        for layer in self.decoder.layers:
            for linear in (layer.ffn.linear1, layer.ffn.linear2):
                nn.init.xavier_uniform_(linear.weight)
                nn.init.zeros_(linear.bias)
        banned = torch.zeros(c.vocab_size, dtype=torch.bool)
        banned[[c.pad_id, c.bos_id, c.unk_id]] = True
        self.register_buffer("banned", banned, persistent=False)

    # -- the image side -------------------------------------------------------------------
    def check_images(self, images: Tensor) -> None:
        check_images(images, self.config.in_channels, self.config.image_size)

    def encode(self, images: Tensor) -> tuple[Tensor, None]:
        """``(B, C, H, W)`` -> ``(memory (B, N, d), None)``: one vector per image cell, none padded."""
        self.check_images(images)
        if isinstance(self.image_encoder, VisionTransformer):
            return self.image_encoder.norm(self.image_encoder.forward_features(images)), None
        return self.image_encoder(images), None

    # -- the text side (the EncoderDecoder protocol) --------------------------------------------
    def max_output_length(self) -> int:
        return self.config.max_positions

    def new_cache(self, capacity: int = 64) -> StackCache:
        return self.decoder.new_growing_cache(capacity)

    # -- the step path (search's fast road; generation/aot.py compiles it) ----------------------
    def new_step_cache(self, memory: Tensor, *, rows_per_source: int = 1, capacity: int = 64,
                       fixed_shape: bool = False) -> StaticKVCache:
        """A preallocated cache for :meth:`decode_step` over ``rows_per_source`` consecutive
        rows per image of the encoded ``memory`` (the translation decoder's
        :meth:`~attnlab.models.transformer.Transformer.new_step_cache`): the cross-attention
        keys and values computed once per image, for at most ``max_positions`` positions (a
        caption is never longer, so a larger ``capacity`` is cut to it)."""
        capacity = min(capacity, self.config.max_positions)
        return self.decoder.new_search_cache(memory, rows_per_source, capacity, fixed_shape=fixed_shape)

    def decode_step(self, tokens: Tensor, cache: StaticKVCache, memory_mask: Tensor | None = None) -> Tensor:
        """One token per row ``(R,)`` -> next-word logits ``(R, V)``: :meth:`decode` with a cache
        for one position (PAD, BOS and UNK -inf, EOS -inf at a row's first position), through
        the decoder's step path (no argument checks or host syncs). ``memory_mask``: None (a
        captioner's memory has no padding), or all true (an ahead-of-time package's input)."""
        first = cache.positions == 0  # before the step moves them
        logits = self.decoder.step(tokens, cache, memory_mask)
        logits.masked_fill_(self.banned, float("-inf"))
        logits[:, self.config.eos_id].masked_fill_(first, float("-inf"))
        return logits

    def _decode(self, tgt_ids: Tensor, memory: Tensor | None, cache, need_weights: bool):
        check_token_ids(tgt_ids, self.config.vocab_size, "tgt_ids")
        offset = 0 if cache is None else cache.length
        end = offset + tgt_ids.shape[1]
        if end > self.config.max_positions:
            raise ValueError(f"caption position {end - 1} is beyond max_positions={self.config.max_positions}")
        positions = torch.arange(offset, end, device=tgt_ids.device)
        return self.decoder(tgt_ids, positions, memory=memory, cache=cache, need_weights=need_weights,
                            positions_bound=end)

    def decode(self, tgt_ids: Tensor, memory: Tensor | None, memory_mask: Tensor | None = None, *, cache=None,
               need_weights: bool = False):
        """Next-word logits ``(B, T, V)`` for generation: PAD, BOS and UNK get -inf, and EOS at
        the first position (no empty caption). With a ``cache`` the ids continue the cached
        ones (``memory`` may then be None)."""
        if memory_mask is not None:
            raise ValueError("a captioner's memory has no padding; memory_mask must be None")
        first = cache is None or cache.length == 0
        out = self._decode(tgt_ids, memory, cache, need_weights)
        logits = out[0] if need_weights else out
        logits = logits.masked_fill(self.banned, float("-inf"))
        if first and logits.shape[1]:  # no empty caption: EOS cannot come first
            logits[:, 0, self.config.eos_id] = float("-inf")
        return (logits, out[1]) if need_weights else logits

    def forward(self, images: Tensor, tgt_in_ids: Tensor) -> Tensor:
        """Teacher-forced logits ``(B, T, V)`` (not masked: the training loss sees every class)."""
        memory, _ = self.encode(images)
        return self._decode(tgt_in_ids, memory, None, False)

    def attention_maps(self, images: Tensor, tgt_in_ids: Tensor) -> dict[str, list[Tensor]]:
        """Every layer's attention, by group: "image encoder self" (the ViT trunk's patches;
        none for the CNN), "decoder self" and "cross", each a list of ``(B, H, Lq, Lk)``."""
        self.check_images(images)
        groups: dict[str, list[Tensor]] = {}
        if isinstance(self.image_encoder, VisionTransformer):
            states, weights = self.image_encoder.encode(images, need_weights=True)
            memory = self.image_encoder.norm(states)
            groups["image encoder self"] = [w.self_attn for w in weights]
        else:
            memory = self.image_encoder(images)
        _, weights = self._decode(tgt_in_ids, memory, None, True)
        groups["decoder self"] = [w.self_attn for w in weights]
        groups["cross"] = [w.cross_attn for w in weights]
        return groups

    def cross_attention(self, images: Tensor, tgt_in_ids: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Teacher-forced logits and each decoder layer's cross-attention ``(B, H, T, N)``:
        row t is where the word at output position t looked (N image cells, row-major)."""
        memory, _ = self.encode(images)
        logits, weights = self._decode(tgt_in_ids, memory, None, True)
        return logits, [w.cross_attn for w in weights]


# -- presets ---------------------------------------------------------------------------
@register_preset
def captioner_tiny() -> CaptionerConfig:
    """A tiny captioner for tests: ViT encoder 1 layer + decoder 1 layer, d_model 32, 32x32 images."""
    return CaptionerConfig(d_model=32, num_heads=4, d_ff=64, num_encoder_layers=1, num_decoder_layers=1, dropout=0.0)


@register_preset
def captioner_scenes() -> CaptionerConfig:
    """Synthetic scenes on a CPU: 32x32 images in 4x4 patches (an 8x8 grid), ViT encoder 3
    layers + decoder 3 layers, d_model 128, 4 heads, d_ff 256 (about 1.0M parameters)."""
    return CaptionerConfig(d_model=128, num_heads=4, d_ff=256, num_encoder_layers=3, num_decoder_layers=3,
                           dropout=0.1, max_positions=48)


__all__ = ["Captioner", "CaptionerConfig", "ConvImageEncoder", "captioner_scenes", "captioner_tiny"]
