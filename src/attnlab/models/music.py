"""The Music Transformer (Huang et al. 2018): a decoder-only LM over music tokens whose
self-attention is relative (``relative_skew``), or absolute positions for the baseline.

Not a new stack: :class:`MusicTransformer` is a :class:`~attnlab.models.lm.DecoderLM` (the
same layers, caches, generation and training) whose config records the token encoding
(``encoding``: "performance" = the 388 performance events + pad/start/end of
:mod:`attnlab.data.music`, 391 ids; "jsb" = JSB Chorales serialised voice by voice, 132
ids), so generation and evaluation know how to turn tokens into music. The relative
presets have no absolute positions (``positional="none"``, as tensor2tensor's
``transformer_relative``): the relative logits are the model's only sense of order, which
is what lets it run past its trained length; ``max_positions`` is then only a cap on how
long a sequence may get.

Presets after the paper's JSB models (§4.1; Table 2) and a small CPU performance model:

* ``music_jsb_baseline``: 5 layers, d_model 256, FFN 1024, 8 heads, sinusoidal positions;
* ``music_jsb_relative``: 5 layers, d_model 512, FFN 512, 8 heads, relative span 256;
* ``music_performance_small``: 4 layers, d_model 256, FFN 1024, 8 heads, span 256;
* ``music_tiny``: tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from attnlab.models.lm import DecoderLM, DecoderLMConfig
from attnlab.models.registry import register_model_class, register_preset

# Vocabulary sizes of the encodings (attnlab.data.music defines them; models sit below data).
ENCODING_VOCAB_SIZES = {"performance": 391, "jsb": 132}
START_ID, END_ID, PAD_ID = 1, 2, 0


@dataclass(frozen=True)
class MusicTransformerConfig(DecoderLMConfig):
    """A :class:`DecoderLMConfig` plus the token ``encoding`` ("performance" or "jsb").

    Defaults: pre-LN, ReLU FFN, start/end ids 1/2, pad 0, 4,096 positions at most."""

    family: ClassVar[str] = "music_transformer"

    encoding: str = "performance"
    vocab_size: int = ENCODING_VOCAB_SIZES["performance"]
    d_model: int = 256
    num_heads: int = 8
    d_ff: int = 1024
    num_layers: int = 4
    positional: str = "none"
    activation: str = "relu"
    attention: str | dict[str, Any] = "causal"
    max_positions: int = 4096
    dropout: float = 0.1
    bos_id: int | None = START_ID
    eos_id: int | None = END_ID

    def __post_init__(self):
        super().__post_init__()
        if self.encoding not in ENCODING_VOCAB_SIZES:
            raise ValueError(f"encoding={self.encoding!r}; choose one of {sorted(ENCODING_VOCAB_SIZES)}")
        if self.vocab_size != ENCODING_VOCAB_SIZES[self.encoding]:
            raise ValueError(f"vocab_size={self.vocab_size} does not match the {self.encoding} encoding's "
                             f"{ENCODING_VOCAB_SIZES[self.encoding]} tokens")


@register_model_class
class MusicTransformer(DecoderLM):
    """Decoder-only Music Transformer: a :class:`DecoderLM` with a music config."""

    config_class = MusicTransformerConfig
    legacy_names = ()


def _relative(span: int) -> dict[str, Any]:
    return {"name": "relative_skew", "max_relative_position": span, "causal": True, "shared": False}


@register_preset
def music_jsb_baseline() -> MusicTransformerConfig:
    """The paper's JSB baseline Transformer: 5 layers, d_model 256, FFN 1024, 8 heads,
    absolute (sinusoidal) positions. Token embeddings are multiplied by sqrt(d_model) as in
    the Transformer (without it the unit-amplitude sinusoids drown the N(0, 0.02) token
    embeddings: a first 10-minute run stayed at the unigram's 3.42 nats/token)."""
    return MusicTransformerConfig(encoding="jsb", vocab_size=ENCODING_VOCAB_SIZES["jsb"], d_model=256, d_ff=1024,
                                  num_heads=8, num_layers=5, positional="sinusoidal", attention="causal",
                                  scale_embeddings=True)


@register_preset
def music_jsb_relative() -> MusicTransformerConfig:
    """The paper's JSB relative-attention model: 5 layers, d_model 512, FFN 512, 8 heads,
    relative span 256, no absolute positions."""
    return MusicTransformerConfig(encoding="jsb", vocab_size=ENCODING_VOCAB_SIZES["jsb"], d_model=512, d_ff=512,
                                  num_heads=8, num_layers=5, positional="none", attention=_relative(256))


@register_preset
def music_jsb_small() -> MusicTransformerConfig:
    """A JSB relative-attention model for minutes of CPU (the README's 10-minute line): the
    paper's layout at d_model 256, FFN 1024 (5 layers, 8 heads, relative span 256, no
    absolute positions; about 4.3M parameters, ~0.6x music_jsb_relative's time per token)."""
    return MusicTransformerConfig(encoding="jsb", vocab_size=ENCODING_VOCAB_SIZES["jsb"], d_model=256, d_ff=1024,
                                  num_heads=8, num_layers=5, positional="none", attention=_relative(256))


@register_preset
def music_performance_small() -> MusicTransformerConfig:
    """A performance-event model for the CPU: 4 layers, d_model 256, FFN 1024, 8 heads,
    relative span 256, no absolute positions (about 3.4M parameters)."""
    return MusicTransformerConfig(encoding="performance", d_model=256, d_ff=1024, num_heads=8, num_layers=4,
                                  positional="none", attention=_relative(256))


@register_preset
def music_tiny() -> MusicTransformerConfig:
    """Tests: 2 layers, d_model 32, 4 heads, span 16, JSB tokens."""
    return MusicTransformerConfig(encoding="jsb", vocab_size=ENCODING_VOCAB_SIZES["jsb"], d_model=32, d_ff=64,
                                  num_heads=4, num_layers=2, positional="none", attention=_relative(16),
                                  max_positions=1024, dropout=0.0)


__all__ = ["MusicTransformer", "MusicTransformerConfig", "ENCODING_VOCAB_SIZES", "music_jsb_baseline",
           "music_jsb_relative", "music_jsb_small", "music_performance_small", "music_tiny"]
