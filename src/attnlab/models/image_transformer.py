"""The Image Transformer (Parmar et al. 2018): an image as a sequence of sub-pixels.

One position per sub-pixel (an H×W×C image is H·W·C positions, row by row, column by
column, channel by channel); the input at a position is the embedding of the *previous*
sub-pixel in the generation order (intensity + 256·channel, scaled by √d; zeros at the
first), plus row, column and channel positions of the sub-pixel to predict, plus a class
embedding at every position when the model is class-conditional (§3.1, §4). A causal stack
of the shared layers (:func:`~attnlab.models.parts.build_stack`) with a local pattern —
``local_1d`` over the raster, or ``local_2d`` over the H × W·C grid, whose generation order
is blocks in raster order (:func:`~attnlab.attention.local.block_raster_order`) — and a
256-way softmax per sub-pixel.

Super-resolution (§4.2): with ``low_resolution`` set, an encoder of full self-attention
reads the low-resolution image (same embedding scheme, no shift) and every decoder layer
attends to it (encoder–decoder attention). Optionally (``low_res_input``, not in the paper)
each decoder input also gets an embedding of the low-resolution sub-pixel that covers it
(nearest-neighbour upsampling): a path to the aligned low-resolution value that the decoder
does not have to learn through attention.

Images are ``(B, C, H, W)`` integer tensors in [0, 255], as :mod:`attnlab.data.images`
gives them; logits come back as ``(B, C, H, W, 256)``. Generation: :meth:`new_cache`,
:meth:`prefill` (the given sub-pixels, in generation order, into an empty cache) and
:meth:`step` (one sub-pixel per row) — the same stack as :meth:`forward`, through a static
cache that keeps only the pattern's window; :mod:`attnlab.generation.images` samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.attention.cache import StaticKVCache
from attnlab.attention.local import Local2D, block_raster_order
from attnlab.attention.patterns import build_pattern
from attnlab.layers.embedding import TokenEmbedding
from attnlab.layers.positional import sinusoidal_table
from attnlab.linear import Linear
from attnlab.models.base import AttnlabModel, StackConfig
from attnlab.models.parts import build_stack
from attnlab.models.registry import register_model_class, register_preset

INTENSITIES = 256


@dataclass(frozen=True)
class ImageTransformerConfig(StackConfig):
    """Configuration of an :class:`ImageTransformer`.

    ``height``, ``width``, ``channels``: the image (1 = grey, 3 = RGB). ``attention``: the
    decoder's causal pattern spec, e.g. ``{"name": "local_1d", "block_length": 256}`` or
    ``{"name": "local_2d", "query_shape": [8, 16], "memory_flange": [8, 16]}`` (its raster
    width W·C is filled in by the model; the query shape must tile the H × W·C grid), or
    "causal" (full attention). ``positional``: "learned" or "sinusoidal" row/column/channel
    positions, or "none". ``num_classes``: class-conditional when > 0. ``low_resolution``:
    super-resolution from a ``low_resolution``² image when > 0 (must divide height and
    width), with ``num_encoder_layers`` full-attention encoder layers. ``low_res_positions``:
    the encoder's positions, "own" (a separate table over the low-resolution grid) or
    "shared" (the decoder's table at the centre of the block of full-resolution pixels each
    low-resolution pixel covers: queries and keys then start in one coordinate frame).
    ``low_res_input``: also add to every decoder input the embedding (a table of its own) of
    the low-resolution sub-pixel of the same channel whose block covers it.
    """

    family: ClassVar[str] = "image_transformer"
    pattern_fields: ClassVar[dict[str, bool]] = {"attention": True}

    height: int = 32
    width: int = 32
    channels: int = 3
    d_model: int = 512
    num_heads: int = 4
    d_ff: int = 2048
    num_layers: int = 12
    dropout: float = 0.3
    positional: str = "learned"
    norm_first: bool = True
    attention: str | dict[str, Any] = "causal"
    num_classes: int = 0
    low_resolution: int = 0
    num_encoder_layers: int = 0
    low_res_positions: str = "own"
    low_res_input: bool = False

    def __post_init__(self):
        super().__post_init__()
        for name in ("height", "width", "num_layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.channels not in (1, 3):
            raise ValueError(f"channels={self.channels} must be 1 (grey) or 3 (RGB)")
        for name in ("num_classes", "low_resolution", "num_encoder_layers"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 0")
        if self.low_resolution and (self.height % self.low_resolution or self.width % self.low_resolution):
            raise ValueError(f"low_resolution={self.low_resolution} must divide height={self.height} and "
                             f"width={self.width}")
        if self.low_res_positions not in ("own", "shared"):
            raise ValueError(f"low_res_positions={self.low_res_positions!r} must be 'own' or 'shared'")
        if self.low_res_input and not self.low_resolution:
            raise ValueError("low_res_input=True needs a super-resolution model (low_resolution > 0)")
        if self.low_resolution and not self.num_encoder_layers:
            raise ValueError("super-resolution (low_resolution > 0) needs num_encoder_layers >= 1")
        self.decoder_pattern()  # the query shape must tile the image

    @property
    def sequence_length(self) -> int:
        return self.height * self.width * self.channels

    def decoder_pattern(self):
        """The decoder's pattern, with a local_2d pattern's raster width set to W·C."""
        pattern = build_pattern(self.attention)
        if isinstance(pattern, Local2D):
            raster = self.width * self.channels
            if pattern.width is not None and pattern.width != raster:
                raise ValueError(f"attention: local_2d width={pattern.width} is not this image's raster width "
                                 f"W·C = {raster}; leave it out")
            if self.height % pattern.query_shape[0] or raster % pattern.query_shape[1]:
                raise ValueError(f"attention: query_shape {list(pattern.query_shape)} does not tile the "
                                 f"{self.height}×{raster} grid of a {self.height}×{self.width}×{self.channels} "
                                 "image (rows must divide H, columns W·C)")
            pattern = Local2D(pattern.query_shape, pattern.memory_flange, masked=pattern.masked, width=raster)
        return pattern



class RasterPositions(nn.Module):
    """Row, column and channel positions of sub-pixels: three learned tables summed, or
    sinusoids of the row, column and channel in three slices of the width (as
    tensor2tensor's ``add_timing_signal_nd``); "none" adds nothing."""

    def __init__(self, kind: str, height: int, width: int, channels: int, d_model: int):
        super().__init__()
        self.kind = kind
        self.sizes = (height, width, channels)
        if kind == "learned":
            self.tables = nn.ParameterList([nn.Parameter(torch.randn(n, d_model) * 0.02) for n in self.sizes])
        elif kind == "sinusoidal":
            slices = [d_model // 3 // 2 * 2] * 2
            slices.append(d_model - sum(slices))
            table = torch.zeros(sum(self.sizes), d_model)
            start_row, start_col = 0, 0
            for n, size in zip(self.sizes, slices):
                table[start_row:start_row + n, start_col:start_col + size] = sinusoidal_table(n, size)
                start_row, start_col = start_row + n, start_col + size
            self.register_buffer("table", table, persistent=False)

    def forward(self, rows: Tensor, cols: Tensor, channels: Tensor) -> Tensor | None:
        if self.kind == "learned":
            return self.tables[0][rows] + self.tables[1][cols] + self.tables[2][channels]
        if self.kind == "sinusoidal":
            height, width, _ = self.sizes
            return self.table[rows] + self.table[height + cols] + self.table[height + width + channels]
        return None


class _ImageEmbedder(nn.Module):
    """Sub-pixel values in a fixed order -> ``(B, L, d)`` inputs (optionally shifted right)."""

    def __init__(self, config: ImageTransformerConfig, height: int, width: int, order: Tensor | None, *,
                 shared_positions: tuple[RasterPositions, int, int] | None = None):
        """``shared_positions`` ``(table, row_factor, col_factor)``: look positions up in
        another embedder's table (not a parameter of this one), at row ``r·f + f//2`` and
        column ``c·f + f//2`` of its grid for this grid's (r, c)."""
        super().__init__()
        c = config
        self.embed = TokenEmbedding(INTENSITIES * c.channels, c.d_model)  # intensity + 256·channel, × √d
        length = height * width * c.channels
        raster = torch.arange(length) if order is None else order  # raster index of each sequence position
        row = torch.div(raster, width * c.channels, rounding_mode="floor")
        col = torch.div(raster, c.channels, rounding_mode="floor") % width
        if shared_positions is None:
            self.positions = RasterPositions(c.positional, height, width, c.channels, c.d_model)
            self._shared_positions = None
        else:
            table, row_factor, col_factor = shared_positions
            self.positions = None
            self._shared_positions = (table,)  # a tuple: the owner registers it, not this module
            row, col = row * row_factor + row_factor // 2, col * col_factor + col_factor // 2
        self.register_buffer("order", raster, persistent=False)
        self.register_buffer("inverse", raster.argsort(), persistent=False)
        self.register_buffer("channel", raster % c.channels, persistent=False)
        self.register_buffer("row", row, persistent=False)
        self.register_buffer("col", col, persistent=False)
        self.dropout = nn.Dropout(c.dropout)

    def to_sequence(self, images: Tensor) -> Tensor:
        """``(B, C, H, W)`` -> ``(B, L)`` long values in this embedder's order."""
        raster = images.permute(0, 2, 3, 1).reshape(images.shape[0], -1).long()  # row, column, channel
        return raster.index_select(1, self.order)

    def to_image(self, sequence: Tensor, channels: int, height: int, width: int) -> Tensor:
        """``(B, L, ...)`` in this order -> ``(B, C, H, W, ...)``."""
        raster = sequence.index_select(1, self.inverse)
        raster = raster.reshape(sequence.shape[0], height, width, channels, *sequence.shape[2:])
        return raster.permute(0, 3, 1, 2, *range(4, raster.dim()))

    def position_vectors(self, start: int, stop: int) -> Tensor | None:
        table = self.positions if self._shared_positions is None else self._shared_positions[0]
        return table(self.row[start:stop], self.col[start:stop], self.channel[start:stop])

    def forward(self, values: Tensor, *, shift: bool, extra: Tensor | None = None, start: int = 0) -> Tensor:
        """Inputs ``(B, T, d)`` of positions ``start .. start+T-1``; ``extra`` ``(B, 1, d)``
        (added at every position) or ``(B, L, d)`` (one vector per position of the sequence).

        ``shift=False``: ``values`` ``(B, T)`` are those positions' own values (an encoder).
        ``shift=True``: ``values`` are the values *before* them, of positions ``start-1 ..
        start+T-2`` (the input is the previous sub-pixel); at position 0 there is none, the
        input is zeros and ``values[:, 0]`` is not read."""
        batch, count = values.shape
        first = start - 1 if shift else start
        if first < 0:  # entry 0 stands for "before the first sub-pixel": any channel, it is replaced by zeros
            channels = torch.cat([self.channel[:1], self.channel[:count - 1]])
        else:
            channels = self.channel[first:first + count]
        x = self.embed(values + INTENSITIES * channels)
        if first < 0:
            x = torch.cat([x.new_zeros(batch, 1, x.shape[-1]), x[:, 1:]], dim=1)
        positions = self.position_vectors(start, start + count)
        if positions is not None:
            x = x + positions
        if extra is not None:
            x = x + (extra if extra.shape[1] == 1 else extra[:, start:start + count])
        return self.dropout(x) if self.training else x


@register_model_class
class ImageTransformer(AttnlabModel):
    """Autoregressive image model over sub-pixels (optionally class-conditional, or a
    super-resolution decoder over an encoded low-resolution image).

    ``model(images, labels=None, low_res=None)``: ``(B, C, H, W)`` integers in [0, 255]
    -> logits ``(B, C, H, W, 256)``; the logits of a sub-pixel depend only on the sub-pixels
    before it in the generation order (and the label / low-resolution image).
    """

    config_class = ImageTransformerConfig

    def __init__(self, config: ImageTransformerConfig):
        super().__init__(config)
        c = config
        pattern = c.decoder_pattern()
        order = None
        if isinstance(pattern, Local2D):  # generate in 2D blocks: the sequence follows that order
            order = block_raster_order(c.height, c.width * c.channels, pattern.query_shape)
        self.embedder = _ImageEmbedder(c, c.height, c.width, order)
        self.class_embed = nn.Embedding(c.num_classes, c.d_model) if c.num_classes else None
        self.stack = build_stack(c, c.num_layers, pattern, cross_attention=bool(c.low_resolution), final_norm=c.norm_first)
        self.head = Linear(c.d_model, INTENSITIES)
        if c.low_resolution:
            shared = None
            if c.low_res_positions == "shared":
                shared = (self.embedder.positions, c.height // c.low_resolution, c.width // c.low_resolution)
            self.low_res_embedder = _ImageEmbedder(c, c.low_resolution, c.low_resolution, None,
                                                   shared_positions=shared)
            self.encoder = build_stack(c, c.num_encoder_layers, "full", cross_attention=False, final_norm=c.norm_first)
        else:
            self.low_res_embedder = self.encoder = None
        self.low_res_input_embed = None
        if c.low_res_input:  # each decoder position -> its low-resolution sub-pixel, in raster order
            self.low_res_input_embed = TokenEmbedding(INTENSITIES * c.channels, c.d_model)
            row = torch.div(self.embedder.row, c.height // c.low_resolution, rounding_mode="floor")
            col = torch.div(self.embedder.col, c.width // c.low_resolution, rounding_mode="floor")
            self.register_buffer("low_res_index", (row * c.low_resolution + col) * c.channels + self.embedder.channel,
                                 persistent=False)

    # -- inputs ------------------------------------------------------------------------------
    def check_images(self, images: Tensor, name: str = "images", *, size: tuple[int, int] | None = None) -> Tensor:
        """Raise ValueError unless ``images`` is ``(B, C, H, W)`` integers in [0, 255] of this
        model's shape (or ``size``); returns them as long."""
        c = self.config
        height, width = size or (c.height, c.width)
        if not isinstance(images, Tensor) or images.dim() != 4:
            shape = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
            raise ValueError(f"{name} must be a (batch, channels, height, width) tensor, got {shape}")
        if tuple(images.shape[1:]) != (c.channels, height, width):
            raise ValueError(f"{name} have shape {tuple(images.shape[1:])} (C, H, W), but this model takes "
                             f"{(c.channels, height, width)}")
        if images.is_floating_point() or images.dtype == torch.bool or images.is_complex():
            raise ValueError(f"{name} must hold integer intensities 0..255, got dtype {images.dtype}")
        if images.numel():
            low, high = int(images.min()), int(images.max())
            if low < 0 or high > 255:
                raise ValueError(f"{name} hold the value {low if low < 0 else high}, outside the intensities 0..255")
        return images.long()

    def _conditioning(self, labels: Tensor | None, low_res: Tensor | None, batch: int) -> Tensor | None:
        """What the inputs add besides token and position: ``(B, 1, d)`` (the class) or
        ``(B, L, d)`` (with ``low_res_input``, the upsampled low-resolution image), or None.
        ``low_res``: the checked low-resolution images (see :meth:`check_low_res`)."""
        extra = self._class_vectors(labels, batch)
        if self.low_res_input_embed is not None:
            values = self.low_res_embedder.to_sequence(low_res).index_select(1, self.low_res_index)
            upsampled = self.low_res_input_embed(values + INTENSITIES * self.embedder.channel)
            extra = upsampled if extra is None else extra + upsampled
        return extra

    def _class_vectors(self, labels: Tensor | None, batch: int) -> Tensor | None:
        c = self.config
        if not c.num_classes:
            if labels is not None:
                raise ValueError("this model is not class-conditional (num_classes=0); give no labels")
            return None
        if labels is None:
            raise ValueError(f"this model is class-conditional: give labels in [0, {c.num_classes})")
        labels = torch.as_tensor(labels, device=self.head.weight.device).long().reshape(-1)
        if labels.shape[0] != batch:
            raise ValueError(f"{labels.shape[0]} labels for {batch} images")
        if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= c.num_classes):
            bad = int(labels.min()) if int(labels.min()) < 0 else int(labels.max())
            raise ValueError(f"label {bad} is outside the classes [0, {c.num_classes})")
        return self.class_embed(labels)[:, None, :]

    def check_low_res(self, low_res: Tensor | None, batch: int) -> Tensor | None:
        """The low-resolution images as long (None for a model without them); ValueError
        when they are missing, not wanted, or of the wrong shape, count or values."""
        c = self.config
        if not c.low_resolution:
            if low_res is not None:
                raise ValueError("this model is not a super-resolution model; give no low-resolution image")
            return None
        if low_res is None:
            raise ValueError(f"this super-resolution model needs the {c.low_resolution}×{c.low_resolution} "
                             "low-resolution images")
        low_res = self.check_images(low_res, "low-resolution images", size=(c.low_resolution, c.low_resolution))
        if low_res.shape[0] != batch:
            raise ValueError(f"{low_res.shape[0]} low-resolution images for {batch} images")
        return low_res

    def encode(self, low_res: Tensor | None) -> Tensor | None:
        """The encoder's memory ``(B, h·w·C, d)`` of checked low-resolution images (None without)."""
        if low_res is None:
            return None
        memory, _ = self.encoder(self.low_res_embedder(self.low_res_embedder.to_sequence(low_res), shift=False))
        return memory

    # -- the full forward ------------------------------------------------------------------------
    def forward(self, images: Tensor, labels: Tensor | None = None, low_res: Tensor | None = None, *,
                need_weights: bool = False):
        """Logits ``(B, C, H, W, 256)`` of every sub-pixel given the ones before it."""
        images = self.check_images(images)
        batch = images.shape[0]
        values = self.embedder.to_sequence(images)  # (B, L) in generation order
        previous = torch.cat([values.new_zeros(batch, 1), values[:, :-1]], 1)  # shifted right; the first is not read
        low_res = self.check_low_res(low_res, batch)
        x = self.embedder(previous, shift=True, extra=self._conditioning(labels, low_res, batch))
        hidden, weights = self.stack(x, memory=self.encode(low_res), need_weights=need_weights,
                                     geometry=(self.config.height, self.config.width, self.config.channels))
        logits = self.embedder.to_image(self.head(hidden), *self.image_shape)
        return (logits, weights) if need_weights else logits

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)``."""
        return self.config.channels, self.config.height, self.config.width

    def images_to_sequence(self, images: Tensor) -> Tensor:
        """``(B, C, H, W)`` -> ``(B, L)`` values in the generation order."""
        return self.embedder.to_sequence(self.check_images(images))

    def sequence_to_images(self, sequence: Tensor) -> Tensor:
        """``(B, L)`` values in the generation order -> ``(B, C, H, W)``."""
        return self.embedder.to_image(sequence, *self.image_shape)

    def given_prefix(self, keep_rows: int) -> int:
        """How many sub-pixels the top ``keep_rows`` rows are, when they are the start of the
        generation order; ValueError otherwise (local 2D: rows must fill whole query blocks)."""
        count = keep_rows * self.config.width * self.config.channels
        if not bool((self.embedder.order[:count] < count).all()):
            block = self.stack.layers[0].self_attn.pattern.query_shape[0]
            raise ValueError(f"the top {keep_rows} rows are not the first sub-pixels this model generates: with "
                             f"local 2D attention keep a multiple of the query block height {block}")
        return count

    def loss(self, images: Tensor, labels: Tensor | None = None, low_res: Tensor | None = None) -> Tensor:
        """Mean negative log-likelihood per sub-pixel, in nats."""
        logits = self(images, labels, low_res)
        return F.cross_entropy(logits.reshape(-1, INTENSITIES).float(), images.reshape(-1).long())

    # -- generation: the same stack through a static cache --------------------------------------
    def new_cache(self, batch: int, capacity: int | None = None, *, fixed_shape: bool = False) -> StaticKVCache:
        """An empty cache for ``batch`` images (capacity: the whole sequence); ``fixed_shape``:
        see :class:`~attnlab.attention.cache.StaticKVCache` (every step the same shapes, for a
        compiled step, :mod:`attnlab.generation.compiled`)."""
        capacity = self.config.sequence_length if capacity is None else capacity
        return self.stack.new_static_cache(batch, capacity, fixed_shape=fixed_shape)

    @torch.inference_mode()
    def prefill(self, values: Tensor, cache: StaticKVCache, labels: Tensor | None = None,
                low_res: Tensor | None = None) -> Tensor:
        """The first T sub-pixels ``(B, T)`` in generation order (T may be 0) into an empty
        cache; returns the logits ``(B, 256)`` of sub-pixel T. The label's embedding and the
        encoded low-resolution image stay in the cache for :meth:`step`."""
        length = self.config.sequence_length
        if cache.length != 0:
            raise ValueError(f"prefill needs an empty cache, this one holds {cache.length} positions")
        batch, given = values.shape
        if given >= length:
            raise ValueError(f"{given} given sub-pixels leave nothing to generate in a sequence of {length}")
        if values.numel() and (int(values.min()) < 0 or int(values.max()) > 255):
            raise ValueError("given sub-pixels must be intensities 0..255")
        low_res = self.check_low_res(low_res, batch)
        extra = self._conditioning(labels, low_res, batch)
        # What every step adds to its token embedding, computed once: positions (+ class,
        # + upsampled low-resolution image).
        added = self.embedder.position_vectors(0, length)
        if added is None:
            added = self.head.weight.new_zeros(length, self.config.d_model)
        cache.set_conditioning(added if extra is None else added + extra)  # (L, d) or (B, L, d)
        inputs = torch.cat([values.new_zeros(batch, 1), values], 1).long()  # the first is not read
        x = self.embedder(inputs, shift=True, extra=extra)
        hidden, _ = self.stack(x, memory=self.encode(low_res), cache=cache)
        return self.head(hidden[:, -1])

    @torch.inference_mode()
    def step(self, values: Tensor, cache: StaticKVCache) -> Tensor:
        """The sub-pixel just generated ``(B,)`` (for position ``cache.length - 1``) ->
        logits ``(B, 256)`` of the next one, extending ``cache`` (the stack's step path)."""
        embedder = self.embedder
        if cache.fixed_shape:
            # The position as the device tensor the cache writes at (no host number, so a
            # compiled step is the same code at every position): the same sums, gathered.
            position = cache.write_index  # (1,)
            x = embedder.embed(values.long()[:, None] + INTENSITIES * embedder.channel.index_select(0, position - 1))
            x = x + cache.conditioning.index_select(-2, position)
        else:
            position = cache.length
            x = embedder.embed(values.long()[:, None] + INTENSITIES * embedder.channel[position - 1])
            x = x + cache.conditioning[..., position:position + 1, :]  # (the same sum as forward's)
        return self.head(self.stack.step(x, cache)[:, 0])


# -- presets ---------------------------------------------------------------------------------
def _local_1d(block: int) -> dict[str, Any]:
    return {"name": "local_1d", "block_length": block}


@register_preset
def imagetransformer_cifar10_base() -> ImageTransformerConfig:
    """tensor2tensor's ``imagetransformer_cifar10_base`` (Parmar et al. 2018, §5): 32×32×3,
    12 layers, d=512, FFN 2048, 4 heads, local 1D blocks of 256, dropout 0.3."""
    return ImageTransformerConfig(height=32, width=32, channels=3, d_model=512, num_heads=4, d_ff=2048,
                                  num_layers=12, dropout=0.3, attention=_local_1d(256))


@register_preset
def imagetransformer_mnist_small() -> ImageTransformerConfig:
    """28×28 grey, local 1D (blocks of 112 = 4 rows): 4 layers, d=128, 4 heads, FFN 384."""
    return ImageTransformerConfig(height=28, width=28, channels=1, d_model=128, num_heads=4, d_ff=384, num_layers=4,
                                  dropout=0.1, attention=_local_1d(112))


@register_preset
def imagetransformer_mnist_2d_small() -> ImageTransformerConfig:
    """28×28 grey, local 2D (query blocks 4×7, flange 4×7): otherwise as ``imagetransformer_mnist_small``."""
    return imagetransformer_mnist_small().replace(
        attention={"name": "local_2d", "query_shape": [4, 7], "memory_flange": [4, 7]})


@register_preset
def imagetransformer_colour_small() -> ImageTransformerConfig:
    """32×32 RGB (e.g. the Twemoji set), local 1D blocks of 192 (2 rows of sub-pixels):
    4 layers, d=128, 4 heads, FFN 384."""
    return ImageTransformerConfig(height=32, width=32, channels=3, d_model=128, num_heads=4, d_ff=384, num_layers=4,
                                  dropout=0.1, attention=_local_1d(192))


@register_preset
def imagetransformer_sr_mnist_small() -> ImageTransformerConfig:
    """Super-resolution 7×7 -> 28×28 grey: a 2-layer encoder over the 7×7 image, the
    decoder of ``imagetransformer_mnist_small`` with encoder–decoder attention."""
    return imagetransformer_mnist_small().replace(low_resolution=7, num_encoder_layers=2)


@register_preset
def imagetransformer_sr_colour_small() -> ImageTransformerConfig:
    """Super-resolution 8×8 -> 32×32 RGB: a 2-layer encoder, the decoder of
    ``imagetransformer_colour_small`` with encoder–decoder attention."""
    return imagetransformer_colour_small().replace(low_resolution=8, num_encoder_layers=2)


def bits_per_dim(nats_per_sub_pixel: float) -> float:
    """Negative log-likelihood per sub-pixel in nats -> bits per dimension."""
    return nats_per_sub_pixel / math.log(2)


__all__ = ["ImageTransformer", "ImageTransformerConfig", "RasterPositions", "bits_per_dim",
           "imagetransformer_cifar10_base", "imagetransformer_mnist_small", "imagetransformer_mnist_2d_small",
           "imagetransformer_colour_small", "imagetransformer_sr_mnist_small", "imagetransformer_sr_colour_small"]
