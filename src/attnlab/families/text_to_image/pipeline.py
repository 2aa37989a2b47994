"""``attnlab.load`` of a text-to-image directory: images from prompts, attention maps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from torch import Tensor

from attnlab.pipelines.base import MAX_IMAGES, Pipeline, check_int, check_sampling, check_seed, check_texts
from attnlab.pipelines.images import ImageSpec, to_arrays, to_pixels

__all__ = ["TextToImagePipeline"]


class TextToImagePipeline(Pipeline):
    """A text-to-image model with its VQ-VAE and tokenizer
    (:func:`attnlab.families.text_to_image.task.load_text_to_image`), as ``attnlab imagine``."""

    family = "text_to_image"

    def __init__(self, model, vqvae, tokenizer, directory=None):
        super().__init__(model, directory)
        self.vqvae, self.tokenizer = vqvae.eval(), tokenizer

    @classmethod
    def load(cls, directory: Path, *, device: str = "cpu") -> TextToImagePipeline:
        from attnlab.families.text_to_image.task import load_text_to_image

        return cls(*load_text_to_image(directory, device), directory)

    def modules(self):
        return [self.model, self.vqvae]

    def imagine(self, prompts: str | list[str], n: int = 1, *, temperature: float = 1.0, top_k: int | None = 32,
                seed: int = 0) -> np.ndarray:
        """``n`` images per prompt, uint8 ``(len(prompts) · n, S, S, 3)`` prompt-major (one
        string counts as one prompt), sampled as ``attnlab imagine`` does
        (:func:`attnlab.families.text_to_image.task.imagine`; ``top_k=None``: the whole codebook)."""
        from attnlab.families.text_to_image.task import imagine

        items, _ = check_texts(prompts, "prompts")
        if not items:
            raise ValueError("prompts: an empty list; give at least one prompt")
        check_int(n, "n", maximum=MAX_IMAGES)
        if len(items) * n > MAX_IMAGES:  # as attnlab imagine: the images one call draws
            raise ValueError(f"{len(items)} prompts x n={n} is {len(items) * n:,d} images; at most {MAX_IMAGES:,d}")
        check_sampling(temperature, top_k, greedy_allowed=False)
        check_seed(seed)
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
        from attnlab.families.text_to_image.explore import TextToImageSource
        from attnlab.pipelines.base import attention_groups

        _, one = check_texts(prompt, "prompt")
        if not one:
            raise TypeError("prompt: attention() takes one prompt")
        pixels, single = to_pixels(image, self.image_spec, "image")
        if not single:
            raise ValueError("image: attention() takes one image")
        codes = self.vqvae.encode(normalize(pixels).to(next(self.vqvae.parameters()).device))
        return attention_groups(TextToImageSource(self).analyse_codes(prompt, codes))

    def save_parts(self, directory: Path) -> None:
        """``tokenizer.model``, the VQ-VAE (``vqvae/``) and ``text_to_image.json``."""
        from attnlab.families.text_to_image.task import TASK_FILE, VQVAE_SUBDIR

        self.tokenizer.save(directory)
        self.vqvae.save_pretrained(directory / VQVAE_SUBDIR)
        self.copy_records(directory, TASK_FILE)
