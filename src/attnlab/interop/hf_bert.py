"""Weights of a HuggingFace BERT (``BertModel`` / ``BertForMaskedLM``) in attnlab's
:class:`BertEncoder`, and loading of a HuggingFace-format BERT directory
(``config.json`` + ``model.safetensors`` + ``vocab.txt``).

HuggingFace keeps separate query/key/value projections; attnlab's ``qkv_proj`` is their
concatenation in q|k|v order. ``nn.Linear`` layouts agree, so nothing is transposed. Key
map (per layer i, keys with or without the ``bert.`` prefix):

==============================================  ======================================
HuggingFace                                     attnlab
==============================================  ======================================
embeddings.word_embeddings                      embed
embeddings.position_embeddings                  positions
embeddings.token_type_embeddings                segments
embeddings.LayerNorm                            embed_norm
encoder.layer.i.attention.self.{query,key,value} stack.layers.i.self_attn.qkv_proj (cat)
encoder.layer.i.attention.output.dense          stack.layers.i.self_attn.out_proj
encoder.layer.i.attention.output.LayerNorm      stack.layers.i.self_attn_norm
encoder.layer.i.intermediate.dense              stack.layers.i.ffn.linear1
encoder.layer.i.output.dense                    stack.layers.i.ffn.linear2
encoder.layer.i.output.LayerNorm                stack.layers.i.ffn_norm
pooler.dense                                    pooler
cls.predictions.transform.dense                 mlm_transform
cls.predictions.transform.LayerNorm             mlm_norm
cls.predictions.bias                            mlm_bias
==============================================  ======================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor

from attnlab.files import read_config_json
from attnlab.interop.weights import copy_converted_weights, foreign_config, foreign_flag, read_safetensors
from attnlab.interop.weights import read_foreign_json as _read_json
from attnlab.models.bert import BertConfig, BertEncoder

_ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
_LAYER_KEYS = {
    "attention.output.dense": "self_attn.out_proj", "attention.output.LayerNorm": "self_attn_norm",
    "intermediate.dense": "ffn.linear1", "output.dense": "ffn.linear2", "output.LayerNorm": "ffn_norm",
}
_TOP_KEYS = {
    "embeddings.word_embeddings.weight": "embed.weight",
    "embeddings.position_embeddings.weight": "positions.weight",
    "embeddings.token_type_embeddings.weight": "segments.weight",
    "embeddings.LayerNorm.weight": "embed_norm.weight", "embeddings.LayerNorm.bias": "embed_norm.bias",
}
_POOLER_KEYS = {"pooler.dense.weight": "pooler.weight", "pooler.dense.bias": "pooler.bias"}
_MLM_KEYS = {
    "cls.predictions.transform.dense.weight": "mlm_transform.weight",
    "cls.predictions.transform.dense.bias": "mlm_transform.bias",
    "cls.predictions.transform.LayerNorm.weight": "mlm_norm.weight",
    "cls.predictions.transform.LayerNorm.bias": "mlm_norm.bias",
    "cls.predictions.bias": "mlm_bias",
}


def config_from_hf_bert(hf_config: Mapping | object, *, source: str = "config") -> BertConfig:
    """The :class:`BertConfig` of a ``transformers.BertConfig`` or its ``config.json`` dict.

    ``pooler`` and ``mlm_head`` are left at their defaults; :func:`from_hf_bert` and
    :func:`load_hf_bert` set them from the weights present.
    """
    get = (lambda name, default=None: hf_config.get(name, default)) if isinstance(hf_config, Mapping) \
        else (lambda name, default=None: getattr(hf_config, name, default))
    model_type = get("model_type")
    if model_type not in ("bert", None):
        raise ValueError(f"{source}: model_type={model_type!r} is not a BERT model")
    if get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{source}: position_embedding_type={get('position_embedding_type')!r} is not supported "
                         f"(only 'absolute')")
    if foreign_flag(get("is_decoder", False), "is_decoder", source) or foreign_flag(
            get("add_cross_attention", False), "add_cross_attention", source):
        raise ValueError(f"{source}: BERT decoders (is_decoder / add_cross_attention) are not supported")
    activation = _ACTIVATIONS.get(get("hidden_act", "gelu")) if isinstance(get("hidden_act", "gelu"), str) else None
    if activation is None:
        raise ValueError(f"{source}: unsupported hidden_act={get('hidden_act')!r}; supported: {sorted(_ACTIVATIONS)}")
    values = dict(vocab_size=get("vocab_size"), d_model=get("hidden_size"), num_heads=get("num_attention_heads"),
                  d_ff=get("intermediate_size"), num_layers=get("num_hidden_layers"),
                  max_positions=get("max_position_embeddings"), type_vocab_size=get("type_vocab_size", 2),
                  activation=activation, dropout=get("hidden_dropout_prob", 0.1),
                  attention_dropout=get("attention_probs_dropout_prob", 0.1),
                  layer_norm_eps=get("layer_norm_eps", 1e-12),
                  pad_id=get("pad_token_id") if get("pad_token_id") is not None else 0)
    missing = sorted(_HF_NAMES.get(name, name) for name, value in values.items() if value is None)
    if missing:
        raise ValueError(f"{source}: missing BERT config field(s) {missing}")
    return foreign_config(BertConfig, values, source, _HF_NAMES)  # errors name config.json's fields


# attnlab's BertConfig field -> the HuggingFace config.json field it comes from
_HF_NAMES = {"d_model": "hidden_size", "num_heads": "num_attention_heads", "d_ff": "intermediate_size",
             "num_layers": "num_hidden_layers", "max_positions": "max_position_embeddings",
             "dropout": "hidden_dropout_prob", "attention_dropout": "attention_probs_dropout_prob",
             "pad_id": "pad_token_id", "activation": "hidden_act"}


def bert_state_dict_to_attnlab(state_dict: Mapping[str, Tensor], num_layers: int, *,
                               source: str = "from_hf_bert") -> dict[str, Tensor]:
    """Rename a BERT state dict (with or without the ``bert.`` prefix) to attnlab's names
    and fuse the query/key/value projections. Pooler and MLM-head weights are kept when
    present; ``cls.predictions.decoder`` is dropped (tied to the token embeddings)."""
    weights = {key.removeprefix("bert."): value for key, value in state_dict.items()}

    def take(key: str) -> Tensor:
        if key not in weights:
            raise ValueError(f"{source}: the BERT weights have no {key!r}")
        return weights[key]

    out = {ours: take(theirs) for theirs, ours in _TOP_KEYS.items()}
    for i in range(num_layers):
        prefix = f"encoder.layer.{i}."
        for part in ("weight", "bias"):
            out[f"stack.layers.{i}.self_attn.qkv_proj.{part}"] = torch.cat(
                [take(f"{prefix}attention.self.{name}.{part}") for name in ("query", "key", "value")])
            for theirs, ours in _LAYER_KEYS.items():
                out[f"stack.layers.{i}.{ours}.{part}"] = take(f"{prefix}{theirs}.{part}")
    if f"encoder.layer.{num_layers}.output.dense.weight" in weights:
        raise ValueError(f"{source}: the weights have more than the config's num_hidden_layers={num_layers} layers")
    for table in (_POOLER_KEYS, _MLM_KEYS):
        if all(key in weights for key in table):
            out.update({ours: weights[theirs] for theirs, ours in table.items()})
    return out


def _load_into(config: BertConfig, state_dict: Mapping[str, Tensor], source: str) -> BertEncoder:
    weights = bert_state_dict_to_attnlab(state_dict, config.num_layers, source=source)
    config = config.replace(pooler="pooler.weight" in weights, mlm_head="mlm_bias" in weights)
    return copy_converted_weights(BertEncoder, config, weights, source, "the BERT weights")


def from_hf_bert(hf_model_or_state_dict, config: BertConfig | None = None) -> BertEncoder:
    """Build a :class:`BertEncoder` with the weights of a HuggingFace ``BertModel`` or
    ``BertForMaskedLM`` (or a state dict plus ``config``). The pooler and the masked-LM
    head are included when the weights have them. Returns the model in eval mode."""
    if isinstance(hf_model_or_state_dict, Mapping):
        if config is None:
            raise ValueError("from_hf_bert: pass config= when converting a bare state dict")
        state_dict = hf_model_or_state_dict
    else:
        state_dict = hf_model_or_state_dict.state_dict()
        if config is None:
            config = config_from_hf_bert(hf_model_or_state_dict.config)
    return _load_into(config, state_dict, "from_hf_bert")


class WordPieceTokenizer:
    """BERT's WordPiece tokenizer from a ``vocab.txt``, via the ``tokenizers`` library.

    ``encode(texts)`` gives padded ``ids``, ``attention_mask`` and ``token_type_ids``
    tensors plus each text's tokens, ``[CLS] ... [SEP]``, truncated to ``max_length``.
    """

    def __init__(self, vocab_file: str | os.PathLike, *, lowercase: bool = True, max_length: int = 512):
        from tokenizers import BertWordPieceTokenizer

        self.vocab_file = str(vocab_file)
        self.max_length, self.lowercase = max_length, lowercase
        try:
            self.tokenizer = BertWordPieceTokenizer(self.vocab_file, lowercase=lowercase)
        except Exception as error:  # the Rust side raises its own exception types
            raise ValueError(f"{vocab_file}: not a readable WordPiece vocabulary ({error})") from None
        for token in ("[CLS]", "[SEP]", "[PAD]", "[UNK]"):
            if self.tokenizer.token_to_id(token) is None:
                raise ValueError(f"{vocab_file}: the vocabulary has no {token} token")
        self.pad_id = self.tokenizer.token_to_id("[PAD]")
        self.tokenizer.enable_truncation(max_length)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def save(self, directory: str | os.PathLike) -> None:
        """Write ``vocab.txt`` (the pieces in id order) and ``tokenizer_config.json``
        (``do_lower_case``) into ``directory``: what :func:`load_wordpiece` reads."""
        from attnlab.files import atomic_write_bytes, atomic_write_json

        pieces = sorted(self.tokenizer.get_vocab().items(), key=lambda item: item[1])
        atomic_write_bytes(Path(directory) / "vocab.txt", "".join(piece + "\n" for piece, _ in pieces).encode("utf-8"))
        atomic_write_json(Path(directory) / "tokenizer_config.json", {"do_lower_case": self.lowercase})

    def token_counts(self, texts: list[str]) -> list[int]:
        """How many tokens each text has with ``[CLS]`` and ``[SEP]``, before the
        truncation to ``max_length`` that :meth:`encode` applies."""
        self.tokenizer.no_truncation()
        try:
            return [len(e.ids) for e in self.tokenizer.encode_batch(list(texts))]
        finally:
            self.tokenizer.enable_truncation(self.max_length)

    def encode(self, texts: list[str], pairs: list[str] | None = None) -> tuple[dict[str, Tensor], list[list[str]]]:
        """Texts -> ({ids, attention_mask, token_type_ids} each ``(B, L)``, tokens per text).
        With ``pairs`` (one second text per text) each row is ``[CLS] text [SEP] pair [SEP]``,
        the pair's tokens of segment 1, the longer of the two truncated first."""
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"pairs: {len(pairs)} second texts for {len(texts)} texts")
        inputs = list(texts) if pairs is None else list(zip(texts, pairs))
        encodings = self.tokenizer.encode_batch(inputs)
        length = max((len(e.ids) for e in encodings), default=0)
        ids = torch.full((len(encodings), length), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(encodings), length), dtype=torch.long)
        types = torch.zeros((len(encodings), length), dtype=torch.long)
        for row, e in enumerate(encodings):
            n = len(e.ids)
            ids[row, :n] = torch.tensor(e.ids)
            mask[row, :n] = 1
            types[row, :n] = torch.tensor(e.type_ids)
        return {"ids": ids, "attention_mask": mask, "token_type_ids": types}, [list(e.tokens) for e in encodings]


def is_hf_bert_directory(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` holds a HuggingFace BERT ``config.json`` (``model_type: bert``)."""
    values = read_config_json(directory)
    return values is not None and values.get("model_type") == "bert"


def load_hf_bert(directory: str | os.PathLike, *, device: str = "cpu") -> tuple[BertEncoder, WordPieceTokenizer]:
    """Load a HuggingFace-format BERT directory: ``config.json`` + ``model.safetensors`` +
    ``vocab.txt`` (lower-casing from ``tokenizer_config.json``'s ``do_lower_case``,
    default true). Reads only JSON, text and safetensors (no pickle); any missing or
    unreadable file raises ValueError naming it."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"{directory}: not a directory")
    config_path, weights_path, vocab_path = (directory / name for name in ("config.json", "model.safetensors",
                                                                           "vocab.txt"))
    values = _read_json(config_path) if config_path.is_file() else None
    if values is not None and values.get("model_type") != "bert" and (
            "family" in values or "model_type" in values or not vocab_path.is_file()):
        what = (f"an attnlab {values['family']} model directory" if "family" in values else
                f"config.json has model_type={values['model_type']!r}, which is not a BERT model"
                if "model_type" in values else "no BERT config and no vocab.txt")
        raise ValueError(f"{directory}: not a HuggingFace BERT directory ({what}); give a directory with a BERT "
                         "config.json (model_type \"bert\"), model.safetensors and vocab.txt")
    for path in (config_path, weights_path, vocab_path):
        if path == weights_path and not path.is_file():
            read_safetensors(directory, "BERT")  # says so (and how to convert a pickled pytorch_model.bin)
        if not path.is_file():
            raise ValueError(f"{path}: no such file; a HuggingFace BERT directory holds config.json, "
                             f"model.safetensors and vocab.txt")
    config = config_from_hf_bert(values, source=str(config_path))
    model = _load_into(config, read_safetensors(directory, "BERT"), str(weights_path))
    return model.to(device), load_wordpiece(directory, config)


def load_wordpiece(directory: str | os.PathLike, config: BertConfig) -> WordPieceTokenizer:
    """The WordPiece tokenizer of a BERT directory: ``vocab.txt`` (lower-casing from
    ``tokenizer_config.json``'s ``do_lower_case``, default true), truncating at the model's
    ``max_positions``; ValueError when it is missing or larger than the model's vocabulary."""
    directory = Path(directory)
    vocab_path = directory / "vocab.txt"
    if not vocab_path.is_file():
        raise ValueError(f"{vocab_path}: no such file; a BERT directory holds its WordPiece vocabulary there")
    tokenizer_config = directory / "tokenizer_config.json"
    lowercase = _read_json(tokenizer_config).get("do_lower_case", True) if tokenizer_config.is_file() else True
    lowercase = foreign_flag(lowercase, "do_lower_case", str(tokenizer_config))
    tokenizer = WordPieceTokenizer(vocab_path, lowercase=lowercase, max_length=config.max_positions)
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(f"{vocab_path}: {tokenizer.vocab_size} tokens but config.json has vocab_size="
                         f"{config.vocab_size}")
    return tokenizer


__all__ = ["WordPieceTokenizer", "bert_state_dict_to_attnlab", "config_from_hf_bert", "from_hf_bert",
           "is_hf_bert_directory", "load_hf_bert", "load_wordpiece"]
