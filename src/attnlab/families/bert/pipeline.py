"""The bert family's pipeline (``attnlab.load`` of a BERT directory): sentence embeddings, attention."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from attnlab.pipelines.base import Pipeline, attention_groups, check_int, check_nonempty_texts

__all__ = ["BertPipeline"]


class BertPipeline(Pipeline):
    """A BERT encoder with its WordPiece vocabulary: a HuggingFace BERT directory (e.g.
    all-MiniLM-L6-v2: config.json + model.safetensors + vocab.txt, read by
    :func:`attnlab.interop.hf_bert.load_hf_bert`) or an attnlab ``bert`` directory holding
    ``vocab.txt`` (+ ``tokenizer_config.json``) beside its config and weights."""

    family = "bert"

    def __init__(self, model, tokenizer, directory=None):
        super().__init__(model, directory)
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, directory: Path, *, device: str = "cpu") -> BertPipeline:
        from attnlab.interop.hf_bert import is_hf_bert_directory, load_hf_bert, load_wordpiece
        from attnlab.models.registry import load_model

        if is_hf_bert_directory(directory):
            return cls(*load_hf_bert(directory, device=device), directory)
        model = load_model(directory, device=device)
        return cls(model, load_wordpiece(directory, model.config), directory)

    def embed(self, texts: str | list[str], *, batch_size: int = 32) -> Tensor:
        """Sentence embeddings as ``attnlab embed`` computes them (mean-pooled over the real
        tokens, unit length; :func:`attnlab.models.bert.sentence_embeddings`): ``(N, d)``
        float32 for a list of N texts, ``(d,)`` for one string."""
        from attnlab.models.bert import sentence_embeddings

        items, single = check_nonempty_texts(texts)  # "" has nothing to embed: refused, not a vector
        check_int(batch_size, "batch_size")
        parts = []
        for start in range(0, len(items), batch_size):
            batch, _ = self.tokenizer.encode(items[start:start + batch_size])
            parts.append(sentence_embeddings(self.model, batch))
        embeddings = torch.cat(parts)
        return embeddings[0] if single else embeddings

    def attention(self, text: str) -> dict[str, Tensor]:
        """``{"self": (layers, heads, L, L)}`` over ``text``'s WordPiece tokens, [CLS] and
        [SEP] included (the explorer's :class:`BertSource`)."""
        from attnlab.families.bert.explore import BertSource

        _, single = check_nonempty_texts(text, "text")
        if not single:
            raise TypeError("text: attention() takes one text")
        return attention_groups(BertSource(self.model, self.tokenizer).analyse(text))

    def save_parts(self, directory: Path) -> None:
        """``vocab.txt`` and ``tokenizer_config.json`` (a HuggingFace BERT directory is written
        as an attnlab ``bert`` directory that keeps its WordPiece vocabulary)."""
        self.tokenizer.save(directory)


