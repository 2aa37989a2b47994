"""The explorer's view of a BERT encoder: self-attention over WordPiece tokens
(:class:`attnlab.viz.explorer.wordpiece.BertSource`, shared with the text classifier)."""

from __future__ import annotations

from pathlib import Path

from attnlab.viz.explorer.wordpiece import BertSource

__all__ = ["BertSource", "load_source"]


def load_source(directory: Path, device: str) -> BertSource:
    """A BERT directory: HuggingFace-format (config.json, vocab.txt, weights) or attnlab's."""
    from attnlab.tasks.bert import load_bert_directory

    return BertSource(*load_bert_directory(directory, device=device, flag="--model"))
