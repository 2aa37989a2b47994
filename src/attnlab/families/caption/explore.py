"""The captioner in the explorer: caption one image (greedy by default), then show the
decoder reading its caption teacher-forced: "decoder self" over the caption's tokens,
"cross" from each step to the image's grid cells (drawn over the image) and, for a ViT
image encoder, "image encoder self" over the patches. The image input: see
:mod:`attnlab.viz.explorer.inputs`."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from attnlab.viz.explorer.inputs import ImageInput, ImageView, cell_labels, grid_cells
from attnlab.viz.explorer.maps import Analysis, AttentionGroup, attention_maps

__all__ = ["CaptionSource", "load_source"]


class CaptionSource(ImageInput):
    """A captioner with its vocabulary. Decoder queries are labelled by the token they read
    (``<s>``, then the caption so far), cross-attention queries by the token they emit (the
    caption, then ``</s>`` when the caption leaves room for it), keys of the cross and image
    encoder groups by their grid cell "cell (r,c)"."""

    family = "captioner"

    def __init__(self, pipeline):
        c = self.read_config(pipeline)
        self.max_tokens = max(c.max_positions, self.rows * self.cols)
        self.description = (f"image captioner ({c.image_encoder} encoder, {c.num_encoder_layers}+"
                            f"{c.num_decoder_layers} layers x {c.num_heads} heads, d_model={c.d_model}): "
                            f"{c.image_size}x{c.image_size} images on a {self.rows}x{self.cols} grid")
        self.default_text = self.example_text()

    def analyse(self, text: str, *, files: bool = False, beam: int = 1, **options) -> Analysis:
        pixels, shown = self.read(text, files)
        return self.analyse_pixels(pixels, shown=shown, beam=beam)

    def analyse_pixels(self, pixels: Tensor, caption: list[int] | None = None, *, beam: int = 1,
                       shown: str = "image") -> Analysis:
        """The analysis of uint8 ``(1, C, H, W)`` pixels with ``caption`` (token ids; None:
        the model's own, by beam search of width ``beam``, 1 = greedy)."""
        from attnlab.families.caption.task import generate_captions
        from attnlab.data.images import normalize

        model, tokenizer = self.pipeline.model, self.pipeline.tokenizer
        config = model.config
        if caption is None:
            caption = generate_captions(model, tokenizer, pixels, beam_size=beam)[0].tokens
        tgt_in = ([config.bos_id] + list(caption))[:config.max_positions]
        emitted = (list(caption) + [config.eos_id])[:len(tgt_in)]
        maps = attention_maps(model, images=normalize(pixels).to(self.pipeline.device),
                              tgt_in_ids=torch.tensor([tgt_in], device=self.pipeline.device))
        cells = grid_cells(self.rows, self.cols)
        patches = cell_labels(cells, "cell")
        read, wrote = tokenizer.pieces(tgt_in), tokenizer.pieces(emitted)
        groups = []
        if "image encoder self" in maps:
            groups.append(AttentionGroup("image encoder self", maps["image encoder self"], patches, patches,
                                         key_cells=cells, query_cells=cells))
        groups += [AttentionGroup("decoder self", maps["decoder self"], read, read),
                   AttentionGroup("cross", maps["cross"], wrote, patches, key_cells=cells)]
        return Analysis(shown, groups, output=tokenizer.decode(list(caption)),
                        image=ImageView(pixels[0].cpu(), self.rows, self.cols))


def load_source(directory: Path, device: str) -> CaptionSource:
    from attnlab.pipelines import load  # the family's pipeline, through the registry (no import cycle)

    source = CaptionSource(load(directory, device=device))
    source.choose_default(lambda: held_out_image(directory, source.pipeline))
    return source


def held_out_image(directory, pipeline) -> tuple[Tensor, str]:
    """The first test image of the data ``directory/caption.json`` records, read as
    evaluate-caption reads it, and what it is; ValueError when the record does not say or
    the data is not at hand."""
    from attnlab.cli.options import check_recorded_data
    from attnlab.families.caption.task import CAPTION_FILE, load_caption_split

    spec = pipeline.info.get("data")
    folder = spec.partition(":")[2] if isinstance(spec, str) else None
    check_recorded_data(directory, CAPTION_FILE, folder or spec, "--data", named=() if folder else (spec or "",))
    data = load_caption_split(spec, "test", image_size=pipeline.model.config.image_size, count=1)
    if not len(data.images):
        raise ValueError(f"{spec} holds no held-out images")
    return data.images[0], f"the first held-out image of {spec} (captioned {data.captions[0][0]!r})"


def attention(model, images: Tensor, tgt_in_ids: Tensor):
    """This family's attention maps (its registration's ``attention``): the captioner's own
    ``attention_maps``."""
    return model.attention_maps(images, tgt_in_ids)
