"""The Image Transformer in the explorer: each layer's local self-attention over the
image's sub-pixels in the model's generation order (and, for a super-resolution model,
the cross-attention to the low-resolution image's sub-pixels).

Queries and keys are sub-pixels ``(row,col,channel)``; position i predicts sub-pixel i
and reads the one before it (the input is shifted right). The model's attention is
local — a query sees its block and the block before it (local 1D) or its query block's
memory flange (local 2D) — and the groups hold the full ``(L, L)`` matrix with zeros
outside each query's window, exactly as the model's ``need_weights`` gives it, so each
row sums to 1 over its window. The full matrix is L² per head: the explorer shows
models of at most :data:`MAX_SUB_PIXELS` sub-pixels (28x28 grey: 784); a larger one
(32x32 colour: 3072) is refused with that reason (``attnlab.load(DIR).attention(image)``
still gives its maps in Python). The image input (resized to the model's size): see
:mod:`attnlab.viz.explorer.inputs`; a class-conditional model reads the first class
unless ``label`` says otherwise.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from attnlab.viz.explorer.inputs import ImageInput, ImageView
from attnlab.viz.explorer.maps import Analysis, AttentionGroup, attention_maps

__all__ = ["ImageTransformerSource", "MAX_SUB_PIXELS", "load_source"]

MAX_SUB_PIXELS = 1024


def sub_pixels(order: Tensor, width: int, channels: int) -> list[tuple[int, int, int]]:
    """``(row, col, channel)`` of each sequence position, from raster indices in sequence order."""
    return [(int(i) // (width * channels), int(i) // channels % width, int(i) % channels) for i in order.tolist()]


class ImageTransformerSource(ImageInput):
    """An Image Transformer with its class names."""

    family = "image_transformer"

    def __init__(self, pipeline):
        self.pipeline = pipeline
        c = pipeline.model.config
        self.channels, self.size = c.channels, (c.height, c.width)
        self.max_tokens = c.height * c.width * c.channels
        kind = (c.attention.get("name") if isinstance(c.attention, dict) else c.attention)
        self.description = (f"Image Transformer ({kind}): {c.num_layers} layers x {c.num_heads} heads, "
                            f"d_model={c.d_model}, {c.height}x{c.width}x{c.channels} sub-pixels"
                            + (f", super-resolution from {c.low_resolution}x{c.low_resolution}"
                               if c.low_resolution else ""))
        self.default_text = self.example_text()

    def check_size(self) -> ImageTransformerSource:
        """Itself, or ValueError for a model of more than :data:`MAX_SUB_PIXELS` sub-pixels."""
        if self.max_tokens > MAX_SUB_PIXELS:
            h, w = self.size
            raise ValueError(f"this Image Transformer reads {h}x{w}x{self.channels} = {self.max_tokens} sub-pixels; "
                             f"the explorer shows at most {MAX_SUB_PIXELS} (each head's map is {self.max_tokens}²); "
                             "attnlab.load(DIR).attention(image) gives its maps in Python")
        return self

    def analyse(self, text: str, *, files: bool = False, label=None, **options) -> Analysis:
        pixels, shown = self.read(text, files)
        return self.analyse_pixels(pixels, label=label, shown=shown)

    def analyse_pixels(self, pixels: Tensor, *, label=None, low_res: Tensor | None = None,
                       shown: str = "image") -> Analysis:
        """The analysis of uint8 ``(1, C, H, W)`` pixels of the model's size; ``label`` a
        class name or index (class-conditional models; default: the first class);
        ``low_res`` (super-resolution models; default: ``pixels`` averaged down)."""
        from attnlab.models.image_transformer import bits_per_dim
        from attnlab.families.image.task import downsample

        pipeline, model = self.pipeline, self.pipeline.model
        c = model.config
        if pipeline.classes and label is None:
            label = 0
        labels = pipeline._labels(label, 1)
        device = pipeline.device
        if c.low_resolution and low_res is None:
            low_res = downsample(pixels, c.low_resolution).to(torch.uint8)
        low_res = None if low_res is None else low_res.to(device)
        images = pixels.to(device)
        maps = attention_maps(model, images=images, labels=labels, low_res=low_res)
        cells = sub_pixels(model.embedder.order, c.width, c.channels)
        names = [f"({r},{col},{ch})" for r, col, ch in cells]
        places = [(r, col) for r, col, _ in cells]
        groups = [AttentionGroup("self", maps["self"], names, names, key_cells=places, query_cells=places)]
        if "cross" in maps:
            low = sub_pixels(model.low_res_embedder.order, c.low_resolution, c.channels)
            groups.append(AttentionGroup("cross", maps["cross"], names, [f"low ({r},{col},{ch})" for r, col, ch in low]))
        with torch.no_grad():
            logits = model(images, labels, low_res)
            nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                                    images.reshape(-1).long())
        output = f"{bits_per_dim(float(nll)):.3f} bits per sub-pixel"
        if pipeline.classes:
            output += f" (class {pipeline.classes[int(labels[0])]})"
        return Analysis(shown, groups, output=output, image=ImageView(pixels[0].cpu(), c.height, c.width))


def load_source(directory: Path, device: str) -> ImageTransformerSource:
    from attnlab.pipelines import load  # the family's pipeline, through the registry (no import cycle)

    source = ImageTransformerSource(load(directory, device=device)).check_size()
    source.choose_default(lambda: held_out_image(directory, source.pipeline))
    return source


def held_out_image(directory, pipeline) -> tuple[Tensor, str]:
    """The first test image of the data ``directory/image.json`` records, read as
    evaluate-image reads it, and what it is; ValueError when the record does not say or the
    data is not at hand."""
    from attnlab.cli.options import check_recorded_data
    from attnlab.data.images import IMAGE_SETS
    from attnlab.families.image.train import IMAGE_FILE, load_image_set, model_data

    source = check_recorded_data(directory, IMAGE_FILE, model_data(directory), "--data",
                                 named=[*IMAGE_SETS, "emoji"])
    c = pipeline.model.config
    data = load_image_set(source, "test", image_size=c.height, channels=c.channels)
    if not len(data):
        raise ValueError(f"{source} holds no held-out images")
    return data.images[0], f"the first held-out image of {source}"


def attention(model, images: Tensor, labels: Tensor | None = None, low_res: Tensor | None = None):
    """This family's attention maps (its registration's ``attention``): sub-pixels in the
    model's generation order (``model.embedder.order`` maps them to the raster); a
    super-resolution model also attends to its low-resolution input ("cross")."""
    _, weights = model(images, labels, low_res, need_weights=True)
    maps = {"self": [w.self_attn for w in weights]}
    if model.config.low_resolution:
        maps["cross"] = [w.cross_attn for w in weights]
    return maps
