"""The text classifier's pipeline (``attnlab.load`` of a ``train text-classification`` directory)."""

from __future__ import annotations

from pathlib import Path

from torch import Tensor

from attnlab.pipelines.base import Pipeline, attention_groups, check_int, check_texts

__all__ = ["TextClassifierPipeline"]


class TextClassifierPipeline(Pipeline):
    """A BERT text classifier with its vocabulary and labels (``labels.json``)."""

    family = "bert_classifier"

    def __init__(self, model, tokenizer, labels: list[str], pairs: bool, directory=None):
        super().__init__(model, directory)
        self.tokenizer, self.labels, self.pairs = tokenizer, labels, pairs

    @classmethod
    def load(cls, directory: Path, *, device: str = "cpu") -> TextClassifierPipeline:
        from attnlab.families.text_classification.task import load_text_classifier

        model, tokenizer, labels, pairs = load_text_classifier(directory, device=device, flag="directory")
        return cls(model, tokenizer, labels, pairs, directory)

    def save_parts(self, directory: Path) -> None:
        """``vocab.txt`` (+ ``tokenizer_config.json``) and ``labels.json``, as train
        text-classification writes them."""
        from attnlab.families.text_classification.task import LABELS_FILE, labels_file_bytes

        self.tokenizer.save(directory)
        (Path(directory) / LABELS_FILE).write_bytes(labels_file_bytes(list(self.labels), bool(self.pairs)))

    def probabilities(self, texts: str | list[str], pairs: str | list[str] | None = None, *,
                      batch_size: int = 32) -> Tensor:
        """Label probabilities: ``(N, labels)`` for a list of N texts, ``(labels,)`` for one
        string; ``pairs`` (second texts, as many) for a model trained on pairs."""
        from attnlab.families.text_classification.task import predict

        items, single = check_texts(texts)
        if not items:
            raise ValueError("texts: an empty list; give at least one text")
        check_int(batch_size, "batch_size")
        if self.pairs != (pairs is not None):
            raise ValueError("pairs: the model reads text pairs; give pairs= (one second text per text)" if self.pairs
                             else "pairs: the model reads single texts; leave pairs out")
        seconds = None
        if pairs is not None:
            seconds, single_pair = check_texts(pairs, "pairs")
            if len(seconds) != len(items) or single_pair != single:
                raise ValueError(f"pairs: {len(seconds)} second text(s) for {len(items)} text(s)")
        result = predict(self.model, self.tokenizer, items, seconds, batch_size=batch_size)
        return result[0] if single else result

    def classify(self, texts: str | list[str], pairs: str | list[str] | None = None, *, top_k: int = 1,
                 batch_size: int = 32):
        """The ``top_k`` labels of each text with their probabilities, as ``classify-text``
        prints them: a list of ``[(label, probability), ...]`` per text (one such list for
        one string)."""
        check_int(top_k, "top_k")
        probabilities = self.probabilities(texts, pairs, batch_size=batch_size)
        rows = probabilities[None] if probabilities.dim() == 1 else probabilities
        k = min(top_k, len(self.labels))
        ranked = []
        for row in rows:
            values, indices = row.topk(k)
            ranked.append([(self.labels[i], float(p)) for p, i in zip(values, indices.tolist())])
        return ranked[0] if probabilities.dim() == 1 else ranked

    def attention(self, text: str) -> dict[str, Tensor]:
        """``{"self": (layers, heads, L, L)}`` over ``text``'s WordPiece tokens (the explorer's source)."""
        from attnlab.families.text_classification.explore import source

        check_texts(text, "text")
        return attention_groups(source(self.model, self.tokenizer, self.labels).analyse(text))
