"""One small interface by which a model shows its attention.

:func:`attention_maps` ``(model, **inputs) -> list[AttentionGroup]``: named groups
("encoder self", "decoder self", "cross", or "self" for a single stack), each with
weights ``(layers, heads, Lq, Lk)`` of one input (batch row 0) and the labels of its
queries and keys. Every model family's registration (attnlab.families) names one small
function in its package, ``attention=`` (families whose models share a class share one
here: :func:`decoder_lm_attention` for the LM and music families, and
attnlab.viz.explorer.wordpiece's ``bert_attention`` for the BERT ones); they all read the
attention through the public ``need_weights`` path of the shared layers, so what is shown is
what the model computed.

A :class:`AttentionSource` wraps a model *with its tokenizer* (text in, groups out); the
explorer talks only to sources, which :func:`load_source` builds from a model directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

__all__ = ["AttentionGroup", "AttentionSource", "Analysis", "attention_maps", "decoder_lm_attention",
           "lm_hidden_and_attention", "load_source", "note_default"]


@dataclass
class AttentionGroup:
    """One kind of attention of one input: ``weights`` ``(layers, heads, Lq, Lk)`` float32
    on the CPU (each query row sums to 1 over the real keys; padding is cut off),
    ``query_tokens`` (Lq labels) and ``key_tokens`` (Lk labels). ``key_cells``, for keys
    that are places in the analysed image (ViT patches, a captioner's grid cells,
    sub-pixels): ``(row, col)`` of the :class:`~attnlab.viz.explorer.inputs.ImageView`
    grid per key, None for a key that is none (a class token, a text token); ``query_cells``
    the same for the queries (the page outlines the chosen query's place)."""

    name: str
    weights: Tensor
    query_tokens: list[str] = field(default_factory=list)
    key_tokens: list[str] = field(default_factory=list)
    key_cells: list[tuple[int, int] | None] | None = None
    query_cells: list[tuple[int, int] | None] | None = None

    def __post_init__(self):
        if self.weights.dim() != 4:
            raise ValueError(f"attention group {self.name!r}: weights must be (layers, heads, Lq, Lk), got shape "
                             f"{tuple(self.weights.shape)}")
        _, _, queries, keys = self.weights.shape
        if len(self.query_tokens) != queries or len(self.key_tokens) != keys:
            raise ValueError(f"attention group {self.name!r}: {queries}x{keys} weights but {len(self.query_tokens)} "
                             f"query and {len(self.key_tokens)} key labels")
        if self.key_cells is not None and len(self.key_cells) != keys:
            raise ValueError(f"attention group {self.name!r}: {keys} keys but {len(self.key_cells)} key cells")
        if self.query_cells is not None and len(self.query_cells) != queries:
            raise ValueError(f"attention group {self.name!r}: {queries} queries but {len(self.query_cells)} "
                             "query cells")


@torch.no_grad()
def attention_maps(model, **inputs) -> dict[str, Tensor]:
    """The attention weights of ``model`` on ``inputs`` (batch of one), by group name, each
    ``(layers, heads, Lq, Lk)`` float32 on the CPU, from the function its family's
    registration names (``attention``, attnlab.families). Raises ValueError for a model of
    no family, or of a family that names none."""
    from attnlab.families import family_for_config

    config_family = getattr(getattr(model, "config", None), "family", None)
    family = family_for_config(config_family) if isinstance(config_family, str) else None
    if family is None:
        raise ValueError(f"{type(model).__name__} does not expose its attention yet: it is no registered family's "
                         "model (a family's registration names its attention function, attnlab.families)")
    maps = family.attention_maps(model, **inputs)
    return {name: torch.stack([w[0] for w in layers]).float().cpu() for name, layers in maps.items()}


def decoder_lm_attention(model, ids: Tensor) -> dict[str, list[Tensor]]:
    """The attention of a DecoderLM (the lm family's models, and the Music Transformer, which
    is one): ``{"self": per-layer weights}``. DecoderLM.forward returns logits only, so this
    runs its stack with need_weights on the same embeddings (:func:`lm_hidden_and_attention`;
    tests/viz check that these hidden states give forward()'s logits, so the two cannot drift
    apart)."""
    _, weights = lm_hidden_and_attention(model, ids)
    return {"self": [w.self_attn for w in weights]}


def lm_hidden_and_attention(model, ids: Tensor):
    """A DecoderLM's final hidden states ``(B, L, d)`` and per-layer attention of unpadded ``ids``."""
    from attnlab.models.base import check_token_ids

    check_token_ids(ids, model.config.vocab_size, "ids")
    if ids.shape[1] > model.config.max_positions:
        raise ValueError(f"{ids.shape[1]} tokens are more than the model's context of {model.config.max_positions}")
    positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    decoder = model.decoder  # the TokenDecoder part: the same embedding and stack as forward()
    x = decoder.embed_tokens(ids, positions, bound=ids.shape[1])
    return decoder.stack(x, need_weights=True)


# -- sources: a model with its tokenizer ---------------------------------------------------
@dataclass
class Analysis:
    """What a source found for one text: the groups, the model's output (a translation,
    a continuation, a class) when it produces one, and for an image input the image
    (:class:`~attnlab.viz.explorer.inputs.ImageView`) its groups' ``key_cells`` index."""

    text: str
    groups: list[AttentionGroup]
    output: str | None = None
    image: object | None = None


class AttentionSource(Protocol):
    """A model and its tokenizer, seen by the explorer."""

    family: str
    description: str
    default_text: str
    max_tokens: int

    def analyse(self, text: str, **options) -> Analysis:
        """Tokenize ``text``, run the model, return every attention group."""
        ...


def note_default(source, note: str) -> None:
    """Record where ``source``'s default input comes from (issue 39, point 4: the model's
    own held-out data, or a shipped example from another data set): ``default_note``, also
    appended to its description (the page's first line; ``explore`` prints it)."""
    source.default_note = note
    source.description += f". {note[0].upper()}{note[1:]}"


def _check_text(text: str, max_chars: int) -> str:
    if not isinstance(text, str):
        raise ValueError("text must be a string")
    text = text.strip()
    if not text:
        raise ValueError("the text is empty")
    if len(text) > max_chars:
        raise ValueError(f"the text has {len(text)} characters; the limit is {max_chars}")
    return text


def _check_length(count: int, limit: int) -> None:
    if count > limit:
        raise ValueError(f"the text has {count} tokens; the limit is {limit}")


SEEDS_SENTENCE = "The animal didn't cross the street because it was too tired"


def load_source(directory: str | os.PathLike, *, device: str = "cpu") -> AttentionSource:
    """The :class:`AttentionSource` of a model directory of any family whose registration
    names an explorer loader (attnlab.families), the other libraries' directories a family
    recognises (HuggingFace BERT, GPT-2, MarianMT, timm ViT) included."""
    from attnlab.families import families, family_for_directory
    from attnlab.models.registry import load_config, require_model_directory

    directory = require_model_directory(directory)
    family = family_for_directory(directory)
    shown = [f.title for f in families() if f.explore]
    if family is None:
        config_family = load_config(directory).family  # says what is wrong with config.json
        raise ValueError(f"{directory}: the explorer does not know models of family {config_family!r}; "
                         f"it shows {', '.join(shown)}")
    if family.explore is None:
        raise ValueError(f"{directory}: the explorer does not show {family.title} models yet; it shows "
                         f"{', '.join(shown)}")
    return family.attention_source(directory, device)
