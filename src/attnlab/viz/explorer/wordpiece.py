"""The explorer's view of a BERT-type encoder: self-attention over WordPiece tokens.

Shared by the families whose models are BERT encoders (``bert``; the text classifier,
whose analysis also names the predicted label): each family's explore.py loads its
directory and builds a :class:`BertSource`, and both registrations name
:func:`bert_attention` (``attention=``) for their models' maps.
"""

from __future__ import annotations

from attnlab.viz.explorer.maps import SEEDS_SENTENCE, Analysis, AttentionGroup, _check_text, attention_maps

__all__ = ["BertSource", "bert_attention"]


def bert_attention(model, ids, attention_mask=None, token_type_ids=None):
    """A BERT encoder's (or classifier's) self-attention, ``{"self": per-layer weights}``."""
    out = model(ids, attention_mask=attention_mask, token_type_ids=token_type_ids, need_weights=True)
    return {"self": out.attentions}


class BertSource:
    """A BERT encoder and its WordPiece tokenizer; with ``labels`` (a classifier with
    ``classify``) the analysis's output is the top label and its probability, so the page
    shows what the [CLS] row's reading led to."""

    family = "bert"
    default_text = SEEDS_SENTENCE

    def __init__(self, model, tokenizer, *, max_tokens: int = 512, labels: list[str] | None = None,
                 family: str | None = None):
        self.model, self.tokenizer, self.labels = model.eval(), tokenizer, labels
        self.family = family or self.family
        self.max_tokens = min(max_tokens, model.config.max_positions)
        c = model.config
        self.description = f"BERT encoder: {c.num_layers} layers x {c.num_heads} heads, d_model={c.d_model}"
        if labels:
            self.description = (f"BERT text classifier ({len(labels)} labels: {', '.join(labels[:8])}"
                                + (", ..." if len(labels) > 8 else "") + f"): {c.num_layers} layers x "
                                f"{c.num_heads} heads, d_model={c.d_model}; the [CLS] row is what the label is read from")

    def analyse(self, text: str, **options) -> Analysis:
        import torch

        text = _check_text(text, 20 * self.max_tokens)
        if self.tokenizer.tokenizer.encode(text).overflowing:  # the tokenizer truncates at max_positions
            raise ValueError(f"the text has more than {self.max_tokens} tokens, the limit")
        batch, tokens = self.tokenizer.encode([text])
        device = next(self.model.parameters()).device
        batch = {k: v.to(device) for k, v in batch.items()}
        maps = attention_maps(self.model, **batch)
        output = None
        if self.labels:
            with torch.no_grad():
                probabilities = self.model.classify(batch["ids"], attention_mask=batch["attention_mask"],
                                                    token_type_ids=batch["token_type_ids"]).float().softmax(-1)[0]
            best = int(probabilities.argmax())
            output = f"{self.labels[best]} ({float(probabilities[best]):.2f})"
        return Analysis(text, [AttentionGroup("self", maps["self"], tokens[0], tokens[0])], output)
