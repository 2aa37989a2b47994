"""The explorer's view of a text classifier: its encoder's self-attention over WordPiece
tokens (the [CLS] row is what the label is read from) and the predicted label."""

from __future__ import annotations

from pathlib import Path

from attnlab.viz.explorer.wordpiece import BertSource

__all__ = ["load_source", "source"]


def source(model, tokenizer, labels) -> BertSource:
    return BertSource(model, tokenizer, labels=labels, family="bert_classifier")


def load_source(directory: Path, device: str) -> BertSource:
    """A directory ``attnlab train text-classification`` wrote."""
    from attnlab.families.text_classification.task import load_text_classifier

    model, tokenizer, labels, _ = load_text_classifier(directory, device=device)
    return source(model, tokenizer, labels)
