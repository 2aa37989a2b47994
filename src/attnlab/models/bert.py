"""The encoder-only family (BERT, Devlin et al. 2019), the Transformer's encoder on its own.

BERT §3 and Appendix A: token + learned position + segment ("token type") embeddings,
summed and LayerNorm-ed; a stack of the paper's post-LN encoder layers (GELU feed-forward,
LayerNorm eps 1e-12); a pooler (``tanh(W h_[CLS] + b)``) for sentence-level tasks and a
masked-LM head (dense + GELU + LayerNorm, then the output projection tied to the token
embeddings, plus a bias); :class:`BertClassifier` adds BERT's sequence-classification head
(§4.1: dropout + a linear layer on the pooled [CLS], as ``BertForSequenceClassification``).
The layers are attnlab's shared
:class:`~attnlab.layers.blocks.EncoderLayer` with full attention: the same layer code as
the translation encoder.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.attention.masks import key_padding_mask
from attnlab.layers.blocks import EncoderLayer, TransformerStack
from attnlab.layers.embedding import TokenEmbedding
from attnlab.layers.feedforward import ACTIVATIONS
from attnlab.layers.positional import LearnedPositionalEmbedding
from attnlab.linear import Linear
from attnlab.models.base import AttnlabModel, LayerConfig, check_token_ids, require_positive
from attnlab.models.registry import register_model_class, register_preset


@dataclass(frozen=True)
class BertConfig(LayerConfig):
    """Configuration of a :class:`BertEncoder` (defaults: BERT-base, uncased vocabulary).

    ``pooler`` adds the [CLS] pooler (``BertModel``); ``mlm_head`` the masked-LM head
    (``BertForMaskedLM``). ``pad_id`` is the id of [PAD]; which positions are padding is
    given by ``attention_mask`` (default: every id equal to ``pad_id``).
    """

    family: ClassVar[str] = "bert"

    vocab_size: int = 30522
    d_model: int = 768
    num_heads: int = 12
    d_ff: int = 3072
    num_layers: int = 12
    max_positions: int = 512
    type_vocab_size: int = 2
    activation: str = "gelu"
    attention_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    pad_id: int = 0
    pooler: bool = True
    mlm_head: bool = False

    def __post_init__(self):
        super().__post_init__()
        require_positive(self, "vocab_size", "num_layers", "max_positions", "type_vocab_size")
        if self.norm_first:
            raise ValueError("norm_first=True: BERT is post-LN (LayerNorm after each residual sum)")
        if not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(f"pad_id={self.pad_id} is outside the vocabulary [0, {self.vocab_size})")


class BertOutput(NamedTuple):
    """``hidden`` ``(B, L, d_model)``; ``pooled`` ``(B, d_model)`` or None; ``attentions``
    one ``(B, H, L, L)`` tensor per layer when asked for, else None."""

    hidden: Tensor
    pooled: Tensor | None
    attentions: list[Tensor] | None


@register_model_class
class BertEncoder(AttnlabModel):
    """BERT: ``model(ids, attention_mask=..., token_type_ids=...)`` -> :class:`BertOutput`."""

    config_class = BertConfig

    def __init__(self, config: BertConfig):
        super().__init__(config)
        c = config
        self.embed = TokenEmbedding(c.vocab_size, c.d_model, padding_idx=c.pad_id, scale=False)
        self.positions = LearnedPositionalEmbedding(c.max_positions, c.d_model)
        self.segments = TokenEmbedding(c.type_vocab_size, c.d_model, scale=False)
        self.embed_norm = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.embed_dropout = nn.Dropout(c.dropout)
        self.stack = TransformerStack(
            [EncoderLayer(c.d_model, c.num_heads, c.d_ff, dropout=c.dropout, attention_dropout=c.attention_dropout,
                          activation=c.activation, norm_first=False, layer_norm_eps=c.layer_norm_eps)
             for _ in range(c.num_layers)],
            d_model=c.d_model, final_norm=False)
        self.pooler = Linear(c.d_model, c.d_model) if c.pooler else None
        if c.mlm_head:
            self.mlm_transform = Linear(c.d_model, c.d_model)
            self.mlm_norm = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
            self.mlm_bias = nn.Parameter(torch.zeros(c.vocab_size))
        self._init_weights()

    def _init_weights(self) -> None:
        # BERT: N(0, 0.02) for every matrix and embedding, zero biases, LayerNorm (1, 0).
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for table in (self.embed, self.segments):
            nn.init.normal_(table.weight, std=0.02)
        with torch.no_grad():
            self.embed.weight[self.config.pad_id].zero_()

    def forward(self, ids: Tensor, *, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                need_weights: bool = False) -> BertOutput:
        """
        Args:
            ids: ``(B, L)`` token ids (``[CLS] ... [SEP]`` as the tokenizer writes them).
            attention_mask: ``(B, L)``, 1/True at real tokens, 0/False at padding;
                default: ``ids != pad_id``.
            token_type_ids: ``(B, L)`` segment ids (sentence A = 0, B = 1); default all 0.
            need_weights: also return every layer's attention weights.
        """
        c = self.config
        check_token_ids(ids, c.vocab_size, "ids")
        batch, length = ids.shape
        if length > c.max_positions:
            raise ValueError(f"input of {length} tokens is longer than the model's max_positions={c.max_positions}")
        if attention_mask is None:
            key_mask = key_padding_mask(ids, c.pad_id)  # (B, 1, 1, L)
        else:
            if attention_mask.shape != (batch, length):
                raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, expected {(batch, length)}")
            key_mask = attention_mask.bool()[:, None, None, :]
        if bool(key_mask.all()):
            key_mask = None  # no padding: no mask to apply (and the fused kernel may run)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(ids)
        else:
            if token_type_ids.shape != (batch, length):
                raise ValueError(f"token_type_ids has shape {tuple(token_type_ids.shape)}, expected {(batch, length)}")
            check_token_ids(token_type_ids, c.type_vocab_size, "token_type_ids")
        positions = torch.arange(length, device=ids.device)
        x = self.embed(ids) + self.positions(positions) + self.segments(token_type_ids)
        x = self.embed_dropout(self.embed_norm(x))  # (B, L, d_model)
        hidden, weights = self.stack(x, self_mask=key_mask, need_weights=need_weights)
        pooled = torch.tanh(self.pooler(hidden[:, 0])) if self.pooler is not None else None
        return BertOutput(hidden, pooled, [w.self_attn for w in weights] if need_weights else None)

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        """Masked-LM logits ``(B, L, V)`` of the final hidden states (needs ``mlm_head=True``)."""
        if not self.config.mlm_head:
            raise ValueError("this BERT has no masked-LM head (config.mlm_head is False)")
        h = self.mlm_norm(ACTIVATIONS[self.config.activation](self.mlm_transform(hidden)))
        return F.linear(h, self.embed.weight, self.mlm_bias)  # tied to the token embeddings


def encoder_config(config: BertConfig, **changes) -> BertConfig:
    """The plain :class:`BertConfig` of any BERT config (a classifier's: its encoder), with ``changes``."""
    values = {f.name: getattr(config, f.name) for f in fields(BertConfig)}
    return BertConfig(**{**values, **changes})


@dataclass(frozen=True)
class BertClassifierConfig(BertConfig):
    """A :class:`BertClassifier`: a BERT encoder with its pooler and ``num_labels`` outputs.
    Its ``config.json`` says ``"family": "bert_classifier"`` (a model of its own: it is
    trained, scored and served as a text classifier)."""

    family: ClassVar[str] = "bert_classifier"

    num_labels: int = 2

    def __post_init__(self):
        super().__post_init__()
        if not 2 <= self.num_labels <= 2**20:
            raise ValueError(f"num_labels={self.num_labels}: a classifier needs 2 to {2**20:,d} labels")
        if not self.pooler or self.mlm_head:
            raise ValueError("a BERT classifier has the pooler (pooler=True) and no masked-LM head (mlm_head=False)")

    @classmethod
    def of_encoder(cls, config: BertConfig, num_labels: int) -> BertClassifierConfig:
        """The classifier of an encoder ``config`` (a pre-trained BERT's): the same layers."""
        values = asdict(encoder_config(config, pooler=True, mlm_head=False))
        return cls(**values, num_labels=num_labels)


@register_model_class
class BertClassifier(BertEncoder):
    """BERT for sequence classification (Devlin et al. 2019, §4.1): the encoder of
    :class:`BertEncoder`, its pooler ``tanh(W h_[CLS] + b)``, dropout and one linear layer to
    ``num_labels`` logits. ``forward`` is the encoder's (:class:`BertOutput`, attention
    included); :meth:`classify` gives the logits. Parameter names follow the encoder's, plus
    ``classifier.weight`` / ``classifier.bias`` (HuggingFace's names for the same head)."""

    config_class = BertClassifierConfig

    def __init__(self, config: BertClassifierConfig):
        super().__init__(config)
        self.classifier_dropout = nn.Dropout(config.dropout)
        self.classifier = Linear(config.d_model, config.num_labels)
        nn.init.normal_(self.classifier.weight, std=0.02)
        nn.init.zeros_(self.classifier.bias)

    def classify(self, ids: Tensor, *, attention_mask: Tensor | None = None,
                 token_type_ids: Tensor | None = None) -> Tensor:
        """Label logits ``(B, num_labels)`` of ``ids`` ``(B, L)`` (arguments as :meth:`forward`)."""
        pooled = self(ids, attention_mask=attention_mask, token_type_ids=token_type_ids).pooled
        return self.classifier(self.classifier_dropout(pooled))


def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """Sentence embeddings ``(B, d)``: the mean of ``hidden`` ``(B, L, d)`` over real tokens
    (``attention_mask`` ``(B, L)``), as sentence-transformers' mean pooling does."""
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, L, 1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)



@torch.inference_mode()
def sentence_embeddings(model, batch: dict[str, Tensor]) -> Tensor:
    """Unit-length sentence embeddings ``(B, d)`` (float32, on the CPU) of an encoded batch
    (``ids``, ``attention_mask``, ``token_type_ids``, each ``(B, L)``): :func:`mean_pool` over
    the real tokens, then L2-normalised, as ``attnlab embed`` and sentence-transformers'
    all-MiniLM models do."""
    device = next(model.parameters()).device
    batch = {name: value.to(device) for name, value in batch.items()}
    out = model(batch["ids"], attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"])
    return F.normalize(mean_pool(out.hidden, batch["attention_mask"]), dim=-1).float().cpu()

# -- presets ---------------------------------------------------------------------------
@register_preset
def bert_base() -> BertConfig:
    """BERT-base (Devlin et al. 2019, §3): 12 layers, d_model=768, 12 heads, 110M parameters."""
    return BertConfig()


@register_preset
def bert_tiny() -> BertConfig:
    """A tiny BERT for tests: 2 layers, d_model=32, 4 heads, vocabulary 100, 64 positions."""
    return BertConfig(vocab_size=100, d_model=32, num_heads=4, d_ff=64, num_layers=2, max_positions=64,
                      dropout=0.0, attention_dropout=0.0, mlm_head=True)


@register_preset
def bert_classifier_tiny() -> BertClassifierConfig:
    """A tiny BERT text classifier for tests: bert_tiny's layers, 3 labels."""
    return BertClassifierConfig.of_encoder(bert_tiny(), 3)


@register_preset
def bert_mini() -> BertConfig:
    """BERT-Mini (Turc et al. 2019, "Well-Read Students Learn Better"): 4 layers, d_model=256,
    4 heads, d_ff=1024, with its masked-LM head; 128 positions and a vocabulary the
    training text sets (``attnlab train bert``'s default from scratch)."""
    return BertConfig(vocab_size=8000, d_model=256, num_heads=4, d_ff=1024, num_layers=4, max_positions=128,
                      mlm_head=True)


@register_preset
def minilm_l6_h384() -> BertConfig:
    """The layers of MiniLM-L6-H384 (Wang et al. 2020; all-MiniLM-L6-v2's): 6 layers,
    d_model=384, 12 heads, d_ff=1536, 512 positions, the uncased 30,522-token vocabulary."""
    return BertConfig(d_model=384, num_heads=12, d_ff=1536, num_layers=6, mlm_head=True)


__all__ = ["BertConfig", "BertEncoder", "BertOutput", "BertClassifierConfig", "BertClassifier", "encoder_config",
           "bert_classifier_tiny", "bert_mini",
           "minilm_l6_h384", "mean_pool", "sentence_embeddings", "bert_base", "bert_tiny"]
