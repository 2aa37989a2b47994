"""Image captioning as a task: vocabulary, batches, loss, generation, BLEU-4/CIDEr, grounding.

Any captioned image set works -- anything with ``images`` (uint8 ``(N, 3, S, S)``) and
``captions`` (a list of caption lists): the synthetic scenes (:mod:`attnlab.data.scenes`),
the user's COCO/Flickr data (:mod:`attnlab.data.captions`), or a set built in a few lines
from other images and their names.

* :func:`train_caption_tokenizer`: a sentencepiece vocabulary from the training captions
  (character coverage 1.0, so no training caption encodes to ``[UNK]``);
* :class:`CaptionBatches`: resumable shuffled (image, caption) pairs, teacher-forcing
  inputs ``BOS + caption`` and targets ``caption + EOS``;
* :func:`caption_loss`: label-smoothed cross-entropy for the shared Trainer;
* :func:`generate_captions`: beam search (:mod:`attnlab.generation`) over a batch of images;
* :func:`caption_scores`: BLEU-4 and CIDEr with pycocoevalcap's scorers;
* :func:`grounding_hit` / :func:`grounding_score`: for scenes, the share of object words
  whose peak cross-attention (last decoder layer, mean over heads) falls inside the
  mask of the object the word names.

Pixels go in as ``(x / 255 - 0.5) / 0.5`` (:func:`attnlab.tasks.classification.normalize`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnlab.data.tokenizer import Tokenizer
from attnlab.tasks.classification import normalize
from attnlab.training.batches import EpochPosition
from attnlab.training.losses import label_smoothed_cross_entropy

__all__ = ["CaptionBatches", "CaptionedImage", "caption_loss", "caption_scores", "generate_captions",
           "grounding_hit", "grounding_score", "object_references", "train_caption_tokenizer"]

IGNORE = -100


def train_caption_tokenizer(captions: Sequence[Sequence[str]], vocab_size: int, *, seed: int = 0) -> Tokenizer:
    """A BPE vocabulary of at most ``vocab_size`` pieces from the captions; when the captions
    allow fewer pieces (a small synthetic vocabulary), as many as they allow."""
    texts = [text for group in captions for text in group]
    try:
        return Tokenizer.train(texts, vocab_size=vocab_size, model_type="bpe", seed=seed, num_threads=1)
    except ValueError as error:
        limit = re.search(r"value <= (\d+)", str(error))
        if limit is None or int(limit.group(1)) >= vocab_size:
            raise
        return Tokenizer.train(texts, vocab_size=int(limit.group(1)), model_type="bpe", seed=seed, num_threads=1)


def encode_captions(tokenizer: Tokenizer, captions: Sequence[Sequence[str]], max_tokens: int) -> list[tuple[int, list[int]]]:
    """``(image index, ids)`` for every caption of every image, ids cut to ``max_tokens - 1``
    (room for EOS)."""
    pairs = []
    for index, group in enumerate(captions):
        for ids in tokenizer.encode_batch(list(group)):
            pairs.append((index, ids[: max_tokens - 1]))
    return pairs


def collate(images: Tensor, pairs: Sequence[tuple[int, list[int]]], bos_id: int, eos_id: int,
            pad_id: int) -> dict[str, Tensor]:
    """``{"images": float (B, C, H, W), "tgt_in": (B, T), "tgt_out": (B, T)}``: inputs BOS +
    caption padded with ``pad_id``, targets caption + EOS padded with -100 (ignored)."""
    length = max(len(ids) for _, ids in pairs) + 1
    tgt_in = torch.full((len(pairs), length), pad_id, dtype=torch.long)
    tgt_out = torch.full((len(pairs), length), IGNORE, dtype=torch.long)
    for row, (_, ids) in enumerate(pairs):
        tgt_in[row, : len(ids) + 1] = torch.tensor([bos_id] + ids, dtype=torch.long)
        tgt_out[row, : len(ids) + 1] = torch.tensor(ids + [eos_id], dtype=torch.long)
    index = torch.tensor([i for i, _ in pairs], dtype=torch.long)
    return {"images": normalize(images[index]), "tgt_in": tgt_in, "tgt_out": tgt_out}


class CaptionBatches(EpochPosition):
    """Shuffled mini-batches of (image, caption) pairs, a fresh seeded permutation each
    epoch; resumable (``state_dict`` = epoch and position)."""

    def __init__(self, images: Tensor, pairs: list[tuple[int, list[int]]], batch_size: int, *, bos_id: int,
                 eos_id: int, pad_id: int, seed: int = 0, shuffle: bool = True):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not pairs:
            raise ValueError("no captions to train on")
        self.images, self.pairs, self.batch_size, self.seed, self.shuffle = images, pairs, batch_size, seed, shuffle
        self.ids = (bos_id, eos_id, pad_id)
        self.epoch, self.position = 0, 0

    def __len__(self) -> int:
        return -(-len(self.pairs) // self.batch_size)

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        if self.position >= len(self):
            self.epoch, self.position = self.epoch + 1, 0
        order = (torch.randperm(len(self.pairs), generator=torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch))
                 if self.shuffle else torch.arange(len(self.pairs)))
        while self.position < len(self):
            chosen = order[self.position * self.batch_size:(self.position + 1) * self.batch_size].tolist()
            self.position += 1
            yield collate(self.images, [self.pairs[i] for i in chosen], *self.ids)


def caption_loss(model, batch, *, label_smoothing: float = 0.0):
    """``(loss_sum, num_tokens, {"nll": sum})`` for the shared Trainer."""
    logits = model(batch["images"], batch["tgt_in"])
    loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], epsilon=label_smoothing, ignore_index=IGNORE)
    return loss.loss_sum, loss.num_tokens, {"nll": loss.nll_sum}


@dataclass(frozen=True)
class CaptionedImage:
    """One generated caption: its text and token ids (without BOS and EOS)."""

    text: str
    tokens: list[int]


@torch.no_grad()
def generate_captions(model, tokenizer: Tokenizer, images: Tensor, *, beam_size: int = 3, alpha: float = 0.6,
                      batch_size: int = 100) -> list[CaptionedImage]:
    """Beam search (``beam_size`` 1: greedy) over uint8 images ``(N, C, H, W)``; every
    caption is at most ``model.config.max_positions`` tokens (EOS included)."""
    from attnlab.generation import beam_search

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out: list[CaptionedImage] = []
    try:
        for start in range(0, len(images), batch_size):
            batch = normalize(images[start:start + batch_size]).to(device)
            for beams in beam_search(model, batch, beam_size=beam_size, alpha=alpha, max_len_a=0,
                                     max_len_b=model.config.max_positions):
                if not beams:  # cannot happen with the search as written; an empty caption, not a crash
                    out.append(CaptionedImage("", []))
                    continue
                tokens = [t for t in beams[0].tokens if t != model.config.eos_id]
                out.append(CaptionedImage(tokenizer.decode(tokens), tokens))
    finally:
        model.train(was_training)
    return out


def _words(text: str) -> list[str]:
    return re.sub(r"[^\w\s]", " ", text.lower()).split()


def caption_scores(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, float]:
    """Corpus BLEU-4 and CIDEr-D (pycocoevalcap's scorers, as the COCO evaluation server
    reports them) of ``hypotheses`` against their ``references``. Text is lower-cased and
    split at non-word characters (the COCO server's PTB tokenizer needs Java; on captions
    without quotes or contractions the two agree)."""
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider

    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} reference sets")
    res = {i: [" ".join(_words(h))] for i, h in enumerate(hypotheses)}
    gts = {i: [" ".join(_words(r)) for r in refs] for i, refs in enumerate(references)}
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    cider, _ = Cider().compute_score(gts, res)
    return {"bleu4": float(bleu[3]), "cider": float(cider)}


# -- grounding --------------------------------------------------------------------------
def grounding_hit(attention: Tensor, mask: Tensor) -> float:
    """Where ``attention`` ``(h, w)`` (over an image grid) peaks, the share inside ``mask``
    ``(H, W)`` (bool, H and W multiples of h and w): each grid cell covers a block of pixels;
    the peak is every pixel of the cells at the maximum (ties count evenly), so the hit is 1
    when the peak lies in the mask, 0 when outside, and the mask's area fraction for
    uniform attention."""
    h, w = attention.shape
    height, width = mask.shape
    if height % h or width % w:
        raise ValueError(f"mask {tuple(mask.shape)} is not a multiple of the attention grid {(h, w)}")
    attention = attention.double()
    peak = attention >= attention.max() * (1 - 1e-6)
    pixels = peak.repeat_interleave(height // h, 0).repeat_interleave(width // w, 1)
    return float((pixels & mask.bool()).sum()) / float(pixels.sum())


def object_references(words: Sequence[str], objects) -> list[tuple[int, int]]:
    """``(word index, object index)`` for each shape word of a caption that names an object
    of the scene: the object with that colour (the word before) and shape, or the scene's
    only object of that shape when no colour is given; unmatched shape words are left out."""
    from attnlab.data.scenes import COLOURS, SHAPES

    found = []
    for i, word in enumerate(words):
        if word not in SHAPES:
            continue
        colour = words[i - 1] if i and words[i - 1] in COLOURS else None
        matches = [k for k, o in enumerate(objects) if o.shape == word and (colour is None or o.colour == colour)]
        if len(matches) == 1:
            found.append((i, matches[0]))
    return found


def _word_starts(tokenizer: Tokenizer, tokens: list[int]) -> list[int]:
    """Index of the first token of each word (pieces starting with "▁")."""
    pieces = tokenizer.pieces(tokens)
    return [i for i, piece in enumerate(pieces) if piece.startswith("\u2581") and piece != "\u2581"] or [0]


@torch.no_grad()
def grounding_score(model, tokenizer: Tokenizer, scenes, captions: Sequence[CaptionedImage],
                    indices: Sequence[int] | None = None) -> dict[str, float]:
    """Mean :func:`grounding_hit` over the object words of the generated ``captions`` of the
    scene set (images ``indices``, default all). The attention is the last decoder layer's
    cross-attention, averaged over heads, of the position that emits the word's first
    token. Returns ``{"grounding": mean, "object_words": n, "unmatched": shape words naming
    no object of the scene}``."""
    model.eval()
    device = next(model.parameters()).device
    grid = model.config.grid
    indices = range(len(captions)) if indices is None else indices
    hits, unmatched = [], 0
    for index in indices:
        caption = captions[index]
        if not caption.tokens:
            continue
        words = _words(tokenizer.decode(caption.tokens))
        starts = _word_starts(tokenizer, caption.tokens)
        if len(starts) != len(words):
            continue  # a word the tokenizer splits oddly (e.g. punctuation); not scored
        references = object_references(words, scenes.objects[index])
        unmatched += sum(w in ("circle", "square", "triangle") for w in words) - len(references)
        if not references:
            continue
        tgt_in = torch.tensor([[model.config.bos_id] + caption.tokens], device=device)
        _, cross = model.cross_attention(normalize(scenes.images[index:index + 1]).to(device), tgt_in)
        attention = cross[-1][0].float().mean(0).cpu()  # (T + 1, N)
        for word, obj in references:
            hits.append(grounding_hit(attention[starts[word]].view(grid), scenes.masks[index][obj]))
    return {"grounding": sum(hits) / len(hits) if hits else float("nan"), "object_words": len(hits),
            "unmatched": unmatched}
