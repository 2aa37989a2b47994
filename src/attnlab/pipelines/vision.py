"""Image pipelines: ViT classification, captioning, text-to-image, the Image Transformer."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from attnlab.pipelines.base import Pipeline, check_int, check_texts
from attnlab.pipelines.images import ImageSpec, to_arrays, to_pixels

__all__ = ["ClassifierPipeline", "CaptionPipeline", "TextToImagePipeline", "ImageTransformerPipeline"]


def _check_sampling(temperature: float, top_k: int | None, *, greedy_allowed: bool, top_k_max: int | None = None):
    """``temperature`` a finite number > 0 (>= 0 where 0 means greedy), ``top_k`` None or 1..``top_k_max``."""
    lowest_ok = 0.0 if greedy_allowed else math.nextafter(0.0, 1.0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not lowest_ok <= temperature < math.inf:
        raise ValueError(f"temperature={temperature!r} must be a finite number "
                         + (">= 0 (0: greedy)" if greedy_allowed else "> 0"))
    if top_k is not None:
        check_int(top_k, "top_k", maximum=top_k_max)


def _groups(analysis) -> dict[str, Tensor]:
    return {group.name: group.weights for group in analysis.groups}


class ClassifierPipeline(Pipeline):
    """A Vision Transformer with its class names (``classes.json``), as ``attnlab classify``."""

    family = "vit"

    def __init__(self, model, classes: list[str], directory=None):
        super().__init__(model, directory)
        self.classes = list(classes)

    @classmethod
    def load(cls, directory: Path, *, device: str = "cpu") -> ClassifierPipeline:
        from attnlab.cli.vit import load_classifier

        model, classes = load_classifier(str(directory), device)
        return cls(model, classes, directory)

    @property
    def image_spec(self) -> ImageSpec:
        c = self.model.config
        return ImageSpec(c.in_channels, (c.image_size, c.image_size), resize=True)

    def classify(self, images, top: int = 5) -> list[tuple[str, float]] | list[list[tuple[str, float]]]:
        """The ``top`` likeliest classes of each image, ``[(class name, probability), ...]``
        best first: a list per image for a batch, one list for one image. Images: see
        :mod:`attnlab.pipelines.images` (files and PIL images are resized to the model's
        size as ``attnlab classify`` does; arrays must have it)."""
        from attnlab.tasks.classification import predict

        check_int(top, "top")
        pixels, single = to_pixels(images, self.image_spec)
        probabilities = predict(self.model, pixels)
        k = min(top, len(self.classes))
        ranked = []
        for row in probabilities:
            values, indices = row.topk(k)
            ranked.append([(self.classes[i], float(p)) for p, i in zip(values, indices.tolist())])
        return ranked[0] if single else ranked

    def attention(self, image) -> dict[str, Tensor]:
        """``{"self": (layers, heads, T, T)}`` over the model's tokens for one image: the
        class token (if the model has one) then the patches, row by row."""
        from attnlab.pipelines.base import explorer_source

        pixels, single = to_pixels(image, self.image_spec, "image")
        if not single:
            raise ValueError("image: attention() takes one image")
        return _groups(explorer_source(self).analyse_pixels(pixels))


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
        from attnlab.pipelines.base import explorer_source

        pixels, single = to_pixels(image, self.image_spec, "image")
        if not single:
            raise ValueError("image: attention() takes one image")
        check_int(beam, "beam")
        tokens = None
        if caption is not None:
            check_texts(caption, "caption")
            tokens = self.tokenizer.encode(caption)
        return _groups(explorer_source(self).analyse_pixels(pixels, tokens, beam=beam))


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
        _check_sampling(temperature, top_k, greedy_allowed=False)
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
        from attnlab.pipelines.base import explorer_source
        from attnlab.tasks.classification import normalize

        check_texts(prompt, "prompt")
        pixels, single = to_pixels(image, self.image_spec, "image")
        if not single:
            raise ValueError("image: attention() takes one image")
        codes = self.vqvae.encode(normalize(pixels).to(next(self.vqvae.parameters()).device))
        return _groups(explorer_source(self).analyse_codes(prompt, codes))


class ImageTransformerPipeline(Pipeline):
    """An Image Transformer (unconditional, class-conditional or super-resolution) with its
    class names (``image.json``), as ``attnlab sample-images`` / ``super-resolve``."""

    family = "image_transformer"

    def __init__(self, model, classes: list[str], directory=None):
        super().__init__(model, directory)
        self.classes = list(classes)

    @classmethod
    def load(cls, directory: Path, *, device: str = "cpu") -> ImageTransformerPipeline:
        from attnlab.cli.image import load_image_model

        model, classes = load_image_model(str(directory), device)
        return cls(model, classes, directory)

    @property
    def super_resolution(self) -> bool:
        return bool(self.model.config.low_resolution)

    def _options(self, temperature, top_k, seed) -> dict:
        _check_sampling(temperature, top_k, greedy_allowed=True, top_k_max=256)
        check_int(seed, "seed", minimum=0)
        return {"temperature": temperature, "top_k": top_k,
                "generator": torch.Generator(device=self.device).manual_seed(seed)}

    def _labels(self, label, count: int) -> Tensor | None:
        if not self.classes:
            if label is not None:
                raise ValueError("label: this model is not class-conditional")
            return None
        if label is None:
            raise ValueError(f"label: this model is class-conditional; give a class name or index "
                             f"({', '.join(self.classes[:12])}{', ...' if len(self.classes) > 12 else ''})")
        labels = list(label) if isinstance(label, (list, tuple)) else [label] * count
        if len(labels) != count:
            raise ValueError(f"label: {len(labels)} labels for {count} images")
        return torch.tensor([self._label_index(value) for value in labels], device=self.device)

    def _label_index(self, value) -> int:
        if isinstance(value, str) and value in self.classes:
            return self.classes.index(value)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(self.classes):
            return value
        raise ValueError(f"label {value!r}: not one of the model's {len(self.classes)} class names nor an index "
                         f"below {len(self.classes)}")

    def sample(self, n: int = 1, *, label=None, temperature: float = 1.0, top_k: int | None = None,
               seed: int = 0) -> np.ndarray:
        """``n`` images, uint8 ``(n, H, W, C)``, sub-pixel by sub-pixel
        (:func:`attnlab.generation.images.sample_images`, as ``attnlab sample-images``);
        ``label``: a class name or index (or one per image), required for a
        class-conditional model; ``temperature=0``: greedy."""
        from attnlab.generation.images import sample_images

        if self.super_resolution:
            raise ValueError(f"{self.directory or 'this model'} is a super-resolution model: use super_resolve(images)")
        check_int(n, "n", maximum=4096)
        options = self._options(temperature, top_k, seed)
        return to_arrays(sample_images(self.model, n, labels=self._labels(label, n), **options))

    @property
    def low_res_spec(self) -> ImageSpec:
        c = self.model.config
        return ImageSpec(c.channels, (c.low_resolution, c.low_resolution), resize=False)

    @property
    def image_spec(self) -> ImageSpec:
        c = self.model.config
        return ImageSpec(c.channels, (c.height, c.width), resize=False)

    def super_resolve(self, images, *, temperature: float = 1.0, top_k: int | None = None,
                      seed: int = 0) -> np.ndarray:
        """Full-size images ``(N, H, W, C)`` (or ``(H, W, C)`` for one) from low-resolution
        ones of exactly the model's ``low_resolution`` size, as ``attnlab super-resolve``."""
        from attnlab.generation.images import sample_images

        if not self.super_resolution:
            raise ValueError(f"{self.directory or 'this model'} is not a super-resolution model (low_resolution is 0)")
        if self.classes:
            raise ValueError("class-conditional super-resolution models are not supported")
        low, single = to_pixels(images, self.low_res_spec)
        options = self._options(temperature, top_k, seed)
        out = to_arrays(sample_images(self.model, len(low), low_res=low.to(self.device), **options))
        return out[0] if single else out

    def attention(self, image, *, label=None, low_res=None) -> dict[str, Tensor]:
        """Each layer's attention while the model reads ``image`` (sub-pixels in its
        generation order): ``{"self": ...}``, plus ``"cross"`` (over the low-resolution
        image's sub-pixels) for a super-resolution model, whose ``low_res`` defaults to
        ``image`` averaged down (:func:`attnlab.tasks.images.downsample`)."""
        from attnlab.pipelines.base import explorer_source

        pixels, single = to_pixels(image, self.image_spec, "image")
        if not single:
            raise ValueError("image: attention() takes one image")
        low = None
        if self.super_resolution:
            if low_res is not None:
                low, _ = to_pixels(low_res, self.low_res_spec, "low_res")
        elif low_res is not None:
            raise ValueError("low_res: this is not a super-resolution model")
        self._labels(label, 1)  # a class-conditional model needs its label here (the explorer takes the first)
        return _groups(explorer_source(self).analyse_pixels(pixels, label=label, low_res=low))
