"""The batch-source protocol the trainer consumes, and a small in-memory implementation.

A *batch source* is an iterable of batches (dicts of tensors) whose position can
be saved and restored, so that a resumed run sees exactly the batches an
uninterrupted run would have seen::

    class BatchSource(Protocol):
        def __iter__(self) -> Iterator[dict[str, Tensor]]: ...
        def state_dict(self) -> dict: ...
        def load_state_dict(self, state: dict) -> None: ...

The contract, precisely:

* ``iter(source)`` yields the rest of the current epoch and then stops. Calling
  ``iter`` again after an epoch ended starts the next epoch (reshuffled as the
  source sees fit). The trainer calls ``iter`` again whenever an epoch ends, so
  a source may also simply never stop.
* ``state_dict()`` describes the position just after the last batch yielded,
  and must hold only plain data and tensors (it is stored without pickle).
* After ``load_state_dict(state)``, the next ``iter(source)`` continues from
  that position. Randomness (shuffling) must come from the source's own seeded
  generator, not from the global RNG, so that it is reproducible.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from attnlab.training.distributed import DistributedContext

__all__ = ["Batch", "BatchSource", "EpochPosition", "ListBatchSource", "RankBatchStream", "to_device"]

Batch = dict[str, Any]
"""One (micro-)batch: named tensors, e.g. ``{"src": (B, S), "tgt": (B, T)}``."""


@runtime_checkable
class BatchSource(Protocol):
    """An iterable of batches whose position can be saved and restored (see module docstring)."""

    def __iter__(self) -> Iterator[Batch]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class ListBatchSource:
    """Pre-built batches in a seeded random order that changes every epoch.

    Epoch ``e`` visits the batches in the order ``randperm(len, seed + e)``
    (or in list order when ``shuffle`` is false). The state is just
    ``{"epoch": e, "position": i}``.
    """

    def __init__(self, batches: Sequence[Batch], *, shuffle: bool = True, seed: int = 0) -> None:
        if len(batches) == 0:
            raise ValueError("batches: need at least one batch")
        self.batches = batches
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.position = 0

    def _order(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(len(self.batches)))
        # A private generator: shuffling must not consume (or depend on) the global RNG.
        generator = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(len(self.batches), generator=generator).tolist()

    def __iter__(self) -> Iterator[Batch]:
        if self.position >= len(self.batches):
            self.epoch += 1
            self.position = 0
        order = self._order(self.epoch)
        while self.position < len(order):
            index = order[self.position]
            # Advance before yielding so state_dict() taken after this batch points past it.
            self.position += 1
            yield self.batches[index]

    def __len__(self) -> int:
        return len(self.batches)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        epoch, position = state.get("epoch"), state.get("position")
        if not isinstance(epoch, int) or not isinstance(position, int) or not 0 <= position <= len(self.batches):
            raise ValueError(f"state: expected epoch and position in [0, {len(self.batches)}], got {state!r}")
        self.epoch, self.position = epoch, position


class EpochPosition:
    """Resumable state of a batch source that walks a fresh order each epoch: ``epoch``
    and ``position`` (batches of that epoch already given); the source has ``__len__``."""

    epoch: int = 0
    position: int = 0

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        epoch, position = state.get("epoch"), state.get("position")
        if not isinstance(epoch, int) or not isinstance(position, int) or not 0 <= position <= len(self):
            raise ValueError(f"state: expected epoch and position in [0, {len(self)}], got {state!r}")
        self.epoch, self.position = epoch, position


class RankBatchStream:
    """Endless stream of this rank's micro-batches from a resumable batch source.

    Every rank reads the whole source and keeps micro-batches ``rank``,
    ``rank + world_size``, ... so ranks stay in lock-step and share one data
    position.
    """

    def __init__(self, source: BatchSource, context: DistributedContext) -> None:
        self.source = source
        self.context = context
        self._iterator: Iterator[Batch] | None = None

    def _next_global(self) -> Batch:
        for fresh in (False, True):
            if self._iterator is None or fresh:
                self._iterator = iter(self.source)
            try:
                return next(self._iterator)
            except StopIteration:
                continue  # end of epoch: the next iter() starts the next one
        raise ValueError("train_batches: an epoch yielded no batches")

    def next(self) -> Batch:
        group = [self._next_global() for _ in range(self.context.world_size)]
        return group[self.context.rank]

    def restart(self) -> None:
        """Forget the live iterator (after the source's position was restored)."""
        self._iterator = None


def to_device(batch: Batch, device: torch.device) -> Batch:
    """``batch`` with its tensors on ``device`` (other values as they are). To a GPU, tensors
    go through pinned host memory, so the copy does not wait for the GPU."""
    if device.type != "cuda":
        return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    # From pinned host memory the copy is asynchronous: the host goes on queueing the step
    # instead of waiting for the GPU to finish the previous one (a copy from pageable
    # memory waits for the stream).
    def move(value: torch.Tensor) -> torch.Tensor:
        if value.device.type == "cpu":
            return value.pin_memory().to(device, non_blocking=True)
        return value.to(device)

    return {k: move(v) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
