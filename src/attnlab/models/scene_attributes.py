"""A small CNN that reads a scene image's objects: for every (colour, shape) pair, whether
it is there and where its centre is. The fidelity score of text-to-image
(:mod:`attnlab.families.text_to_image.task`) checks generated images with it; its accuracy on
real test scenes is the ceiling of that score.

    images (B, 3, S, S) in [-1, 1] -> 3 conv blocks (32, 64, 64 channels; two of stride 2)
      -> 128 hidden -> per pair: presence logit, centre (x, y) as a fraction of the side
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from attnlab.models.base import AttnlabModel, ModelConfig, check_images
from attnlab.models.registry import register_model_class, register_preset
from attnlab.models.scene_names import COLOURS, SHAPES


def scene_pairs() -> list[tuple[str, str]]:
    """Every (colour, shape) pair of the scene generator, in a fixed order."""
    return [(colour, shape) for colour in COLOURS for shape in SHAPES]


@dataclass(frozen=True)
class SceneAttributeConfig(ModelConfig):
    family: ClassVar[str] = "scene_attributes"

    image_size: int = 32
    in_channels: int = 3
    hidden: int = 128
    num_pairs: int = 15

    def __post_init__(self):
        for name in ("image_size", "in_channels", "hidden", "num_pairs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.image_size % 4:
            raise ValueError(f"image_size={self.image_size} must be divisible by 4")


@register_model_class
class SceneAttributeClassifier(AttnlabModel):
    """``model(images)`` -> ``(presence logits (B, P), centres (B, P, 2) in [0, 1])``."""

    config_class = SceneAttributeConfig

    def __init__(self, config: SceneAttributeConfig):
        super().__init__(config)
        c = config
        self.features = nn.Sequential(
            nn.Conv2d(c.in_channels, 32, 3, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.ReLU())
        cells = (c.image_size // 4) ** 2
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(64 * cells, c.hidden), nn.ReLU(),
                                  nn.Linear(c.hidden, 3 * c.num_pairs))

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor]:
        check_images(images, self.config.in_channels, self.config.image_size)
        out = self.head(self.features(images)).view(images.shape[0], self.config.num_pairs, 3)
        return out[..., 0], torch.sigmoid(out[..., 1:])


@register_preset
def scene_attributes() -> SceneAttributeConfig:
    """The attribute reader for 32x32 scenes (15 colour-shape pairs)."""
    return SceneAttributeConfig()


__all__ = ["SceneAttributeClassifier", "SceneAttributeConfig", "scene_attributes", "scene_pairs"]
