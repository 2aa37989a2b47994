"""The lm family's pipeline (``attnlab.load`` of a decoder-only language model directory)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from attnlab.pipelines.base import (Pipeline, attention_groups, check_bool, check_int, check_sampling, check_seed,
                                    check_texts)

__all__ = ["LanguageModelPipeline"]


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
        from attnlab.families.lm.generate import Continuation
        from attnlab.generation import generate

        prompts, single = check_texts(prompt, "prompt")
        if not prompts:
            raise ValueError("prompt: an empty list; give at least one prompt")
        for index, text in enumerate(prompts):
            if not text:
                raise ValueError(f"{'prompt' if single else f'prompt[{index}]'}: an empty string; a language model "
                                 "continues a text (the default prompt is a newline)")
        check_int(max_new_tokens, "max_new_tokens", maximum=1_000_000)  # --max-new-tokens bound (0: nothing to do)
        check_bool(greedy, "greedy")
        check_bool(sliding_window, "sliding_window")
        check_sampling(temperature, top_k, greedy_allowed=False, top_p=top_p)
        check_seed(seed, optional=True)
        stops, _ = check_texts(list(stop) if isinstance(stop, tuple) else stop, "stop") if stop else ([], False)
        if any(not text for text in stops):
            raise ValueError("stop: an empty string would stop before the first token")
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
        (:func:`attnlab.families.lm.task.evaluate_text`): a text longer than the model's context in
        consecutive windows of it, or with ``stride`` in overlapping windows whose ends
        advance by ``stride`` tokens."""
        from attnlab.families.lm.task import evaluate_text

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

    def save_parts(self, directory: Path) -> None:
        """The tokenizer (``char_tokenizer.json``, ``tokenizer.model``, or a GPT-2 model's
        ``vocab.json`` + ``merges.txt`` or ``tokenizer.json``)."""
        self.tokenizer.save(directory)

    def attention(self, text: str, *, generate: int = 0) -> dict[str, Tensor]:
        """The causal self-attention over ``text`` (and ``generate`` greedy tokens after it):
        ``{"self": (layers, heads, L, L)}`` (the explorer's :class:`LMSource`)."""
        from attnlab.families.lm.explore import LMSource

        check_texts(text, "text")
        return attention_groups(LMSource(self.model, self.tokenizer).analyse(text, generate=generate))
