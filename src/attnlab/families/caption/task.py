"""Image captioning as a task: vocabulary, batches, loss, generation, BLEU-4/CIDEr, grounding.

Any captioned image set works -- anything with ``images`` (uint8 ``(N, 3, S, S)``) and
``captions`` (a list of caption lists): the synthetic scenes (:mod:`attnlab.data.scenes`),
the user's COCO/Flickr data (:mod:`attnlab.families.caption.data`), or a set built in a few lines
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

Pixels go in as ``(x / 255 - 0.5) / 0.5`` (:func:`attnlab.data.images.normalize`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnlab.data.images import normalize
from attnlab.data.tokenizer import Tokenizer
from attnlab.tasks.captioning import CAPTION_FILE, load_captioner, train_caption_tokenizer
from attnlab.training.batches import EpochPosition
from attnlab.training.losses import label_smoothed_cross_entropy

__all__ = ["CAPTION_FILE", "CaptionBatches", "CaptionedImage", "caption_loss", "caption_scores",
           "evaluate_captioner", "generate_captions", "grounding_hit", "grounding_score", "load_caption_split",
           "load_captioner", "object_references", "sample_captions", "train_caption_tokenizer"]

IGNORE = -100


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
                      batch_size: int = 100, compile: bool | str = False) -> list[CaptionedImage]:
    """Beam search (``beam_size`` 1: greedy) over uint8 images ``(N, C, H, W)``; every
    caption is at most ``model.config.max_positions`` tokens (EOS included).
    ``compile="aot"``: the decoder's step compiled ahead of time (:mod:`attnlab.generation.aot`,
    one package per model structure and beam size, built once; eager steps after one warning
    where it cannot be had); ``"auto"`` (the ``caption`` verb's default): where that package is built."""
    from attnlab.generation import beam_search

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out: list[CaptionedImage] = []
    try:
        for start in range(0, len(images), batch_size):
            batch = normalize(images[start:start + batch_size]).to(device)
            for beams in beam_search(model, batch, beam_size=beam_size, alpha=alpha, max_len_a=0,
                                     max_len_b=model.config.max_positions, compile=compile):
                if not beams:  # cannot happen with the search as written; an empty caption, not a crash
                    out.append(CaptionedImage("", []))
                    continue
                tokens = [t for t in beams[0].tokens if t != model.config.eos_id]
                out.append(CaptionedImage(tokenizer.decode(tokens), tokens))
    finally:
        model.train(was_training)
    return out


@torch.no_grad()
def sample_captions(model, tokenizer: Tokenizer, images: Tensor, *, temperature: float = 1.0, top_k: int | None = None,
                    top_p: float | None = None, seed: int = 0, compile: bool | str = False) -> list[CaptionedImage]:
    """One sampled caption per uint8 image: each next word drawn with
    :func:`attnlab.generation.sampling.choose_next` (temperature, top-k, nucleus) from the
    model's step (``decode_step``, search's road) over its preallocated cache; at most
    ``max_positions`` tokens. ``compile="aot"``: that step compiled ahead of time (the
    package greedy search uses; eager steps after one warning where it cannot be had); ``"auto"`` (the
    ``caption`` verb's default): that package where one is already built, else the eager step."""
    from attnlab.generation.aot import aot_capacity, auto_step, use_aot
    from attnlab.generation.compiled import check_compile
    from attnlab.generation.sampling import choose_next

    if temperature <= 0:
        raise ValueError(f"temperature={temperature} must be > 0")
    check_compile(compile)
    if compile is True:
        raise ValueError("compile=True (torch.compile) is not offered for captions; use compile='aot'")
    config = model.config
    was_training = model.training
    model.eval()
    parameter = next(model.parameters())
    generator = torch.Generator(device=parameter.device).manual_seed(seed)
    try:
        memory, _ = model.encode(normalize(images).to(parameter))
        # "auto": the package where one is built (asked before the cache is made, never built), else eager
        fixed = aot_capacity(model, config.max_positions) if compile in ("aot", "auto") else config.max_positions
        built = auto_step(model, "search", rows=len(images), capacity=fixed, beam=1) if compile == "auto" else None
        aot = compile == "aot" or built is not None
        capacity = fixed if aot else config.max_positions
        cache = model.new_step_cache(memory, capacity=capacity, fixed_shape=aot)
        # log-probabilities either way: a search package computes them itself (sampling from them
        # draws as from the logits, whose softmax they share)
        step = built or (use_aot(model, "search", cache, beam=1) if aot else None)
        if aot and step is None:  # no package: the eager step, over the filled prefix
            cache.attend_prefix(cache.capacity)
        if step is None or not step.accepts(cache):
            def step(tokens, cache, memory_mask):
                return torch.log_softmax(model.decode_step(tokens, cache, memory_mask).float(), dim=-1)
        tokens = torch.full((len(images),), config.bos_id, dtype=torch.long, device=parameter.device)
        produced, done = [[] for _ in range(len(images))], [False] * len(images)
        for _ in range(config.max_positions):
            chosen = choose_next(step(tokens, cache, None), greedy=False, temperature=temperature, top_k=top_k,
                                 top_p=top_p, generator=generator)
            for row, token in enumerate(chosen.tolist()):
                if not done[row]:
                    produced[row].append(token)
                    done[row] = token == config.eos_id
            if all(done):
                break
            tokens = chosen
    finally:
        model.train(was_training)
    tokens = [[t for t in row if t != config.eos_id] for row in produced]
    return [CaptionedImage(tokenizer.decode(row), row) for row in tokens]


def _words(text: str) -> list[str]:
    return re.sub(r"[^\w\s]", " ", text.lower()).split()


def caption_scores(hypotheses: Sequence[str], references: Sequence[Sequence[str]], *,
                   meteor: bool = False) -> dict[str, float]:
    """Corpus BLEU-4 and CIDEr-D (pycocoevalcap's scorers, as the COCO evaluation server
    reports them) of ``hypotheses`` against their ``references``; with ``meteor`` also
    METEOR 1.5 (pycocoevalcap's, which runs Java). Text is lower-cased and split at non-word
    characters (the COCO server's PTB tokenizer needs Java too; on captions without quotes
    or contractions the two agree)."""
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider

    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} reference sets")
    res = {i: [" ".join(_words(h))] for i, h in enumerate(hypotheses)}
    gts = {i: [" ".join(_words(r)) for r in refs] for i, refs in enumerate(references)}
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    cider, _ = Cider().compute_score(gts, res)
    scores = {"bleu4": float(bleu[3]), "cider": float(cider)}
    if meteor:
        scores["meteor"] = _meteor(gts, res)
    return scores


def _meteor(gts, res) -> float:
    import shutil

    if shutil.which("java") is None:
        raise ValueError("METEOR needs Java (a `java` command on PATH); install a JRE or leave out --meteor")
    from pycocoevalcap.meteor.meteor import Meteor

    res = {i: [h or "-"] for i, (h,) in res.items()}  # METEOR's Java side cannot take an empty line
    scorer = Meteor()
    try:
        score, _ = scorer.compute_score(gts, res)
    finally:
        process = scorer.meteor_p
        process.stdin.close()
        process.kill()
        process.wait()
    return float(score)


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


@torch.no_grad()
def word_attention(model, image: Tensor, tokens: list[int]) -> Tensor:
    """Where each output position of a caption looked: the last decoder layer's
    cross-attention, mean over heads, ``(n, h, w)`` over the encoder's grid, teacher-forced
    on ``tokens`` (uint8 ``image`` ``(C, H, W)``). Row i is the step that emitted
    ``tokens[i]``; the last row, when the caption has room for it, the step that emitted EOS."""
    config = model.config
    parameter = next(model.parameters())
    tgt_in = torch.tensor([([config.bos_id] + list(tokens))[:config.max_positions]], device=parameter.device)
    _, cross = model.cross_attention(normalize(image[None]).to(parameter), tgt_in)
    return cross[-1][0].float().mean(0).cpu().view(tgt_in.shape[1], *config.grid)


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
    token. Returns ``{"grounding": mean, "grounding_uniform": what uniform attention would
    score on the same words (the mean area fraction of their objects), "object_words": n,
    "unmatched": shape words naming no object of the scene}``."""
    model.eval()
    indices = range(len(captions)) if indices is None else indices
    return _grounding_summary([_image_grounding(model, tokenizer, scenes, captions[i], i) for i in indices])


def _image_grounding(model, tokenizer: Tokenizer, scenes, caption: CaptionedImage,
                     index: int) -> tuple[list[float], list[float], int]:
    """``(hits, chance, unmatched)`` of the generated ``caption`` of scene ``index``:
    :func:`grounding_hit` and the object's area fraction for each object word, and the
    number of shape words naming no object of the scene."""
    if not caption.tokens:
        return [], [], 0
    words = _words(tokenizer.decode(caption.tokens))
    starts = _word_starts(tokenizer, caption.tokens)
    if len(starts) != len(words):
        return [], [], 0  # a word the tokenizer splits oddly (e.g. punctuation); not scored
    references = object_references(words, scenes.objects[index])
    unmatched = sum(w in ("circle", "square", "triangle") for w in words) - len(references)
    if not references:
        return [], [], unmatched
    attention = word_attention(model, scenes.images[index], caption.tokens)
    hits = [grounding_hit(attention[starts[word]], scenes.masks[index][obj]) for word, obj in references]
    chance = [float(scenes.masks[index][obj].double().mean()) for _, obj in references]
    return hits, chance, unmatched


def _grounding_summary(parts: Sequence[tuple[list[float], list[float], int]]) -> dict[str, float]:
    hits = [hit for part in parts for hit in part[0]]
    chance = [value for part in parts for value in part[1]]
    return {"grounding": sum(hits) / len(hits) if hits else None,
            "grounding_uniform": sum(chance) / len(chance) if chance else None, "object_words": len(hits),
            "unmatched": sum(part[2] for part in parts)}


# -- data, training, evaluation -----------------------------------------------------------
def load_caption_split(spec: str, split: str, *, image_size: int = 32, count: int | None = None):
    """``scenes`` (32x32) / ``scenes64`` -> a :class:`~attnlab.data.scenes.SceneSet` (``count``
    images, default the split's); ``emoji`` (npm's Twemoji set, each image captioned by its
    Unicode name; ``emoji:DIR`` names the unpacked package), ``coco:DIR`` / ``flickr:DIR`` -> a
    :class:`~attnlab.families.caption.data.CaptionSet` at ``image_size``."""
    if spec in ("scenes", "scenes64"):
        from attnlab.data.scenes import load_scenes

        return load_scenes(split, size=64 if spec == "scenes64" else 32, count=count)
    from attnlab.families.caption.data import CaptionSet, load_caption_data

    if spec == "emoji" or spec.startswith("emoji:"):  # Twemoji, captioned by their Unicode names
        from attnlab.data.emoji import load_emoji

        emoji = load_emoji(spec.partition(":")[2] or None, size=image_size, split=split)
        return CaptionSet("emoji", split, emoji.images.permute(0, 3, 1, 2).contiguous(),
                          [[name] for name in emoji.names], emoji.files)
    if ":" not in spec:
        raise ValueError(f"--data {spec!r}: expected scenes, scenes64, emoji[:DIR], coco:DIR or flickr:DIR")
    return load_caption_data(spec, split, image_size=image_size)


def evaluate_captioner(model, tokenizer: Tokenizer, data, *, beam_size: int = 3, meteor: bool = False,
                       budget=None, progress: bool = False, batch_size: int = 100) -> tuple[dict, list[CaptionedImage]]:
    """BLEU-4 and CIDEr of beam-search captions of ``data`` against its captions; for scenes
    also the grounding score, and everything again on the seen and unseen compositions;
    ``meteor``: METEOR too (Java). With a ``budget`` (:mod:`attnlab.training.phases`) only
    the images its time left allows are captioned and scored (a random sample; results'
    ``images`` and ``scoring`` say how many of how many); ``progress``: a bar. Returns
    ``(results, captions)``, the captions of the images scored, in the order scored."""
    from attnlab.training.phases import Scoring, take

    model.eval()
    grounded = getattr(data, "unseen", None) is not None and getattr(data, "masks", None) is not None
    scoring = Scoring(f"test captions (beam {beam_size})", len(data), unit="image", batch_size=batch_size,
                      budget=budget, progress=progress, first_batch=20)
    captions: list[CaptionedImage] = []
    grounding: list[tuple[list[float], list[float], int]] = []
    for index in scoring:
        batch = generate_captions(model, tokenizer, data.images[index], beam_size=beam_size, batch_size=batch_size)
        captions += batch
        if grounded:  # in the same batch, so the time it takes counts in the scoring's budget too
            grounding += [_image_grounding(model, tokenizer, data, caption, i)
                          for caption, i in zip(batch, index.tolist())]
    data = take(data, scoring.indices())
    texts = [c.text for c in captions]
    results: dict[str, Any] = {"data": getattr(data, "name", "?"), "split": getattr(data, "split", "?"),
                               "images": len(data), "beam_size": beam_size,
                               "empty_captions": sum(not t for t in texts),
                               **caption_scores(texts, data.captions, meteor=meteor)}
    if grounded:
        results.update(_grounding_summary(grounding))
        for name, flag in (("seen", False), ("unseen", True)):
            chosen = [i for i, u in enumerate(data.unseen) if u == flag]
            if chosen:
                part = caption_scores([texts[i] for i in chosen], [data.captions[i] for i in chosen], meteor=meteor)
                part.update(_grounding_summary([grounding[i] for i in chosen]), images=len(chosen))
                results[name] = part
    results["examples"] = [{"caption": texts[i], "references": list(data.captions[i][:3])}
                           for i in range(min(5, len(texts)))]
    if budget is not None:
        results["scoring"] = scoring.record()
    return results, captions
