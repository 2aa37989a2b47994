"""The explorer's view of a decoder-only language model: causal self-attention over the
prompt and the tokens it continues with."""

from __future__ import annotations

from pathlib import Path

from collections.abc import Sequence

import torch

from attnlab.viz.explorer.maps import Analysis, AttentionGroup, _check_length, _check_text, attention_maps


def _lm_token_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    inner = getattr(tokenizer, "tokenizer", None)  # LineTokenizer wraps a sentencepiece Tokenizer
    if inner is not None and hasattr(inner, "pieces"):
        newline = tokenizer.newline_id
        return ["\\n" if i == newline else piece for i, piece in zip(ids, inner.pieces(ids))]
    return [tokenizer.decode([i]).replace("\n", "\\n") for i in ids]


class LMSource:
    """A decoder-only LM directory: causal self-attention over the prompt and, with
    ``generate=N``, the N tokens it continues with (greedy)."""

    family = "decoder_lm"
    generates = True

    def __init__(self, model, tokenizer, *, max_tokens: int = 512):
        self.model, self.tokenizer = model.eval(), tokenizer
        self.max_tokens = min(max_tokens, model.config.max_positions)
        c = model.config
        self.description = f"decoder-only LM: {c.num_layers} layers x {c.num_heads} heads, d_model={c.d_model}"
        self.default_text = self._fitting_default()

    DEFAULT_TEXTS = ("ROMEO:\nBut soft, what light", "but soft, what light", "to be or not to be", "the")

    def _fitting_default(self) -> str:
        """The first of :attr:`DEFAULT_TEXTS` that the tokenizer can encode and that fills at
        most half the model's context (a character LM trained on lower-case text has no
        'R'); else a few characters of the tokenizer's own vocabulary."""
        for text in self.DEFAULT_TEXTS:
            try:
                ids = self.tokenizer.encode(text)
            except (ValueError, KeyError):
                continue
            if 0 < len(ids) <= max(1, self.max_tokens // 2):
                return text
        for count in range(min(8, self.max_tokens // 2), 0, -1):
            try:
                text = self.tokenizer.decode(list(range(count)))
                if text.strip() and self.tokenizer.encode(text):
                    return text
            except (ValueError, KeyError, IndexError):
                continue
        return ""

    def choose_default(self, directory) -> None:
        """The default text: the start of the model's own held-out text (``lm.json``), the
        first line that the tokenizer encodes, cut to fill at most half the context; else
        :meth:`_fitting_default`'s, with a note saying it is not from the model's data."""
        from attnlab.families.lm.task import own_held_out_text
        from attnlab.viz.explorer.maps import note_default

        try:
            own = own_held_out_text(directory)
            if own is None:
                raise ValueError("its directory has no lm.json")
            text, what = own
            line = next((line.strip() for line in text.splitlines() if line.strip()), "")
            ids = self.tokenizer.encode(line)
            keep = max(1, self.max_tokens // 2)
            line = self.tokenizer.decode(ids[:keep]).strip() if len(ids) > keep else line
            if not line or not self.tokenizer.encode(line):
                raise ValueError("its held-out text has no line the tokenizer encodes")
        except (ValueError, KeyError, OSError) as error:
            note_default(self, f"default text: {self.default_text[:40]!r}, not from this model's data ({error}); "
                               "type a text of yours")
        else:
            self.default_text = line
            note_default(self, f"default text: the start of {what}")

    def generated_limit(self, text: str) -> int:
        """How many tokens may be generated after ``text`` within the model's context."""
        return max(0, self.max_tokens - len(self.tokenizer.encode(_check_text(text, 20 * self.max_tokens))))

    def analyse(self, text: str, *, generate: int = 0, **options) -> Analysis:
        from attnlab.generation import generate as generate_tokens

        text = _check_text(text, 20 * self.max_tokens)
        if not isinstance(generate, int) or isinstance(generate, bool) or not 0 <= generate <= 256:
            raise ValueError(f"generate={generate!r}: give a number of tokens from 0 to 256")
        ids = self.tokenizer.encode(text)
        _check_length(len(ids), self.max_tokens)
        if len(ids) + generate > self.max_tokens:
            raise ValueError(f"the text has {len(ids)} tokens and the model's context holds {self.max_tokens}: "
                             f"generate at most {self.max_tokens - len(ids)} more, not {generate}")
        new = generate_tokens(self.model, [ids], max_new_tokens=generate, greedy=True)[0] if generate else []
        everything = ids + new
        device = next(self.model.parameters()).device
        maps = attention_maps(self.model, ids=torch.tensor([everything], device=device))
        labels = _lm_token_labels(self.tokenizer, everything)
        return Analysis(text, [AttentionGroup("self", maps["self"], labels, labels)],
                        output=self.tokenizer.decode(new) if generate else None)


def load_source(directory: Path, device: str) -> LMSource:
    from attnlab.tasks.lm import load_language_model

    source = LMSource(*load_language_model(directory, device=device))
    source.choose_default(directory)
    return source
