"""Image batches for the shared Trainer: every image family's training and evaluation batches.

* :class:`ImageBatches`: a resumable batch source over an :class:`~attnlab.data.images.ImageSet`
  (a fresh seeded permutation each epoch; random shifts and optional left-right flips drawn
  from a generator seeded by (seed, epoch, batch), so a resumed run sees exactly the same
  augmented batches);
* :func:`evaluation_batches`: every image once, in order, not augmented.

Pixels go into the model as :func:`attnlab.data.images.normalize` makes them (``raw=True``
keeps the uint8 pixels, which generative models predict).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.data.images import ImageSet, normalize
from attnlab.training.batches import EpochPosition

__all__ = ["ImageBatches", "evaluation_batches", "random_hflip", "random_shift"]


def random_shift(images: Tensor, max_shift: int, generator: torch.Generator) -> Tensor:
    """Shift each image by up to ``max_shift`` pixels in each direction (zero fill): pad,
    then crop at a random offset (the usual "random crop with padding")."""
    if max_shift <= 0:
        return images
    batch, _, height, width = images.shape
    padded = F.pad(images, (max_shift,) * 4)
    offsets = torch.randint(0, 2 * max_shift + 1, (batch, 2), generator=generator).tolist()
    return torch.stack([padded[i, :, dy:dy + height, dx:dx + width] for i, (dy, dx) in enumerate(offsets)])


def random_hflip(images: Tensor, generator: torch.Generator, p: float = 0.5) -> Tensor:
    """Mirror each image left-right with probability ``p`` (for data whose classes survive a
    mirror, e.g. clothes; not digits)."""
    flip = torch.rand(images.shape[0], generator=generator) < p
    if not flip.any():
        return images
    return torch.where(flip[:, None, None, None], images.flip(-1), images)


class ImageBatches(EpochPosition):
    """Shuffled mini-batches ``{"images": float (B, C, H, W), "labels": (B,)}`` of an image set,
    with optional random shifts and left-right flips; resumable (``state_dict`` = epoch and position).
    ``raw=True`` keeps the uint8 pixels (generative models predict them)."""

    def __init__(self, data: ImageSet, batch_size: int, *, seed: int = 0, shuffle: bool = True, max_shift: int = 0,
                 hflip: bool = False, drop_last: bool = True, raw: bool = False):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if len(data) == 0:
            raise ValueError(f"{data.name} {data.split}: no images")
        self.data, self.batch_size, self.seed = data, batch_size, seed
        self.shuffle, self.max_shift, self.drop_last, self.raw = shuffle, max_shift, drop_last, raw
        self.hflip = hflip
        self.epoch, self.position = 0, 0

    def __len__(self) -> int:
        full, rest = divmod(len(self.data), self.batch_size)
        return max(1, full) if self.drop_last else full + bool(rest)

    def _order(self) -> Tensor:
        if not self.shuffle:
            return torch.arange(len(self.data))
        return torch.randperm(len(self.data), generator=torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch))

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        if self.position >= len(self):
            self.epoch, self.position = self.epoch + 1, 0
        order = self._order()
        while self.position < len(self):
            index = order[self.position * self.batch_size:(self.position + 1) * self.batch_size]
            images = self.data.images[index]
            if self.max_shift or self.hflip:
                generator = torch.Generator().manual_seed(
                    (self.seed * 1_000_003 + self.epoch) * 1_000_003 + self.position)
                images = random_shift(images, self.max_shift, generator)
                if self.hflip:
                    images = random_hflip(images, generator)
            self.position += 1
            yield {"images": images if self.raw else normalize(images), "labels": self.data.labels[index]}


def evaluation_batches(data: ImageSet, batch_size: int = 500) -> list[dict[str, Tensor]]:
    """Every image once, in order, not augmented."""
    return list(ImageBatches(data, batch_size, shuffle=False, drop_last=False))
