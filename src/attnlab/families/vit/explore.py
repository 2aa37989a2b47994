"""The Vision Transformer in the explorer: encoder self-attention over the class token and
the patches of one image, drawn over the image (the image input: see
:mod:`attnlab.viz.explorer.inputs`)."""

from __future__ import annotations

from pathlib import Path

from torch import Tensor

from attnlab.viz.explorer.inputs import ImageInput, ImageView, cell_labels, grid_cells
from attnlab.viz.explorer.maps import Analysis, AttentionGroup, attention_maps

__all__ = ["VitSource", "load_source"]


class VitSource(ImageInput):
    """A ViT with its class names: tokens "CLS" (when the model has a class token) then
    "patch (r,c)" row by row; the output is the top class."""

    family = "vit"

    def __init__(self, pipeline):
        c = self.read_config(pipeline)
        self.max_tokens = c.num_prefix_tokens + self.rows * self.cols
        self.description = (f"Vision Transformer: {c.num_layers} layers x {c.num_heads} heads, d_model={c.d_model}, "
                            f"{c.image_size}x{c.image_size} images in {c.patch_size}x{c.patch_size} patches "
                            f"({self.rows}x{self.cols})")
        self.default_text = self.example_text()  # load_source: the model's own held-out image (choose_default)

    def analyse(self, text: str, *, files: bool = False, **options) -> Analysis:
        pixels, shown = self.read(text, files)
        return self.analyse_pixels(pixels, shown)

    def analyse_pixels(self, pixels: Tensor, shown: str = "image") -> Analysis:
        """The analysis of uint8 ``(1, C, H, W)`` pixels of the model's size."""
        from attnlab.data.images import normalize
        from attnlab.families.vit.task import predict

        model = self.pipeline.model
        maps = attention_maps(model, images=normalize(pixels).to(self.pipeline.device))
        prefix = model.config.num_prefix_tokens
        cells = grid_cells(self.rows, self.cols)
        labels = ["CLS"] * prefix + cell_labels(cells, "patch")
        probabilities = predict(model, pixels)[0]
        best = int(probabilities.argmax())
        classes = self.pipeline.classes
        name = classes[best] if best < len(classes) else str(best)
        return Analysis(shown, [AttentionGroup("self", maps["self"], labels, labels, key_cells=[None] * prefix + cells,
                                            query_cells=[None] * prefix + cells)],
                        output=f"{name} ({float(probabilities[best]):.0%})",
                        image=ImageView(pixels[0].cpu(), self.rows, self.cols))


def load_source(directory: Path, device: str) -> VitSource:
    from attnlab.pipelines import load  # the family's pipeline, through the registry (no import cycle)

    source = VitSource(load(directory, device=device))
    source.choose_default(lambda: held_out_image(directory, source.pipeline))
    return source


def held_out_image(directory, pipeline) -> tuple[Tensor, str]:
    """The first test image of the data ``directory/classes.json`` records, read as
    evaluate reads it, and what it is; ValueError when the record does not say or the data
    is not at hand."""
    from attnlab.data.images import load_images
    from attnlab.families.vit.evaluate import own_data

    source, c = own_data(directory), pipeline.model.config
    data = load_images(source, "test", image_size=c.image_size, channels=c.in_channels, classes=pipeline.classes)
    if not len(data):
        raise ValueError(f"{source} holds no held-out images")
    return data.images[0], f"the first held-out image of {source} (labelled {data.classes[int(data.labels[0])]})"


def attention(model, images: Tensor):
    """This family's attention maps (its registration's ``attention``): ``images`` normalised
    (B, C, H, W); the tokens are the prefix (class token) then the patches, row-major."""
    _, weights = model.encode(images, need_weights=True)
    return {"self": [w.self_attn for w in weights]}
