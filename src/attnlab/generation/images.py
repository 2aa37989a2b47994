"""Sampling images sub-pixel by sub-pixel from an :class:`~attnlab.models.image_transformer.
ImageTransformer`: unconditional, class-conditional, super-resolution, and completion.

The given sub-pixels (none, or the top rows of an image) run once through the model into a
static cache (``model.prefill``); every further sub-pixel costs one ``model.step`` — the
model's own layers over the pattern's cache window, so one image costs O(pixels · window),
not the O(pixels²) of running the prefix again for every sub-pixel (tensor2tensor's way).
The next value is drawn by :func:`attnlab.generation.sampling.choose_next`
(temperature, top-k, top-p; ``temperature=0`` is greedy).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor

from attnlab.generation.aot import auto_step, use_aot
from attnlab.generation.compiled import check_compile, compiled_step, use_compiled
from attnlab.generation.sampling import choose_next


@torch.inference_mode()
def sample_images(model, count: int, *, labels=None, low_res: Tensor | None = None, given: Tensor | None = None,
                  temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                  generator: torch.Generator | None = None,
                  progress: Callable[[int], None] | None = None, compile: bool | str = False) -> Tensor:
    """``count`` images ``(count, C, H, W)`` uint8.

    Args:
        labels: ``(count,)`` classes for a class-conditional model.
        low_res: ``(count, C, h, w)`` low-resolution images for a super-resolution model.
        given: ``(count, T)`` first sub-pixels in the model's generation order (completion;
            see :func:`complete_images`); the rest is sampled.
        temperature: 0 = greedy (the most probable value at every sub-pixel).
        progress: called with the number of sub-pixels done after each step.
        compile: run the step compiled by ``torch.compile`` over a fixed-shape cache
            (:mod:`attnlab.generation.compiled`): a compilation on the first call per batch
            size (seconds), then faster steps on small models; the same values up to float
            rounding. Without a C++ compiler: a warning, and eager steps. ``compile="aot"``:
            the step compiled ahead of time (:mod:`attnlab.generation.aot`; one package per
            model structure and batch size, built once into the user cache, then loaded).
            ``compile="auto"`` (``sample-images``' default): that package where one is already built,
            else the eager step; never a build (:func:`~attnlab.generation.aot.auto_step`).
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count={count!r} must be a positive integer")
    if not temperature >= 0:
        raise ValueError(f"temperature={temperature!r} must be >= 0")
    model.eval()
    device = model.head.weight.device
    length = model.config.sequence_length
    given = torch.zeros(count, 0, dtype=torch.long, device=device) if given is None else given.to(device).long()
    if given.shape[0] != count:
        raise ValueError(f"{given.shape[0]} given prefixes for {count} images")
    sequence = torch.empty(count, length, dtype=torch.long, device=device)
    sequence[:, :given.shape[1]] = given
    check_compile(compile)
    compiled = use_compiled(compile, device)
    # "auto": the package where one is built (asked before the cache is made, never built), else eager
    built = auto_step(model, "image", rows=count, capacity=length) if compile == "auto" else None
    cache = model.new_cache(count, fixed_shape=compiled or compile == "aot" or built is not None)
    step = partial(compiled_step(model), model) if compiled else built or model.step
    logits = model.prefill(given, cache, labels, low_res)
    if compile == "aot":  # after the prefill, which sets the conditioning the step reads
        step = use_aot(model, "image", cache)
        if step is None:  # no package: the eager step over the default cache (over this one: 1.9-2.2x the time)
            cache = model.new_cache(count)
            logits = model.prefill(given, cache, labels, low_res)
            step = model.step
    for t in range(given.shape[1], length):
        value = choose_next(logits, greedy=temperature == 0, temperature=temperature or 1.0, top_k=top_k,
                            top_p=top_p, generator=generator)
        sequence[:, t] = value
        if t + 1 < length:
            logits = step(value, cache)
        if progress is not None:
            progress(t + 1)
    return model.sequence_to_images(sequence).to(torch.uint8)


def complete_images(model, images: Tensor, keep_rows: int, *, samples: int = 1, **options) -> Tensor:
    """Keep the top ``keep_rows`` rows of each image ``(B, C, H, W)`` and sample the rest,
    ``samples`` times each: ``(B·samples, C, H, W)`` (the samples of an image together).
    The kept rows must be the start of the generation order (with local 2D attention: a
    multiple of the query block's height)."""
    images = model.check_images(images)
    height = model.config.height
    if isinstance(keep_rows, bool) or not isinstance(keep_rows, int) or not 0 <= keep_rows < height:
        raise ValueError(f"keep_rows={keep_rows!r} must be an integer in [0, {height})")
    given = model.given_prefix(keep_rows)
    prefix = model.images_to_sequence(images)[:, :given].repeat_interleave(samples, dim=0)
    labels = options.pop("labels", None)
    if labels is not None:
        labels = torch.as_tensor(labels).reshape(-1).repeat_interleave(samples)
    low_res = options.pop("low_res", None)
    if low_res is not None:
        low_res = low_res.repeat_interleave(samples, dim=0)
    return sample_images(model, prefix.shape[0], given=prefix, labels=labels, low_res=low_res, **options)


__all__ = ["sample_images", "complete_images"]
