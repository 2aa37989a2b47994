"""Image generation with the shared Trainer: the Image Transformer's batches, loss and
evaluation in bits per dimension.

* batches: :class:`~attnlab.training.image_batches.ImageBatches` with ``raw=True`` (uint8
  pixels and labels, resumable);
* :func:`image_loss`: the summed negative log-likelihood of every sub-pixel (nats) and
  their number, so the trainer's ``loss`` is nats per sub-pixel (bits/dim = loss / ln 2);
  class labels go in when the model is class-conditional, and a super-resolution model
  gets the batch's own images downsampled (:func:`downsample`);
* :func:`evaluate_bits_per_dim`: the mean over a whole split (or the batches a time budget allows);
* :func:`evaluate_super_resolution`: a super-resolution model's outputs for the first
  images of a split, their PSNR against the originals next to bicubic upsampling's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

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
                          progress=None, batches: Iterable[Tensor] | None = None) -> dict[str, float]:
    """Mean negative log2-likelihood per sub-pixel over ``data`` (its first ``limit``
    images when given, ``batch_size`` at a time), or over the images of ``batches``
    (batches of indices into ``data``, e.g. a time-bounded
    :class:`~attnlab.training.phases.Scoring`): ``{"bits_per_dim", "nats_per_dim", "images"}``."""
    model.eval()
    device = model.head.weight.device
    if batches is None:
        size = len(data) if limit is None else min(limit, len(data))
        batches = [torch.arange(start, min(size, start + batch_size)) for start in range(0, size, batch_size)]
    total, sub_pixels, count = 0.0, 0, 0
    for index in batches:
        batch = {"images": data.images[index].to(device), "labels": data.labels[index].to(device)}
        nll, n, _ = image_loss(model, batch)
        total += float(nll)
        sub_pixels += n
        count += len(index)
        if progress is not None:
            progress(len(index))
    if not count:
        raise ValueError(f"{data.name} {data.split}: no images to score")
    nats = total / sub_pixels
    return {"bits_per_dim": nats / math.log(2), "nats_per_dim": nats, "images": count}


@torch.no_grad()
def evaluate_super_resolution(model, data: ImageSet, count: int, *, batch_size: int = 64, temperature: float = 0.0,
                              top_k: int | None = None, generator: torch.Generator | None = None,
                              samples: int = 1, progress=None) -> tuple[dict[str, float], dict[str, Tensor]]:
    """Super-resolve the first ``count`` images of ``data``, each from its own average-pooled
    low-resolution version, sampled at ``temperature`` (0 = greedy: the most probable
    intensity at every sub-pixel, given those chosen before). With ``samples`` > 1 (and a
    temperature > 0) each output is the per-pixel mean of that many samples, rounded: an
    estimate of the posterior mean, the output with the least expected squared error.

    Returns ``(results, images)``: ``results`` holds ``psnr_model`` and ``psnr_bicubic`` (dB,
    the mean over images of each image's PSNR against its original; an image reproduced
    exactly has no finite PSNR and is counted in ``exact_model`` / ``exact_bicubic``
    instead), ``psnr_model_pooled`` / ``psnr_bicubic_pooled`` (the PSNR of the mean squared
    error over all the images), ``model_better`` (the share of images where the model's
    error is below bicubic's) and ``images``; ``images`` holds the ``low``, ``bicubic``,
    ``output`` and ``original`` uint8 batches (CPU) for figures.
    """
    from attnlab.generation.images import sample_images

    size = model.config.low_resolution
    if not size:
        raise ValueError("not a super-resolution model (its low_resolution is 0)")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count={count!r} must be a positive integer")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples={samples!r} must be a positive integer")
    if samples > 1 and temperature == 0:
        raise ValueError(f"samples={samples}: greedy outputs (temperature 0) are all the same; sample at a "
                         "temperature > 0 to average several")
    count = min(count, len(data))
    device = model.head.weight.device
    parts: dict[str, list[Tensor]] = {"low": [], "bicubic": [], "output": [], "original": []}
    for start in range(0, count, batch_size):
        stop = min(count, start + batch_size)
        original = data.images[start:stop]
        low = downsample(original, size)
        labels = data.labels[start:stop].to(device).repeat_interleave(samples) if model.config.num_classes else None
        output = sample_images(model, (stop - start) * samples, labels=labels,
                               low_res=low.to(device).repeat_interleave(samples, dim=0), temperature=temperature,
                               top_k=top_k, generator=generator).cpu()
        if samples > 1:  # the samples of an image are consecutive
            output = output.view(stop - start, samples, *output.shape[1:]).double().mean(1).round().to(torch.uint8)
        for name, images in (("low", low), ("bicubic", bicubic_upsample(low, model.config.height)),
                             ("output", output), ("original", original)):
            parts[name].append(images)
        if progress is not None:
            progress(stop - start)
    images = {name: torch.cat(chunks) for name, chunks in parts.items()}
    results: dict[str, float] = {"images": count, "temperature": temperature, "samples": samples}
    reference = images["original"].double()
    errors = {}
    for name, key in (("model", "output"), ("bicubic", "bicubic")):
        mse = ((images[key].double() - reference) ** 2).flatten(1).mean(1)  # per image
        errors[name] = mse
        finite = mse[mse > 0]
        results[f"psnr_{name}"] = float((10 * torch.log10(255.0 ** 2 / finite)).mean()) if len(finite) else math.inf
        results[f"exact_{name}"] = int((mse == 0).sum())
        results[f"psnr_{name}_pooled"] = _decibels(float(mse.mean()))  # equal-sized images: the pooled MSE
    results["model_better"] = float((errors["model"] < errors["bicubic"]).double().mean())
    return results, images


def psnr(a: Tensor, b: Tensor) -> float:
    """Peak signal-to-noise ratio in dB of two uint8 images (or batches)."""
    return _decibels(float(((a.double() - b.double()) ** 2).mean()))


def _decibels(mse: float) -> float:
    """PSNR in dB of a mean squared error of 8-bit intensities (inf when 0)."""
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def bicubic_upsample(images: Tensor, size: int) -> Tensor:
    """``(B, C, h, w)`` uint8 -> ``(B, C, size, size)`` uint8 by bicubic interpolation (the baseline)."""
    out = F.interpolate(images.double(), size=(size, size), mode="bicubic", align_corners=False)
    return out.round().clamp(0, 255).to(torch.uint8)


__all__ = ["downsample", "model_inputs", "image_loss", "evaluate_bits_per_dim", "evaluate_super_resolution", "psnr",
           "bicubic_upsample"]
