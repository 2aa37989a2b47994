"""Synthetic scenes: small RGB images of 1–3 shapes with captions, masks and attributes.

Every image is drawn from a seed, so a split is the same on every machine and the truth is
known: which object is where (a boolean mask per object), its shape, colour and size, and
captions that say so ("a small red circle to the left of a large blue square"). Attention
and generated images can be scored against that truth (the grounding score of
:mod:`attnlab.families.caption.task`).

Scenes::

    shapes   circle, square, triangle
    colours  red, green, blue, yellow, purple      (solid, on a dark noisy background)
    sizes    small, large                          (radius 0.11 / 0.18 of the side)
    objects  1-3 per image, placed without overlap (bounding boxes 1 px apart), each
             (colour, shape) pair at most once per image, so a phrase names one object

Captions (several per image, all true): one object: "a small red circle", "there is a
small red circle"; two or more: every ordered pair of objects gives "a small red circle to
the left of a large blue square" (or right of / above / below, by the larger of the
horizontal and vertical distance between their centres), and a list caption
"a small red circle and a large blue square".

Splits (fixed): ``train`` (default 8000 images), ``valid`` (500) and ``test`` (1000), from
separate seeds. **Unseen combinations:** the (colour, shape) pairs in
:data:`HELD_OUT_PAIRS` -- blue circle, green square, yellow triangle, purple circle --
never occur in ``train`` or ``valid``; every colour and every shape still does. Half of
the ``test`` images hold at least one held-out pair (``unseen[i]`` is True), the other
half only seen pairs, so seen and unseen compositions are measured separately.

A fourth split, ``reader`` (20,000 images, every pair), is for models that *judge* generated
images (the attribute reader of the text-to-image fidelity score): a judge that never saw
a blue circle could not tell whether a "blue circle" prompt was drawn. Nothing that is
scored on unseen compositions may train on it.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from attnlab.models.scene_names import COLOURS, SHAPES

__all__ = ["COLOURS", "HELD_OUT_PAIRS", "SCENE_SPLITS", "SHAPES", "SIZES", "SceneObject", "SceneSet",
           "load_scenes", "relation", "render_scene"]

SIZES = {"small": 0.11, "large": 0.18}  # radius as a fraction of the image side
HELD_OUT_PAIRS = frozenset({("blue", "circle"), ("green", "square"), ("yellow", "triangle"), ("purple", "circle")})
SCENE_SPLITS = {"train": (8000, 11), "valid": (500, 22), "test": (1000, 33), "reader": (20000, 44)}  # images, seed
RELATIONS = ("to the left of", "to the right of", "above", "below")


@dataclass(frozen=True)
class SceneObject:
    """One object: attributes, centre (x, y) in pixels, radius in pixels."""

    shape: str
    colour: str
    size: str
    x: float
    y: float
    radius: float

    @property
    def phrase(self) -> str:
        return f"a {self.size} {self.colour} {self.shape}"


@dataclass
class SceneSet:
    """A split of scenes: ``images`` uint8 ``(N, 3, S, S)``; per image its ``objects``, object
    ``masks`` (bool ``(k, S, S)``, in the order of ``objects``), ``captions`` (several), and
    ``unseen`` (True when it holds a (colour, shape) pair never seen in training)."""

    name: str
    split: str
    images: Tensor
    objects: list[list[SceneObject]]
    masks: list[Tensor]
    captions: list[list[str]]
    unseen: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.images)


@functools.lru_cache(maxsize=4)
def _pixel_centres(side: int) -> tuple[np.ndarray, np.ndarray]:
    ys, xs = np.mgrid[0:side, 0:side].astype(np.float64) + 0.5
    return ys, xs


def mask_of(obj: SceneObject, side: int) -> np.ndarray:
    """The pixels ``(side, side)`` whose centres lie inside the object."""
    ys, xs = _pixel_centres(side)
    dx, dy, r = xs - obj.x, ys - obj.y, obj.radius
    if obj.shape == "circle":
        return dx * dx + dy * dy <= r * r
    if obj.shape == "square":
        return (np.abs(dx) <= r * 0.9) & (np.abs(dy) <= r * 0.9)
    if obj.shape == "triangle":  # apex up, base at y + r
        inside_height = (dy >= -r) & (dy <= r)
        half_width = (dy + r) / 2.0 * 1.1  # widens from 0 at the apex to 1.1 r at the base
        return inside_height & (np.abs(dx) <= half_width)
    raise ValueError(f"unknown shape {obj.shape!r}; shapes are {SHAPES}")


def relation(a: SceneObject, b: SceneObject) -> str:
    """Where ``a`` is relative to ``b``: by the larger of the horizontal and vertical
    distance between centres (image y grows downwards)."""
    dx, dy = a.x - b.x, a.y - b.y
    if abs(dx) >= abs(dy):
        return "to the left of" if dx < 0 else "to the right of"
    return "above" if dy < 0 else "below"


def captions_for(objects: list[SceneObject]) -> list[str]:
    """Every caption the generator writes for these objects (all true of the scene)."""
    if len(objects) == 1:
        return [objects[0].phrase, f"there is {objects[0].phrase}"]
    captions = [f"{a.phrase} {relation(a, b)} {b.phrase}" for a in objects for b in objects if a is not b]
    names = [o.phrase for o in objects]
    captions.append(" and ".join(names) if len(names) == 2 else f"{', '.join(names[:-1])} and {names[-1]}")
    return captions


def render_scene(objects: list[SceneObject], side: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(image uint8 (3, side, side), masks bool (k, side, side))``; the background is dark
    noise, each object a solid colour with a little noise."""
    image = rng.integers(0, 40, size=(side, side, 3)).astype(np.int16)
    masks = np.stack([mask_of(o, side) for o in objects]) if objects else np.zeros((0, side, side), bool)
    for obj, mask in zip(objects, masks):
        colour = np.array(COLOURS[obj.colour], dtype=np.int16)
        noise = rng.integers(-15, 16, size=(side, side, 3))
        image[mask] = np.clip(colour + noise[mask], 0, 255)
    return image.astype(np.uint8).transpose(2, 0, 1), masks


def _place(rng: np.random.Generator, side: int, attributes: list[tuple[str, str, str]]) -> list[SceneObject]:
    """Objects with these (colour, shape, size) at random positions, bounding boxes at least
    1 px apart (a new layout is drawn until they fit)."""
    for _ in range(1000):
        objects: list[SceneObject] = []
        for colour, shape, size in attributes:
            radius = SIZES[size] * side
            x, y = rng.uniform(radius + 1, side - radius - 1, size=2)
            if any(max(abs(x - o.x), abs(y - o.y)) <= radius + o.radius + 1 for o in objects):
                break
            objects.append(SceneObject(shape, colour, size, float(x), float(y), float(radius)))
        if len(objects) == len(attributes):
            return objects
    raise RuntimeError(f"could not place {len(attributes)} objects in a {side}x{side} image")


def _attributes(rng: np.random.Generator, pairs: list[tuple[str, str]], count: int) -> list[tuple[str, str, str]]:
    """``count`` distinct (colour, shape) pairs from ``pairs``, each with a random size."""
    chosen = [pairs[i] for i in rng.choice(len(pairs), size=count, replace=False)]
    return [(colour, shape, tuple(SIZES)[int(rng.integers(len(SIZES)))]) for colour, shape in chosen]


def _split_seed(seed: int, split: str, side: int) -> int:
    digest = hashlib.sha256(f"attnlab-scenes/{seed}/{split}/{side}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def load_scenes(split: str, *, size: int = 32, count: int | None = None, seed: int = 0) -> SceneSet:
    """The ``split`` ("train", "valid" or "test") of the scene set at ``size`` (32 or 64)
    pixels: ``count`` images (default: the split's, see :data:`SCENE_SPLITS`), generated
    from a seed of (``seed``, split, size), so it is the same every time."""
    if split not in SCENE_SPLITS:
        raise ValueError(f"scenes: unknown split {split!r}; splits are {', '.join(SCENE_SPLITS)}")
    if size not in (32, 64):
        raise ValueError(f"scenes: size={size}; use 32 or 64")
    default_count, split_offset = SCENE_SPLITS[split]
    count = default_count if count is None else count
    if count < 1:
        raise ValueError(f"scenes: count={count} must be >= 1")
    rng = np.random.default_rng(_split_seed(seed + split_offset, split, size))
    every_pair = [(c, s) for c in COLOURS for s in SHAPES]
    seen_pairs = [p for p in every_pair if p not in HELD_OUT_PAIRS]
    images, objects, masks, captions, unseen = [], [], [], [], []
    for index in range(count):
        k = int(rng.integers(1, 4))
        if split == "test" and index % 2 == 1:  # odd test images: at least one held-out pair
            held = sorted(HELD_OUT_PAIRS)[int(rng.integers(len(HELD_OUT_PAIRS)))]
            attributes = (_attributes(rng, [held], 1)
                          + _attributes(rng, [p for p in every_pair if p != held], k - 1))
        else:  # the reader split (for judges of generated images) draws from every pair
            attributes = _attributes(rng, every_pair if split == "reader" else seen_pairs, k)
        scene = _place(rng, size, attributes)
        image, scene_masks = render_scene(scene, size, rng)
        images.append(image)
        objects.append(scene)
        masks.append(torch.from_numpy(scene_masks))
        captions.append(captions_for(scene))
        unseen.append(any((o.colour, o.shape) in HELD_OUT_PAIRS for o in scene))
    return SceneSet(f"scenes{size}", split, torch.from_numpy(np.stack(images)), objects, masks, captions, unseen)
