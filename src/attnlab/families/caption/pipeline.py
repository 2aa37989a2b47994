"""``attnlab.load`` of a captioner directory: captions and attention maps."""

from __future__ import annotations

from pathlib import Path

from torch import Tensor

from attnlab.pipelines.base import Pipeline, check_beam, check_nonempty_texts, check_number
from attnlab.pipelines.images import ImageSpec, to_pixels

__all__ = ["CaptionPipeline"]


class CaptionPipeline(Pipeline):
    """A captioner with its sentencepiece vocabulary (:func:`attnlab.families.caption.task.load_captioner`)."""

    family = "captioner"

    def __init__(self, model, tokenizer, info: dict | None = None, directory=None):
        super().__init__(model, directory)
        self.tokenizer, self.info = tokenizer, dict(info or {})

    @classmethod
    def load(cls, directory: Path, *, device: str = "cpu") -> CaptionPipeline:
        from attnlab.families.caption.task import load_captioner

        return cls(*load_captioner(directory, device), directory=directory)

    @property
    def image_spec(self) -> ImageSpec:
        c = self.model.config
        return ImageSpec(c.in_channels, (c.image_size, c.image_size), resize=True)

    def caption(self, images, *, beam: int = 3, alpha: float = 0.6, compile: bool | str = False) -> str | list[str]:
        """A caption per image by beam search (``beam=1``: greedy), as ``attnlab caption``;
        ``compile="aot"``: through the decoder's step compiled ahead of time, as ``--compile aot``; ``"auto"``:
        where that package is already built (``--compile auto``, the verb's default)."""
        from attnlab.families.caption.task import generate_captions

        check_beam(beam)
        check_number(alpha, "alpha", low=0.0)
        if not (compile is False or compile in ("aot", "auto")):
            raise ValueError(f"compile={compile!r} must be False, 'aot' (the step compiled ahead of time) or 'auto' "
                             "(where it is built)")
        pixels, single = to_pixels(images, self.image_spec)
        captions = [c.text for c in generate_captions(self.model, self.tokenizer, pixels, beam_size=beam, alpha=alpha,
                                                      compile=compile)]
        return captions[0] if single else captions

    def attention(self, image, caption: str | None = None, *, beam: int = 3) -> dict[str, Tensor]:
        """Caption ``image`` (or take ``caption``), then every layer's attention while the
        decoder reads it teacher-forced: "decoder self", "cross" (over the image's cells) and,
        for a ViT encoder, "image encoder self" (the explorer's groups)."""
        from attnlab.families.caption.explore import CaptionSource
        from attnlab.pipelines.base import attention_groups

        pixels, single = to_pixels(image, self.image_spec, "image")
        if not single:
            raise ValueError("image: attention() takes one image")
        check_beam(beam)
        tokens = None
        if caption is not None:
            check_nonempty_texts(caption, "caption")
            tokens = self.tokenizer.encode(caption)
        return attention_groups(CaptionSource(self).analyse_pixels(pixels, tokens, beam=beam))

    def save_parts(self, directory: Path) -> None:
        """``tokenizer.model`` and ``caption.json`` (what it was trained on)."""
        from attnlab.files import atomic_write_json
        from attnlab.tasks.captioning import CAPTION_FILE

        self.tokenizer.save(directory)
        if self.info:
            atomic_write_json(directory / CAPTION_FILE, self.info)
