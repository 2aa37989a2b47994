"""What captioning shares with text-to-image: a BPE vocabulary trained on captions, and a
saved captioner read back (text-to-image re-ranks its images with one, ``imagine --rerank``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from attnlab.data.tokenizer import Tokenizer

__all__ = ["CAPTION_FILE", "load_captioner", "train_caption_tokenizer"]

CAPTION_FILE = "caption.json"


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


def load_captioner(directory: str | Path, device: str = "cpu", *, flag: str = "--model"):
    """A saved Captioner, its tokenizer and its ``caption.json`` (ValueError for anything
    else, naming ``flag``, the option that gave ``directory``)."""
    from attnlab.models.captioner import Captioner
    from attnlab.models.registry import load_model
    from attnlab.tasks import is_positive_int, is_text, read_task_file

    model = load_model(directory, device=str(device))
    if not isinstance(model, Captioner):
        raise ValueError(f"{flag} {directory}: holds a {model.config.family} model, not a captioner")
    tokenizer = Tokenizer.load(directory)
    if tokenizer.vocab_size != model.config.vocab_size:
        raise ValueError(f"{Path(directory) / 'tokenizer.model'}: {tokenizer.vocab_size} pieces, but the model has a "
                         f"vocabulary of {model.config.vocab_size}")
    path = Path(directory) / CAPTION_FILE
    info = read_task_file(path, {"data": (is_text, "a data set name"), "input": (is_text, "a text"),
                                 "image_size": (is_positive_int, "a whole number of pixels")})
    if info.get("image_size") not in (None, model.config.image_size):
        raise ValueError(f"{path}: image_size={info['image_size']} but config.json has image_size="
                         f"{model.config.image_size}")
    return model, tokenizer, info
