"""Image pipelines: captioning, text-to-image."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from attnlab.pipelines.base import Pipeline, check_int, check_sampling, check_texts
from attnlab.pipelines.images import ImageSpec, to_arrays, to_pixels

__all__ = ["CaptionPipeline", "TextToImagePipeline"]


class CaptionPipeline(Pipeline):
    """A captioner with its sentencepiece vocabulary (:func:`attnlab.tasks.caption.load_captioner`)."""

    family = "captioner"

    def __init__(self, model, tokenizer, info: dict | None = None, directory=None):
        super().__init__(model, directory)
        self.tokenizer, self.info = tokenizer, dict(info or {})

    @classmethod
    def load(cls, directory: Path, *, device: str = "cpu") -> CaptionPipeline:
        from attnlab.tasks.caption import load_captioner

        return cls(*load_captioner(directory, device), directory=directory)

    @property
    def image_spec(self) -> ImageSpec:
        c = self.model.config
        return ImageSpec(c.in_channels, (c.image_size, c.image_size), resize=True)

    def caption(self, images, *, beam: int = 3, alpha: float = 0.6) -> str | list[str]:
        """A caption per image by beam search (``beam=1``: greedy), as ``attnlab caption``."""
        from attnlab.tasks.caption import generate_captions

        check_int(beam, "beam")
        pixels, single = to_pixels(images, self.image_spec)
        captions = [c.text for c in generate_captions(self.model, self.tokenizer, pixels, beam_size=beam, alpha=alpha)]
        return captions[0] if single else captions

    def attention(self, image, caption: str | None = None, *, beam: int = 3) -> dict[str, Tensor]:
        """Caption ``image`` (or take ``caption``), then every layer's attention while the
        decoder reads it teacher-forced: "decoder self", "cross" (over the image's cells) and,
        for a ViT encoder, "image encoder self"."""
        from attnlab.tasks.caption import generate_captions
        from attnlab.data.images import normalize
        from attnlab.viz.explorer.maps import attention_maps

        pixels, single = to_pixels(image, self.image_spec, "image")
        if not single:
            raise ValueError("image: attention() takes one image")
        config = self.model.config
        if caption is None:
            tokens = generate_captions(self.model, self.tokenizer, pixels, beam_size=beam)[0].tokens
        else:
            check_texts(caption, "caption")
            tokens = self.tokenizer.encode(caption)
        tgt_in = torch.tensor([([config.bos_id] + tokens)[:config.max_positions]], device=self.device)
        return attention_maps(self.model, images=normalize(pixels).to(self.device), tgt_in_ids=tgt_in)


class TextToImagePipeline(Pipeline):
    """A text-to-image model with its VQ-VAE and tokenizer
    (:func:`attnlab.tasks.text_to_image.load_text_to_image`), as ``attnlab imagine``."""

    family = "text_to_image"

    def __init__(self, model, vqvae, tokenizer, directory=None):
        super().__init__(model, directory)
        self.vqvae, self.tokenizer = vqvae.eval(), tokenizer

    @classmethod
    def load(cls, directory: Path, *, device: str = "cpu") -> TextToImagePipeline:
        from attnlab.tasks.text_to_image import load_text_to_image

        return cls(*load_text_to_image(directory, device), directory)

    def modules(self):
        return [self.model, self.vqvae]

    def imagine(self, prompts: str | list[str], n: int = 1, *, temperature: float = 1.0, top_k: int | None = 32,
                seed: int = 0) -> np.ndarray:
        """``n`` images per prompt, uint8 ``(len(prompts) · n, S, S, 3)`` prompt-major (one
        string counts as one prompt), sampled as ``attnlab imagine`` does
        (:func:`attnlab.tasks.text_to_image.imagine`; ``top_k=None``: the whole codebook)."""
        from attnlab.tasks.text_to_image import imagine

        items, _ = check_texts(prompts, "prompts")
        if not items:
            raise ValueError("prompts: an empty list; give at least one prompt")
        check_int(n, "n")
        check_sampling(temperature, top_k, greedy_allowed=False)
        check_int(seed, "seed", minimum=0)
        images = imagine(self.model, self.vqvae, self.tokenizer, items, n=n, temperature=temperature, top_k=top_k,
                         seed=seed)
        return to_arrays(images)

    @property
    def image_spec(self) -> ImageSpec:
        c = self.vqvae.config
        return ImageSpec(c.in_channels, (c.image_size, c.image_size), resize=True)

    def attention(self, prompt: str, image) -> dict[str, Tensor]:
        """``{"self": (layers, heads, L, L)}`` over ``[prompt tokens; image tokens]``: the
        model reading ``prompt`` and ``image`` (e.g. one it drew) as its VQ-VAE codes, teacher-forced."""
        from attnlab.data.images import normalize
        from attnlab.tasks.text_to_image import encode_prompt
        from attnlab.viz.explorer.maps import attention_maps

        check_texts(prompt, "prompt")
        pixels, single = to_pixels(image, self.image_spec, "image")
        if not single:
            raise ValueError("image: attention() takes one image")
        codes = self.vqvae.encode(normalize(pixels).to(next(self.vqvae.parameters()).device))
        text = torch.tensor([encode_prompt(self.tokenizer, prompt, self.model.config.text_length)], device=self.device)
        return attention_maps(self.model, text_ids=text, codes=codes.to(self.device))
