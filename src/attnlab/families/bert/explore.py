"""The explorer's view of a BERT encoder: self-attention over WordPiece tokens."""

from __future__ import annotations

from pathlib import Path

from attnlab.viz.explorer.maps import SEEDS_SENTENCE, Analysis, AttentionGroup, _check_text, attention_maps


class BertSource:
    """A HuggingFace-format BERT directory: encoder self-attention over WordPiece tokens."""

    family = "bert"
    default_text = SEEDS_SENTENCE

    def __init__(self, model, tokenizer, *, max_tokens: int = 512):
        self.model, self.tokenizer = model.eval(), tokenizer
        self.max_tokens = min(max_tokens, model.config.max_positions)
        c = model.config
        self.description = f"BERT encoder: {c.num_layers} layers x {c.num_heads} heads, d_model={c.d_model}"

    def analyse(self, text: str, **options) -> Analysis:
        text = _check_text(text, 20 * self.max_tokens)
        if self.tokenizer.tokenizer.encode(text).overflowing:  # the tokenizer truncates at max_positions
            raise ValueError(f"the text has more than {self.max_tokens} tokens, the limit")
        batch, tokens = self.tokenizer.encode([text])
        device = next(self.model.parameters()).device
        maps = attention_maps(self.model, **{k: v.to(device) for k, v in batch.items()})
        return Analysis(text, [AttentionGroup("self", maps["self"], tokens[0], tokens[0])])


def load_source(directory: Path, device: str) -> BertSource:
    """A HuggingFace-format BERT directory (config.json, vocab.txt, weights)."""
    from attnlab.interop.hf_bert import load_hf_bert

    return BertSource(*load_hf_bert(directory, device=device))
