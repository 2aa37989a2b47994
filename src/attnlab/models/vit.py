"""The Vision Transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words").

    images (B, C, H, W)
      -> PatchEmbedding                 (B, N, d)      N = (H/P)(W/P)
      -> [class token] ++ patches       (B, 1 + N, d)  (no class token: global average pooling)
      -> + position embeddings          learned (the paper) or fixed 2-D sine-cosine
      -> dropout -> pre-LN encoder      shared TransformerLayer: GELU MLP, optional drop-path, LayerScale
      -> final LayerNorm -> pool -> linear head    (B, num_classes)

``forward_features`` returns the encoder's token states (the trunk, e.g. the image
encoder of a captioner); ``forward_head`` pools and classifies. Images of another size
than ``image_size`` (divisible by the patch) get the position embeddings resized
bicubically over the patch grid, on the fly; weights saved at another grid are resized
when they are loaded into the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from attnlab.attention.patterns import FullAttention
from attnlab.layers.blocks import LayerAttention, TransformerLayer, TransformerStack
from attnlab.layers.patch import (
    PatchEmbedding,
    resize_position_embedding,
    sincos_position_embedding_2d,
    square_grid,
)
from attnlab.models.base import MAX_SIZE, AttnlabModel, LayerConfig, require_positive
from attnlab.models.registry import register_model_class, register_preset

POOLS = ("token", "mean")
POSITION_EMBEDDINGS = ("learned", "sincos")
MAX_STEM_LAYERS = 8


@dataclass(frozen=True)
class VisionTransformerConfig(LayerConfig):
    """Configuration of a :class:`VisionTransformer` (defaults: ViT-B/16 at 224x224).

    ``pool="token"`` classifies the class token's final state (the paper); ``"mean"``
    averages the patch tokens (the paper's global-average-pooling alternative, appendix
    D.3), with the final LayerNorm after the pooling as in timm, and needs no class token.
    ``drop_path`` is the stochastic-depth rate of the last layer, rising linearly from 0
    at the first. ``layer_scale_init`` (None = off) starts LayerScale's per-channel gains.
    ``stem_channels`` (empty = the plain ViT) makes the paper's hybrid: a convolutional stem
    with one 3x3 stride-2 convolution per entry (that many channels, BatchNorm, ReLU) before
    ``patch_size`` patches are cut from its feature map, so a token covers
    ``patch_pixels = 2^len(stem_channels) · patch_size`` pixels a side.
    """

    family: ClassVar[str] = "vit"

    image_size: int = 224
    patch_size: int = 16
    in_channels: int = 3
    num_classes: int = 1000
    d_model: int = 768
    num_layers: int = 12
    num_heads: int = 12
    d_ff: int = 3072
    class_token: bool = True
    pool: str = "token"
    position_embedding: str = "learned"
    dropout: float = 0.0
    activation: str = "gelu"
    norm_first: bool = True
    drop_path: float = 0.0
    layer_scale_init: float | None = None
    layer_norm_eps: float = 1e-6
    stem_channels: tuple[int, ...] = ()

    def __post_init__(self):
        super().__post_init__()
        require_positive(self, "image_size", "patch_size", "in_channels", "num_layers")
        if self.num_classes < 0:
            raise ValueError(f"num_classes={self.num_classes} must be >= 0 (0 = no head)")
        stem = self.stem_channels
        if isinstance(stem, int) and not isinstance(stem, bool):
            stem = (stem,)
        if not isinstance(stem, (list, tuple)) or len(stem) > MAX_STEM_LAYERS or not all(
                isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= MAX_SIZE for c in stem):
            raise ValueError(f"stem_channels={self.stem_channels!r} must be a list of at most {MAX_STEM_LAYERS} "
                             f"channel counts in [1, {MAX_SIZE}] (one per stride-2 convolution; empty = no stem)")
        object.__setattr__(self, "stem_channels", tuple(stem))  # JSON gives a list
        if self.image_size % self.patch_pixels:
            raise ValueError(f"image_size={self.image_size} is not divisible by patch_size={self.patch_size}"
                             + (f" times 2^{len(stem)} for the stem's stride-2 convolutions" if stem else ""))
        if self.pool not in POOLS:
            raise ValueError(f"pool={self.pool!r}; choose one of {POOLS}")
        if self.pool == "token" and not self.class_token:
            raise ValueError("pool='token' needs class_token=True; use pool='mean' without a class token")
        if self.position_embedding not in POSITION_EMBEDDINGS:
            raise ValueError(f"position_embedding={self.position_embedding!r}; choose one of {POSITION_EMBEDDINGS}")
        if self.position_embedding == "sincos" and self.d_model % 4:
            raise ValueError(f"position_embedding='sincos' needs d_model divisible by 4, got {self.d_model}")
        if not 0.0 <= self.drop_path < 1.0:
            raise ValueError(f"drop_path={self.drop_path} must be in [0, 1)")

    @property
    def patch_pixels(self) -> int:
        """The side in pixels one token stands for: the patch, times 2 per stem convolution."""
        return self.patch_size * 2 ** len(self.stem_channels)

    @property
    def grid(self) -> tuple[int, int]:
        side = self.image_size // self.patch_pixels
        return side, side

    @property
    def num_prefix_tokens(self) -> int:
        return int(self.class_token)


@register_model_class
class VisionTransformer(AttnlabModel):
    """Image classifier; see the module docstring. Parameter names::

        patch_embed.proj.{weight,bias}     class_token (1, 1, d)     position_embedding (1, prefix + N, d)
        encoder.layers.i.*                 norm.{weight,bias}        head.{weight,bias}
        patch_embed.stem.{3i}.weight (conv), patch_embed.stem.{3i+1}.* (BatchNorm)   (the hybrid only)
    """

    config_class = VisionTransformerConfig

    def __init__(self, config: VisionTransformerConfig):
        super().__init__(config)
        d = config.d_model
        self.patch_embed = PatchEmbedding(config.patch_size, config.in_channels, d, config.stem_channels)
        self.class_token = nn.Parameter(torch.zeros(1, 1, d)) if config.class_token else None
        num_positions = config.num_prefix_tokens + config.grid[0] * config.grid[1]
        if config.position_embedding == "learned":
            self.position_embedding = nn.Parameter(torch.empty(1, num_positions, d))
            nn.init.trunc_normal_(self.position_embedding, std=0.02)
        else:  # fixed; the class token's position is zero, as in MoCo v3
            table = torch.cat([torch.zeros(config.num_prefix_tokens, d), sincos_position_embedding_2d(config.grid, d)])
            self.register_buffer("position_embedding", table[None], persistent=False)
        self.dropout = nn.Dropout(config.dropout)
        last = max(config.num_layers - 1, 1)
        rates = [config.drop_path * (i / last if config.num_layers > 1 else 1.0) for i in range(config.num_layers)]
        layers = [
            TransformerLayer(d, config.num_heads, config.d_ff, dropout=config.dropout,
                             attention_dropout=config.attention_dropout, activation=config.activation,
                             norm_first=config.norm_first,
                             layer_norm_eps=config.layer_norm_eps, self_pattern=FullAttention(),
                             drop_path=rate, layer_scale_init=config.layer_scale_init)
            for rate in rates
        ]
        for layer in layers:  # the FFN's Linear layers: Xavier-uniform as the attention's, zero biases
            for linear in (layer.ffn.linear1, layer.ffn.linear2):
                nn.init.xavier_uniform_(linear.weight)
                nn.init.zeros_(linear.bias)
        self.encoder = TransformerStack(layers, d_model=d, final_norm=False)
        self.norm = nn.LayerNorm(d, eps=config.layer_norm_eps)
        self.head = nn.Linear(d, config.num_classes) if config.num_classes else None
        if self.head is not None:  # the paper's zero-initialised head
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)

    def no_weight_decay(self) -> set[str]:
        """Parameters AdamW must not decay (besides biases and norms): position embedding, class token."""
        names = {"position_embedding"} if isinstance(self.position_embedding, nn.Parameter) else set()
        return names | ({"class_token"} if self.class_token is not None else set())

    # ------------------------------------------------------------------ #
    def _positions(self, grid: tuple[int, int]) -> Tensor:
        """Position embeddings ``(1, prefix + h·w, d)`` for a patch grid (resized if needed)."""
        config = self.config
        if grid == config.grid:
            return self.position_embedding
        if config.position_embedding == "sincos":
            table = sincos_position_embedding_2d(grid, config.d_model).to(self.position_embedding)
            return torch.cat([self.position_embedding[:, : config.num_prefix_tokens], table[None]], dim=1)
        return resize_position_embedding(self.position_embedding, config.grid, grid, config.num_prefix_tokens)

    def encode(self, images: Tensor, *, need_weights: bool = False) -> tuple[Tensor, list[LayerAttention] | None]:
        """``(B, C, H, W)`` -> token states ``(B, prefix + N, d)`` (final-normed when
        ``pool='token'``) and, if asked, each layer's attention ``(B, heads, L, L)``."""
        grid = self.patch_embed.grid(images)
        x = self.patch_embed(images)  # (B, N, d)
        if self.class_token is not None:
            x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.dropout(x + self._positions(grid))
        x, weights = self.encoder(x, need_weights=need_weights)
        if self.config.pool == "token":
            x = self.norm(x)
        return x, weights

    def forward_features(self, images: Tensor) -> Tensor:
        """The trunk: ``(B, C, H, W)`` -> ``(B, prefix + N, d)`` token states."""
        return self.encode(images)[0]

    def forward_head(self, features: Tensor, *, pre_logits: bool = False) -> Tensor:
        """Pool the token states ``(B, L, d)`` and classify: ``(B, num_classes)``
        (or the pooled ``(B, d)`` with ``pre_logits`` or without a head)."""
        if self.config.pool == "token":
            pooled = features[:, 0]
        else:
            pooled = self.norm(features[:, self.config.num_prefix_tokens:].mean(dim=1))
        if pre_logits or self.head is None:
            return pooled
        return self.head(pooled)

    def forward(self, images: Tensor) -> Tensor:
        """``(B, C, H, W)`` images -> ``(B, num_classes)`` logits."""
        return self.forward_head(self.forward_features(images))

    # ------------------------------------------------------------------ #
    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        # Weights saved at another resolution: resize the learned position embedding to this grid.
        key = prefix + "position_embedding"
        saved = state_dict.get(key)
        if isinstance(self.position_embedding, nn.Parameter) and saved is not None \
                and saved.shape != self.position_embedding.shape and saved.dim() == 3 \
                and saved.shape[-1] == self.config.d_model:
            old_grid = square_grid(saved.shape[1] - self.config.num_prefix_tokens)
            state_dict[key] = resize_position_embedding(saved, old_grid, self.config.grid,
                                                        self.config.num_prefix_tokens)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)


# ---------------------------------------------------------------------- presets
@register_preset
def vit_base_patch16_224() -> VisionTransformerConfig:
    """ViT-B/16 (the paper's Table 1): 12 layers, d_model 768, MLP 3072, 12 heads;
    86,567,656 parameters with a 1000-class head."""
    return VisionTransformerConfig()


@register_preset
def vit_large_patch16_224() -> VisionTransformerConfig:
    """ViT-L/16: 24 layers, d_model 1024, MLP 4096, 16 heads (304,326,632 parameters, 1000 classes)."""
    return VisionTransformerConfig(d_model=1024, num_layers=24, num_heads=16, d_ff=4096)


@register_preset
def vit_huge_patch14_224() -> VisionTransformerConfig:
    """ViT-H/14: 32 layers, d_model 1280, MLP 5120, 16 heads, 14x14 patches (632,045,800 parameters)."""
    return VisionTransformerConfig(patch_size=14, d_model=1280, num_layers=32, num_heads=16, d_ff=5120)


@register_preset
def vit_tiny_patch4_28() -> VisionTransformerConfig:
    """A small ViT for 28x28 grey images (MNIST, Fashion-MNIST): 4x4 patches (a 7x7 grid),
    6 layers, d_model 128, 4 heads, MLP 256, 10 classes (about 0.8M parameters)."""
    return VisionTransformerConfig(image_size=28, patch_size=4, in_channels=1, num_classes=10, d_model=128,
                                   num_layers=6, num_heads=4, d_ff=256)


@register_preset
def vit_tiny_patch7_28() -> VisionTransformerConfig:
    """A smaller, faster ViT for 28x28 grey images: 7x7 patches (a 4x4 grid), 4 layers,
    d_model 96, 4 heads, MLP 192, 10 classes."""
    return VisionTransformerConfig(image_size=28, patch_size=7, in_channels=1, num_classes=10, d_model=96,
                                   num_layers=4, num_heads=4, d_ff=192)


@register_preset
def vit_hybrid_tiny_28() -> VisionTransformerConfig:
    """The paper's hybrid for 28x28 grey images: a convolutional stem of two 3x3 stride-2
    convolutions (32 and 64 channels, BatchNorm, ReLU) to a 7x7 feature map whose 1x1
    patches are the 49 tokens; 4 layers, d_model 64, 4 heads, MLP 128, 10 classes."""
    return VisionTransformerConfig(image_size=28, patch_size=1, in_channels=1, num_classes=10, d_model=64,
                                   num_layers=4, num_heads=4, d_ff=128, stem_channels=(32, 64))
