"""``attnlab.load`` of a Vision Transformer directory: classification and attention maps."""

from __future__ import annotations

import json
from pathlib import Path

from torch import Tensor

from attnlab.pipelines.base import Pipeline, check_int
from attnlab.pipelines.images import ImageSpec, to_pixels

__all__ = ["ClassifierPipeline"]


class ClassifierPipeline(Pipeline):
    """A Vision Transformer with its class names (``classes.json``), as ``attnlab classify``."""

    family = "vit"

    def __init__(self, model, classes: list[str], directory=None):
        super().__init__(model, directory)
        self.classes = list(classes)

    @classmethod
    def load(cls, directory: Path, *, device: str = "cpu") -> ClassifierPipeline:
        from attnlab.families.vit.task import load_classifier

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
        from attnlab.families.vit.task import predict

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
        from attnlab.families.vit.explore import VitSource
        from attnlab.pipelines.base import attention_groups

        pixels, single = to_pixels(image, self.image_spec, "image")
        if not single:
            raise ValueError("image: attention() takes one image")
        return attention_groups(VitSource(self).analyse_pixels(pixels))

    def save_parts(self, directory: Path) -> None:
        """``classes.json`` (a timm directory's label names become it), keeping what else the
        directory it came from recorded there."""
        from attnlab.families.vit.task import CLASSES_FILE
        from attnlab.files import atomic_write_json

        self.copy_records(directory, CLASSES_FILE)
        path = directory / CLASSES_FILE
        record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        atomic_write_json(path, {**record, "classes": self.classes})
