"""The synthetic scenes' shapes and colours (name -> RGB): what the scene generator
(:mod:`attnlab.data.scenes`) draws and the scene-attribute judge
(:mod:`attnlab.models.scene_attributes`) reads. Here, below both, so the model needs no data code."""

from __future__ import annotations

__all__ = ["COLOURS", "SHAPES"]

SHAPES = ("circle", "square", "triangle")
COLOURS = {"red": (220, 40, 40), "green": (40, 190, 60), "blue": (50, 90, 230), "yellow": (230, 210, 40),
           "purple": (160, 60, 200)}
