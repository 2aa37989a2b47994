"""``attnlab.load`` of an Image Transformer directory: sampling, super-resolution, attention maps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from attnlab.pipelines.base import MAX_IMAGES, Pipeline, check_int, check_sampling, check_seed
from attnlab.pipelines.images import ImageSpec, to_arrays, to_pixels

__all__ = ["ImageTransformerPipeline"]


class ImageTransformerPipeline(Pipeline):
    """An Image Transformer (unconditional, class-conditional or super-resolution) with its
    class names (``image.json``), as ``attnlab sample-images`` / ``super-resolve``."""

    family = "image_transformer"

    def __init__(self, model, classes: list[str], directory=None):
        super().__init__(model, directory)
        self.classes = list(classes)

    @classmethod
    def load(cls, directory: Path, *, device: str = "cpu") -> ImageTransformerPipeline:
        from attnlab.families.image.train import load_image_model

        model, classes = load_image_model(str(directory), device)
        return cls(model, classes, directory)

    @property
    def super_resolution(self) -> bool:
        return bool(self.model.config.low_resolution)

    def _options(self, temperature, top_k, seed) -> dict:
        check_sampling(temperature, top_k, greedy_allowed=True, top_k_max=256)
        check_seed(seed)
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
        check_int(n, "n", maximum=MAX_IMAGES)
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
        ``image`` averaged down (:func:`attnlab.families.image.task.downsample`)."""
        from attnlab.families.image.explore import ImageTransformerSource
        from attnlab.pipelines.base import attention_groups

        pixels, single = to_pixels(image, self.image_spec, "image")
        if not single:
            raise ValueError("image: attention() takes one image")
        low = None
        if self.super_resolution:
            if low_res is not None:
                low, _ = to_pixels(low_res, self.low_res_spec, "low_res")
        elif low_res is not None:
            raise ValueError("low_res: this is not a super-resolution model")
        self._labels(label, 1)  # a class-conditional model needs its label here
        return attention_groups(ImageTransformerSource(self).analyse_pixels(pixels, label=label, low_res=low))

    def save_parts(self, directory: Path) -> None:
        """``image.json``: its class names (and, kept from the directory it came from, its data)."""
        from attnlab.families.image.train import IMAGE_FILE
        from attnlab.files import atomic_write_json

        self.copy_records(directory, IMAGE_FILE)
        path = directory / IMAGE_FILE
        record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        if self.model.config.num_classes:
            record["classes"] = self.classes
        if record:
            atomic_write_json(path, record)
