"""Image generation with the shared Trainer: the Image Transformer's batches, loss and
evaluation in bits per dimension.

* batches: :class:`~attnlab.tasks.classification.ImageBatches` with ``raw=True`` (uint8
  pixels and labels, resumable);
* :func:`image_loss`: the summed negative log-likelihood of every sub-pixel (nats) and
  their number, so the trainer's ``loss`` is nats per sub-pixel (bits/dim = loss / ln 2);
  class labels go in when the model is class-conditional, and a super-resolution model
  gets the batch's own images downsampled (:func:`downsample`);
* :func:`evaluate_bits_per_dim`: the mean over a whole split.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.data.images import ImageSet


def downsample(images: Tensor, size: int) -> Tensor:
    """``(B, C, H, W)`` uint8 -> ``(B, C, size, size)`` by averaging each block of pixels
    (H and W must be multiples of ``size``), rounded to the nearest intensity."""
    height, width = images.shape[-2:]
    if height % size or width % size:
        raise ValueError(f"a {height}×{width} image cannot be averaged down to {size}×{size}")
    pooled = F.avg_pool2d(images.double(), (height // size, width // size))
    return pooled.round().clamp(0, 255).to(torch.uint8)


def model_inputs(model, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """``(images, labels or None, low-resolution images or None)`` as the model takes them."""
    images = batch["images"]
    labels = batch.get("labels") if model.config.num_classes else None
    low_res = downsample(images, model.config.low_resolution) if model.config.low_resolution else None
    return images, labels, low_res


def image_loss(model, batch: dict[str, Tensor]):
    """``(nll_sum, num_sub_pixels, {"nll": nll_sum})`` for the shared Trainer."""
    images, labels, low_res = model_inputs(model, batch)
    logits = model(images, labels, low_res)  # (B, C, H, W, 256)
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), images.reshape(-1).long(), reduction="sum")
    return nll, images.numel(), {"nll": nll.detach()}


@torch.no_grad()
def evaluate_bits_per_dim(model, data: ImageSet, *, batch_size: int = 64, limit: int | None = None,
                          progress=None) -> dict[str, float]:
    """Mean negative log2-likelihood per sub-pixel over ``data`` (its first ``limit``
    images when given): ``{"bits_per_dim", "nats_per_dim", "images"}``."""
    model.eval()
    device = model.head.weight.device
    count = len(data) if limit is None else min(limit, len(data))
    total, sub_pixels = 0.0, 0
    for start in range(0, count, batch_size):
        stop = min(count, start + batch_size)
        batch = {"images": data.images[start:stop].to(device), "labels": data.labels[start:stop].to(device)}
        nll, n, _ = image_loss(model, batch)
        total += float(nll)
        sub_pixels += n
        if progress is not None:
            progress(stop - start)
    nats = total / sub_pixels
    return {"bits_per_dim": nats / math.log(2), "nats_per_dim": nats, "images": count}


def psnr(a: Tensor, b: Tensor) -> float:
    """Peak signal-to-noise ratio in dB of two uint8 images (or batches)."""
    mse = float(((a.double() - b.double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def bicubic_upsample(images: Tensor, size: int) -> Tensor:
    """``(B, C, h, w)`` uint8 -> ``(B, C, size, size)`` uint8 by bicubic interpolation (the baseline)."""
    out = F.interpolate(images.double(), size=(size, size), mode="bicubic", align_corners=False)
    return out.round().clamp(0, 255).to(torch.uint8)


__all__ = ["downsample", "model_inputs", "image_loss", "evaluate_bits_per_dim", "psnr", "bicubic_upsample"]
