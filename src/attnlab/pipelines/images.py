"""Images in and out of the image pipelines.

In: a file path, a Pillow image, or an array / tensor of pixels ``(H, W)`` or ``(H, W, C)``
(a list of these, or one ``(N, H, W, C)`` array, is a batch):

* files and Pillow images are read the way the CLI verbs read files
  (:func:`attnlab.data.images.pil_to_tensor`): converted to the model's channels and,
  where the verb does so, resized (bicubic) to the model's size;
* arrays and tensors are taken as they are: their size and channels must be the model's
  (a mismatch is an error, never a silent resize), uint8 (or whole numbers 0..255) or
  floats in [0, 1]. A float image whose values leave [0, 1] (e.g. 0..255 floats) is
  refused with a message, never read wrongly. Floats become the nearest of the 256 levels
  the models were trained on (``round(x · 255)``).

Out: uint8 numpy arrays ``(N, H, W, C)``, the layout accepted in.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["ImageSpec", "to_pixels", "to_arrays", "to_pil"]


@dataclass(frozen=True)
class ImageSpec:
    """What a model reads: ``channels`` (1 grey, 3 RGB), ``size`` ``(H, W)``, and whether
    files and Pillow images are resized to it (``resize``; else they must have that size)."""

    channels: int
    size: tuple[int, int]
    resize: bool = True


def _is_pil(value) -> bool:
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow is a dependency
        return False
    return isinstance(value, Image.Image)


def _is_array(value) -> bool:
    return isinstance(value, (np.ndarray, Tensor))


def to_pixels(images, spec: ImageSpec, name: str = "images") -> tuple[Tensor, bool]:
    """``images`` (see the module docstring) as uint8 ``(N, C, H, W)``, and whether one image
    (not a batch) was given. ValueError / TypeError naming ``name`` (and the index) otherwise."""
    if _is_array(images) and images.ndim == 4:
        items, single = list(images), False
    elif isinstance(images, (list, tuple)):
        items, single = list(images), False
        if not items:
            raise ValueError(f"{name}: an empty list; give at least one image")
    else:
        items, single = [images], True
    pixels = [_one(item, spec, name if single else f"{name}[{index}]") for index, item in enumerate(items)]
    return torch.stack(pixels), single


def _one(image, spec: ImageSpec, name: str) -> Tensor:
    from attnlab.data.images import pil_to_tensor, read_image

    height, width = spec.size
    square = height if spec.resize and height == width else None
    if isinstance(image, (str, os.PathLike)):
        pixels = read_image(image, image_size=square, channels=spec.channels)
        return _check_size(pixels, spec, f"{name} ({image})")
    if _is_pil(image):
        return _check_size(pil_to_tensor(image, image_size=square, channels=spec.channels), spec, name)
    if not _is_array(image):
        raise TypeError(f"{name}: expected an image file path, a PIL image or an array/tensor of pixels "
                        f"(H, W[, C]), got {type(image).__name__}")
    array = torch.from_numpy(np.array(image)) if isinstance(image, np.ndarray) else image.detach().cpu()  # a copy
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3:
        raise ValueError(f"{name}: an image array is (H, W) or (H, W, C); got shape {tuple(array.shape)}")
    if array.shape[2] != spec.channels:
        layout = "(H, W) or (H, W, 1)" if spec.channels == 1 else "(H, W, 3)"
        raise ValueError(f"{name}: shape {tuple(array.shape)} has {array.shape[2]} channels in its last axis, but "
                         f"the model takes {spec.channels} ({layout}; arrays are (H, W, C), channels last)")
    return _check_size(_levels(array, name).permute(2, 0, 1), spec, name)


def _levels(array: Tensor, name: str) -> Tensor:
    """uint8 pixels of an array: uint8 as it is, whole numbers in 0..255, floats in [0, 1]."""
    if array.dtype == torch.uint8:
        return array
    if array.dtype == torch.bool or array.is_complex():
        raise TypeError(f"{name}: pixels of dtype {array.dtype}; give uint8 (0..255) or floats in [0, 1]")
    if not array.is_floating_point():
        low, high = (int(array.min()), int(array.max())) if array.numel() else (0, 0)
        if low < 0 or high > 255:
            raise ValueError(f"{name}: integer pixels must be in 0..255; these span {low}..{high}")
        return array.to(torch.uint8)
    array = array.double()
    if not bool(torch.isfinite(array).all()):
        raise ValueError(f"{name}: the pixels hold NaN or infinity")
    low, high = (float(array.min()), float(array.max())) if array.numel() else (0.0, 0.0)
    if low < 0 or high > 1:
        hint = (" (0..255 values as floats: pass them as uint8, or divide by 255)" if low >= 0 and high <= 255
                else "")
        raise ValueError(f"{name}: float pixels must be in [0, 1]; these span {low:g}..{high:g}{hint}")
    return (array * 255).round().to(torch.uint8)


def _check_size(pixels: Tensor, spec: ImageSpec, name: str) -> Tensor:
    height, width = spec.size
    if tuple(pixels.shape[1:]) != (height, width):
        how = "resize it first" if spec.resize else "give an image of exactly that size"
        raise ValueError(f"{name}: the image is {pixels.shape[2]}x{pixels.shape[1]} (width x height) pixels, but "
                         f"the model takes {width}x{height}; {how}")
    return pixels


def to_arrays(pixels: Tensor) -> np.ndarray:
    """uint8 ``(N, C, H, W)`` -> numpy uint8 ``(N, H, W, C)``."""
    return pixels.detach().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()


def to_pil(image: np.ndarray | Tensor):
    """One ``(H, W, C)`` uint8 image (as the pipelines return them) as a Pillow image."""
    from PIL import Image

    array = image.cpu().numpy() if isinstance(image, Tensor) else np.asarray(image)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] not in (1, 3):
        raise ValueError(f"image: expected uint8 (H, W, 1) or (H, W, 3), got {array.dtype} {array.shape}")
    return Image.fromarray(array[:, :, 0] if array.shape[2] == 1 else array)
