"""Length filtering, token-count batching and padding for translation pairs.

The paper (Vaswani et al. 2017, section 5.1) batches "sentence pairs ... by approximate
sequence length", each batch holding about 25,000 source and 25,000 target tokens. Here a
batch is bounded by the tokens it occupies *after padding*::

    len(batch) * max(padded source length, padded target length) <= max_tokens

which is what memory and compute actually pay for. Examples are sorted by length and cut
into batches greedily, so each batch holds sentences of similar length and little padding;
the order of the batches (and which of several equally long sentences share a batch) is
shuffled with a generator seeded by ``(seed, epoch)``, so every epoch is different and
every run with the same seed is the same.

Typical use::

    examples = tokenizer.encode_pairs(corpus)                      # [(src_ids, tgt_ids), ...]
    kept = filter_by_length([len(s) for s, _ in examples], [len(t) for _, t in examples],
                            max_length=256).kept
    examples = [examples[i] for i in kept]
    train_batches = TranslationBatches(examples, max_tokens=4096, seed=1)  # for the Trainer
    for batch in train_batches:  # {"src": (B, S), "tgt_in": (B, T), "tgt_out": (B, T)}
        ...

``TokenBatchSampler`` alone gives index batches, e.g. for a ``DataLoader``'s
``batch_sampler`` with ``collate_fn=collate_translation``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from attnlab.data.tokenizer import BOS_ID, EOS_ID, PAD_ID

__all__ = [
    "LengthFilterResult",
    "TokenBatchSampler",
    "TranslationBatches",
    "collate_translation",
    "filter_by_length",
]


def _as_lengths(name: str, lengths: Sequence[int]) -> np.ndarray:
    array = np.asarray(lengths)
    if array.ndim != 1 or not (array.size == 0 or np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"{name} must be a flat sequence of integers, got shape {array.shape} dtype {array.dtype}")
    if array.size and array.min() < 0:
        raise ValueError(f"{name} has a negative length {array.min()} at index {int(array.argmin())}")
    return array.astype(np.int64)


def _paired_lengths(src_lengths, tgt_lengths) -> tuple[np.ndarray, np.ndarray]:
    src = _as_lengths("src_lengths", src_lengths)
    tgt = _as_lengths("tgt_lengths", tgt_lengths)
    if len(src) != len(tgt):
        raise ValueError(f"src_lengths has {len(src)} entries but tgt_lengths has {len(tgt)}")
    return src, tgt


# -- length filter ----------------------------------------------------------------------


@dataclass(frozen=True)
class LengthFilterResult:
    """Which examples ``filter_by_length`` kept, and why the others were dropped.

    Each dropped example is counted once, under the first rule it breaks (in the order
    too_short, too_long, bad_ratio).
    """

    kept: list[int]
    too_short: int
    too_long: int
    bad_ratio: int

    @property
    def dropped(self) -> int:
        return self.too_short + self.too_long + self.bad_ratio


def filter_by_length(
    src_lengths: Sequence[int],
    tgt_lengths: Sequence[int],
    *,
    max_length: int | None = None,
    min_length: int = 1,
    max_ratio: float | None = None,
) -> LengthFilterResult:
    """Keep the pairs whose lengths are within bounds.

    Args:
        src_lengths, tgt_lengths: token counts per example, shape ``(N,)`` each.
        max_length: drop a pair if either side is longer (``None``: no limit).
        min_length: drop a pair if either side is shorter (default 1: drop empty sides).
        max_ratio: drop a pair if the longer side is more than this many times the
            shorter (``None``: no limit); a classic filter against misaligned pairs.

    Returns:
        ``LengthFilterResult`` with the kept indices in their original order and counts of
        what was dropped.
    """
    src, tgt = _paired_lengths(src_lengths, tgt_lengths)
    if max_length is not None and max_length < min_length:
        raise ValueError(f"max_length={max_length} is below min_length={min_length}")
    if max_ratio is not None and max_ratio < 1:
        raise ValueError(f"max_ratio={max_ratio} must be at least 1")

    short = np.minimum(src, tgt)
    long = np.maximum(src, tgt)
    nothing = np.zeros(len(src), dtype=bool)
    too_short = short < min_length
    too_long = (long > max_length if max_length is not None else nothing) & ~too_short
    bad_ratio = long > max_ratio * np.maximum(short, 1) if max_ratio is not None else nothing
    bad_ratio = bad_ratio & ~too_short & ~too_long
    kept = np.flatnonzero(~(too_short | too_long | bad_ratio))
    return LengthFilterResult(
        kept=kept.tolist(),
        too_short=int(too_short.sum()),
        too_long=int(too_long.sum()),
        bad_ratio=int(bad_ratio.sum()),
    )


# -- token batches -------------------------------------------------------------------------


class TokenBatchSampler:
    """Batches of example indices bounded by padded token count; resumable.

    Every example is in exactly one batch per epoch, and each batch obeys::

        len(batch) * max over the batch of (max(src_len, tgt_len) + added_tokens) <= max_tokens

    ``added_tokens`` (default 1) is what ``collate_translation`` adds to each side (EOS to
    the source; BOS to ``tgt_in`` and EOS to ``tgt_out``), so the bound holds for the
    tensors the model really sees: ``B * S <= max_tokens`` and ``B * T <= max_tokens``.

    The batch composition depends only on the sorted lengths, so the number of batches is
    the same every epoch; which equally long examples share a batch and the order of the
    batches vary with ``(seed, epoch)``.

    The position is ``(epoch, position)``: iterating yields the rest of the current
    epoch from batch ``position`` on, then stops and moves to the next epoch (the
    ``BatchSource`` contract of ``attnlab.training``); ``state_dict()`` /
    ``load_state_dict()`` save and restore it, so a resumed run sees exactly the batches
    the interrupted one would have. The position counts batches *handed out*: with a
    ``DataLoader`` use ``num_workers=0`` (which asks for a batch only when it is needed),
    or a loader with workers fetches ahead and the saved position runs ahead too.
    Data-parallel sharding is the trainer's job (each rank keeps every
    ``world_size``-th batch), so the sampler has no rank argument.

    Args:
        src_lengths, tgt_lengths: token counts per example (before BOS/EOS), shape ``(N,)``.
        max_tokens: bound on padded tokens per batch, as above.
        max_sentences: optional bound on examples per batch.
        seed: seeds the shuffling.
        shuffle: if false, batches come shortest first in a fixed order.
        added_tokens: tokens the collate function adds to each side.

    Raises:
        ValueError: an example cannot fit in any batch (``max(src_len, tgt_len) +
            added_tokens > max_tokens``): remove it first with ``filter_by_length``
            (``max_length=max_tokens - added_tokens``); the message names the first one.
    """

    def __init__(
        self,
        src_lengths: Sequence[int],
        tgt_lengths: Sequence[int],
        max_tokens: int,
        *,
        max_sentences: int | None = None,
        seed: int = 0,
        shuffle: bool = True,
        added_tokens: int = 1,
    ):
        src, tgt = _paired_lengths(src_lengths, tgt_lengths)
        if len(src) == 0:
            raise ValueError("no examples to batch (src_lengths and tgt_lengths are empty)")
        if max_tokens < 1:
            raise ValueError(f"max_tokens={max_tokens} must be positive")
        if max_sentences is not None and max_sentences < 1:
            raise ValueError(f"max_sentences={max_sentences} must be positive or None")
        if seed < 0:
            raise ValueError(f"seed={seed} must be non-negative")

        self._sizes = np.maximum(src, tgt) + added_tokens  # padded length each example needs
        oversized = np.flatnonzero(self._sizes > max_tokens)
        if oversized.size:
            first = int(oversized[0])
            raise ValueError(
                f"{oversized.size} example(s) cannot fit in max_tokens={max_tokens}: the first, "
                f"index {first}, has src_len={src[first]}, tgt_len={tgt[first]} "
                f"(+{added_tokens} added token each); drop them with "
                f"filter_by_length(..., max_length={max_tokens - added_tokens})"
            )
        self.max_tokens = max_tokens
        self.max_sentences = max_sentences
        self.seed = seed
        self.shuffle = shuffle
        self._bounds = self._batch_bounds(np.sort(self._sizes))
        self.epoch = 0
        self.position = 0

    def _batch_bounds(self, sorted_sizes: np.ndarray) -> list[tuple[int, int]]:
        """Greedy cut of ascending sizes into ``[start, end)`` runs within the bound."""
        bounds = []
        start = 0
        for end, size in enumerate(sorted_sizes.tolist(), start=1):
            count = end - start
            full = count * size > self.max_tokens
            if self.max_sentences is not None and count > self.max_sentences:
                full = True
            if full:  # the new example starts the next batch
                bounds.append((start, end - 1))
                start = end - 1
        bounds.append((start, len(sorted_sizes)))
        return bounds

    def batches(self, epoch: int) -> list[list[int]]:
        """All batches of ``epoch``, in order (a pure function of the arguments)."""
        rng = np.random.default_rng([self.seed, epoch])
        if self.shuffle:
            # Shuffle before the stable sort so that ties are broken differently each epoch.
            order = rng.permutation(len(self._sizes))
            order = order[np.argsort(self._sizes[order], kind="stable")]
        else:
            order = np.argsort(self._sizes, kind="stable")
        batches = [order[start:end].tolist() for start, end in self._bounds]
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def __len__(self) -> int:
        """Batches per epoch (the same every epoch)."""
        return len(self._bounds)

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches(self.epoch)
        while self.position < len(batches):
            batch = batches[self.position]
            self.position += 1  # before yielding: a state saved after this batch points past it
            yield batch
        self.epoch += 1
        self.position = 0

    def set_epoch(self, epoch: int) -> None:
        """Jump to the start of ``epoch``."""
        self.load_state_dict({"epoch": epoch, "position": 0})

    def state_dict(self) -> dict[str, int]:
        """``{"epoch": e, "position": i}``: batch ``i`` of epoch ``e`` comes next."""
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore a position saved by ``state_dict``."""
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or not 0 <= position <= len(self):
            raise ValueError(
                f"bad sampler state epoch={epoch}, position={position} (an epoch has {len(self)} batches)"
            )
        self.epoch, self.position = epoch, position


# -- padding -------------------------------------------------------------------------------


def collate_translation(
    examples: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> dict[str, torch.Tensor]:
    """Pad a list of ``(src_ids, tgt_ids)`` into the tensors of teacher-forced training.

    Returns:
        ``{"src": (B, S), "tgt_in": (B, T), "tgt_out": (B, T)}``, int64, right-padded with
        ``pad_id``: ``src`` is source + EOS, ``tgt_in`` is BOS + target (the decoder input),
        ``tgt_out`` is target + EOS (what to predict). ``S`` and ``T`` are the longest
        source and target in the batch plus one. The default special ids are the
        ``Tokenizer``'s fixed ones.
    """
    if not examples:
        raise ValueError("cannot collate an empty batch")
    batch_size = len(examples)
    src_len = max(len(src) for src, _ in examples) + 1
    tgt_len = max(len(tgt) for _, tgt in examples) + 1
    src = torch.full((batch_size, src_len), pad_id, dtype=torch.long)
    tgt_in = torch.full((batch_size, tgt_len), pad_id, dtype=torch.long)
    tgt_out = torch.full((batch_size, tgt_len), pad_id, dtype=torch.long)
    for row, (src_ids, tgt_ids) in enumerate(examples):
        src_ids = torch.as_tensor(list(src_ids), dtype=torch.long)
        tgt_ids = torch.as_tensor(list(tgt_ids), dtype=torch.long)
        n, m = len(src_ids), len(tgt_ids)
        src[row, :n] = src_ids
        src[row, n] = eos_id
        tgt_in[row, 0] = bos_id
        tgt_in[row, 1 : m + 1] = tgt_ids
        tgt_out[row, :m] = tgt_ids
        tgt_out[row, m] = eos_id
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out}


class TranslationBatches:
    """Padded, token-bounded batches of encoded pairs, resumable: a trainer's batch source.

    ``TokenBatchSampler`` picks the examples, ``collate_translation`` pads them; iterating
    yields the dicts of the rest of the current epoch, and ``state_dict`` /
    ``load_state_dict`` are the sampler's position. Use ``shuffle=False`` for validation.

    Args:
        examples: ``(src_ids, tgt_ids)`` pairs, e.g. from ``Tokenizer.encode_pairs``.
        max_tokens, max_sentences, seed, shuffle: as for ``TokenBatchSampler``.
        pad_id, bos_id, eos_id: as for ``collate_translation``.
    """

    def __init__(
        self,
        examples: Sequence[tuple[Sequence[int], Sequence[int]]],
        max_tokens: int,
        *,
        max_sentences: int | None = None,
        seed: int = 0,
        shuffle: bool = True,
        pad_id: int = PAD_ID,
        bos_id: int = BOS_ID,
        eos_id: int = EOS_ID,
    ):
        self.examples = examples
        self.sampler = TokenBatchSampler(
            [len(src) for src, _ in examples],
            [len(tgt) for _, tgt in examples],
            max_tokens,
            max_sentences=max_sentences,
            seed=seed,
            shuffle=shuffle,
        )
        self._special_ids = {"pad_id": pad_id, "bos_id": bos_id, "eos_id": eos_id}

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for indices in self.sampler:
            yield collate_translation([self.examples[i] for i in indices], **self._special_ids)

    def __len__(self) -> int:
        return len(self.sampler)

    def state_dict(self) -> dict[str, int]:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.sampler.load_state_dict(state)
