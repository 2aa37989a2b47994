"""Text pipelines: decoder-only language models, BERT sentence embeddings."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from attnlab.pipelines.base import Pipeline, attention_groups, check_int, check_texts

__all__ = ["LanguageModelPipeline", "BertPipeline"]


class LanguageModelPipeline(Pipeline):
    """A decoder-only language model with its tokenizer (characters or BPE), as ``attnlab generate``."""

    family = "decoder_lm"

    def __init__(self, model, tokenizer, directory=None):
        super().__init__(model, directory)
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, directory: Path, *, device: str = "cpu") -> LanguageModelPipeline:
        from attnlab.tasks.lm import load_language_model

        return cls(*load_language_model(directory, device=device), directory)

    def generate(self, prompt: str | list[str] = "\n", max_new_tokens: int = 200, *, greedy: bool = False,
                 temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                 seed: int | None = None, stop: str | list[str] = (), sliding_window: bool = False) -> str | list[str]:
        """The text that continues ``prompt`` (one string, or a list generated as one
        left-padded batch); the prompt itself is not repeated, so ``prompt + result`` is what
        ``attnlab generate`` prints. Sampling with ``temperature`` / ``top_k`` / ``top_p``
        (``greedy``: argmax), reproducible with ``seed``; ``stop``: strings that end the text."""
        from attnlab.cli.generate import Continuation
        from attnlab.generation import generate

        prompts, single = check_texts(prompt, "prompt")
        check_int(max_new_tokens, "max_new_tokens")
        stops, _ = check_texts(stop, "stop") if stop else ([], False)
        encoded = [self.tokenizer.encode(p) for p in prompts]
        outputs = generate(self.model, encoded, max_new_tokens=max_new_tokens, greedy=greedy,
                           temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, stop_strings=stops,
                           tokenizer=self.tokenizer, sliding_window=sliding_window)
        texts = []
        for ids, tokens in zip(encoded, outputs):
            continuation = Continuation(self.tokenizer, ids)
            texts.append("".join(continuation.add(token) for token in tokens))
        return texts[0] if single else texts

    @torch.no_grad()
    def score(self, text: str | list[str], *, stride: int | None = None) -> float | list[float]:
        """Mean negative log-likelihood of ``text`` in nats per predicted token: every token
        after the first, given the ones before it, as ``attnlab evaluate-lm`` scores
        (:func:`attnlab.tasks.lm.evaluate_text`): a text longer than the model's context in
        consecutive windows of it, or with ``stride`` in overlapping windows whose ends
        advance by ``stride`` tokens."""
        from attnlab.tasks.lm import evaluate_text

        items, single = check_texts(text, "text")
        context = self.model.config.max_positions
        if stride is not None:
            check_int(stride, "stride")
            if stride > context:
                raise ValueError(f"stride={stride} must be at most the model's context ({context})")
        scores = []
        for index, item in enumerate(items):
            ids = self.tokenizer.encode(item)
            where = "text" if single else f"text[{index}]"
            if len(ids) < 2:
                raise ValueError(f"{where}: {len(ids)} token(s); scoring needs at least 2 (one to predict)")
            result = evaluate_text(self.model, ids, context=context, stride=stride,
                                   pad_id=getattr(self.model.config, "pad_id", 0) or 0, device=self.device)
            scores.append(result["nll"])
        return scores[0] if single else scores

    def attention(self, text: str, *, generate: int = 0) -> dict[str, Tensor]:
        """The causal self-attention over ``text`` (and ``generate`` greedy tokens after it):
        ``{"self": (layers, heads, L, L)}`` (the explorer's :class:`LMSource`)."""
        from attnlab.viz.explorer.maps import LMSource

        check_texts(text, "text")
        return attention_groups(LMSource(self.model, self.tokenizer).analyse(text, generate=generate))


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

        items, single = check_texts(texts)
        if not items:
            raise ValueError("texts: an empty list; give at least one text")
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
        from attnlab.viz.explorer.maps import BertSource

        check_texts(text, "text")
        return attention_groups(BertSource(self.model, self.tokenizer).analyse(text))


