"""Weights of a HuggingFace GPT-2 (``GPT2LMHeadModel``) in attnlab's :class:`DecoderLM`.

GPT-2 stores its projections as ``Conv1D`` modules whose weight is ``(in, out)``, the
transpose of ``nn.Linear``'s ``(out, in)``; ``c_attn`` is the fused query/key/value
projection in the same q|k|v order as attnlab's ``qkv_proj``. Key map (per layer i):

=============================================  ==================================================
HuggingFace (``transformer.`` prefix)          attnlab
=============================================  ==================================================
wte.weight                                     decoder.embed.weight (= decoder.head.weight, tied)
wpe.weight                                     decoder.positions.weight
h.i.ln_1                                       decoder.stack.layers.i.self_attn_norm
h.i.attn.c_attn (transposed)                   decoder.stack.layers.i.self_attn.qkv_proj
h.i.attn.c_proj (transposed)                   decoder.stack.layers.i.self_attn.out_proj
h.i.ln_2                                       decoder.stack.layers.i.ffn_norm
h.i.mlp.c_fc (transposed)                      decoder.stack.layers.i.ffn.linear1
h.i.mlp.c_proj (transposed)                    decoder.stack.layers.i.ffn.linear2
ln_f                                           decoder.stack.final_norm
=============================================  ==================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor

from attnlab.files import read_config_json
from attnlab.interop.weights import copy_converted_weights, foreign_config, read_safetensors
from attnlab.models.lm import DecoderLM, DecoderLMConfig

_TRANSPOSED = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
_LAYER_KEYS = {
    "ln_1.weight": "self_attn_norm.weight", "ln_1.bias": "self_attn_norm.bias",
    "attn.c_attn.weight": "self_attn.qkv_proj.weight", "attn.c_attn.bias": "self_attn.qkv_proj.bias",
    "attn.c_proj.weight": "self_attn.out_proj.weight", "attn.c_proj.bias": "self_attn.out_proj.bias",
    "ln_2.weight": "ffn_norm.weight", "ln_2.bias": "ffn_norm.bias",
    "mlp.c_fc.weight": "ffn.linear1.weight", "mlp.c_fc.bias": "ffn.linear1.bias",
    "mlp.c_proj.weight": "ffn.linear2.weight", "mlp.c_proj.bias": "ffn.linear2.bias",
}


# attnlab's DecoderLMConfig field -> the GPT-2 config.json field it comes from (errors name the file's)
_HF_NAMES = {"vocab_size": "vocab_size", "d_model": "n_embd", "num_heads": "n_head", "d_ff": "n_inner",
             "num_layers": "n_layer", "max_positions": "n_positions", "dropout": "resid_pdrop",
             "attention_dropout": "attn_pdrop", "layer_norm_eps": "layer_norm_epsilon", "bos_id": "bos_token_id",
             "eos_id": "eos_token_id", "activation": "activation_function"}


def config_from_hf_gpt2(hf_config, *, source: str = "from_hf_gpt2") -> DecoderLMConfig:
    """The :class:`DecoderLMConfig` of a ``transformers.GPT2Config`` (or of its
    ``config.json`` as a dict: the same fields, GPT2Config's defaults where one is absent).
    Types, caps and ranges are checked as for attnlab's own configs; errors name ``source``
    and GPT-2's own fields (``n_layer``, not ``num_layers``)."""
    if isinstance(hf_config, Mapping):
        hf_config = _Gpt2Fields(hf_config)
    activation = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu",
                  "relu": "relu"}.get(hf_config.activation_function) if isinstance(
                      hf_config.activation_function, str) else None
    if activation is None:
        raise ValueError(f"{source}: unsupported activation_function={hf_config.activation_function!r}")
    if getattr(hf_config, "scale_attn_weights", True) is not True or getattr(
            hf_config, "scale_attn_by_inverse_layer_idx", False) is not False:
        raise ValueError(f"{source}: only the standard 1/sqrt(head_dim) attention scaling is supported "
                         "(scale_attn_weights true, scale_attn_by_inverse_layer_idx false)")
    vocab, width = hf_config.vocab_size, hf_config.n_embd

    def special(value):  # an id outside the vocabulary (GPT-2's 50256 in a smaller model) is no token
        if value is None or isinstance(value, bool) or not isinstance(value, int):
            return value  # None, or a wrong type from_dict names
        return value if isinstance(vocab, int) and not isinstance(vocab, bool) and 0 <= value < vocab else None

    inner = hf_config.n_inner
    if inner is None:
        inner = 4 * width if isinstance(width, int) and not isinstance(width, bool) else width
    values = dict(vocab_size=vocab, d_model=width, num_heads=hf_config.n_head, d_ff=inner,
                  num_layers=hf_config.n_layer, max_positions=hf_config.n_positions, positional="learned",
                  norm_first=True, activation=activation, dropout=hf_config.resid_pdrop,
                  attention_dropout=hf_config.attn_pdrop, layer_norm_eps=hf_config.layer_norm_epsilon,
                  scale_embeddings=False, bos_id=special(hf_config.bos_token_id),
                  eos_id=special(hf_config.eos_token_id))
    # the caps every loaded config meets (no million-layer model from a hostile file)
    return foreign_config(DecoderLMConfig, values, source, _HF_NAMES)


def gpt2_state_dict_to_attnlab(state_dict: Mapping[str, Tensor], num_layers: int) -> dict[str, Tensor]:
    """Rename and transpose a GPT-2 state dict (with or without the ``transformer.`` prefix)."""
    source = {key.removeprefix("transformer."): value for key, value in state_dict.items()}
    out = {"decoder.embed.weight": source["wte.weight"], "decoder.positions.weight": source["wpe.weight"],
           "decoder.stack.final_norm.weight": source["ln_f.weight"],
           "decoder.stack.final_norm.bias": source["ln_f.bias"]}
    for i in range(num_layers):
        for theirs, ours in _LAYER_KEYS.items():
            key = f"h.{i}.{theirs}"
            if key not in source:
                raise ValueError(f"from_hf_gpt2: the GPT-2 state dict has no {key!r}")
            value = source[key]
            out[f"decoder.stack.layers.{i}.{ours}"] = value.t() if theirs in _TRANSPOSED else value
    return out


class _Gpt2Fields:
    """A GPT-2 ``config.json`` read as attributes, with ``GPT2Config``'s defaults."""

    DEFAULTS = {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": None,
                "activation_function": "gelu_new", "resid_pdrop": 0.1, "attn_pdrop": 0.1,
                "layer_norm_epsilon": 1e-5, "bos_token_id": 50256, "eos_token_id": 50256,
                "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False}

    def __init__(self, values: Mapping):
        self._values = {**self.DEFAULTS, **values}

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None


@torch.no_grad()
def from_hf_gpt2(hf_model_or_state_dict, config: DecoderLMConfig | None = None) -> DecoderLM:
    """Build a :class:`DecoderLM` with the weights of a HuggingFace GPT-2.

    Args:
        hf_model_or_state_dict: a ``GPT2LMHeadModel`` / ``GPT2Model``, or its state dict.
        config: the matching :class:`DecoderLMConfig`; default: derived from the model's
            ``config`` (required when passing a bare state dict).
    Returns:
        A DecoderLM in eval mode whose logits equal the HuggingFace model's.
    """
    if isinstance(hf_model_or_state_dict, Mapping):
        state_dict = hf_model_or_state_dict
        if config is None:
            raise ValueError("from_hf_gpt2: pass config= when converting a bare state dict")
    else:
        state_dict = hf_model_or_state_dict.state_dict()
        if config is None:
            config = config_from_hf_gpt2(hf_model_or_state_dict.config)
    weights = gpt2_state_dict_to_attnlab(state_dict, config.num_layers)
    # the tied lm_head appears once, as decoder.embed.weight
    return copy_converted_weights(DecoderLM, config, weights, "from_hf_gpt2", "the GPT-2 weights")

BPE_FILES = ("vocab.json", "merges.txt")


class ByteLevelBPETokenizer:
    """GPT-2's byte-level BPE from a directory's ``vocab.json`` + ``merges.txt`` (through the
    ``tokenizers`` library): ``encode(text) -> ids`` and ``decode(ids) -> text`` as the
    language-model verbs use them; no special tokens are added."""

    def __init__(self, vocab_file: str | os.PathLike, merges_file: str | os.PathLike):
        from tokenizers import ByteLevelBPETokenizer as _Tokenizer

        try:
            self.tokenizer = _Tokenizer(str(vocab_file), str(merges_file))
        except Exception as error:  # the Rust side raises its own exception types
            raise ValueError(f"{vocab_file}, {merges_file}: not a readable byte-level BPE vocabulary ({error})") from None

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def save(self, directory: str | os.PathLike) -> None:
        """Write ``vocab.json`` and ``merges.txt`` into ``directory`` (what :meth:`load` reads)."""
        self.tokenizer.save_model(str(directory))

    @classmethod
    def load(cls, directory: str | os.PathLike) -> ByteLevelBPETokenizer:
        """The byte-level BPE of ``directory/vocab.json`` + ``merges.txt`` (FileNotFoundError when absent)."""
        directory = Path(directory)
        for name in BPE_FILES:
            if not (directory / name).is_file():
                raise FileNotFoundError(f"no byte-level BPE in {directory} ({name} is missing)")
        return cls(directory / "vocab.json", directory / "merges.txt")

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)


class TokenizerJson:
    """A ``tokenizer.json`` (the ``tokenizers`` library's own format, what ``AutoTokenizer``
    reads) as the language-model verbs use a tokenizer: ``encode(text) -> ids`` without
    special tokens, ``decode(ids) -> text``. A GPT-2 directory that ``attnlab export`` wrote
    from a character-level model carries its tokenizer this way."""

    def __init__(self, path: str | os.PathLike):
        from tokenizers import Tokenizer

        try:
            self.tokenizer = Tokenizer.from_file(str(path))
        except Exception as error:  # the Rust side raises its own exception types
            raise ValueError(f"{path}: not a readable tokenizer.json ({error})") from None

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def save(self, directory: str | os.PathLike) -> None:
        """Write ``tokenizer.json`` into ``directory`` (what the constructor reads)."""
        from attnlab.files import atomic_write_bytes

        atomic_write_bytes(Path(directory) / TOKENIZER_JSON, self.tokenizer.to_str().encode("utf-8"))

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)


TOKENIZER_JSON = "tokenizer.json"


def is_hf_gpt2_directory(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` holds a HuggingFace GPT-2 ``config.json`` (``model_type: gpt2``)."""
    return _is_gpt2_config(read_config_json(directory))


def _is_gpt2_config(values: dict | None) -> bool:
    return values is not None and values.get("model_type") == "gpt2"


def load_hf_gpt2(directory: str | os.PathLike, *,
                 device: str = "cpu") -> tuple[DecoderLM, ByteLevelBPETokenizer | TokenizerJson]:
    """``(model, tokenizer)`` of a HuggingFace GPT-2 directory (``config.json``,
    ``model.safetensors``, ``vocab.json``, ``merges.txt``: what ``save_pretrained`` of a
    ``GPT2LMHeadModel`` and its tokenizer writes, e.g. ``huggingface-cli download gpt2``;
    or, without ``vocab.json``, a ``tokenizer.json``, as ``attnlab export`` writes a
    character-level model's tokenizer).
    Reads only JSON, text and safetensors — a directory with only ``pytorch_model.bin`` is
    refused (it would have to be unpickled). ValueError naming the file for anything missing."""
    directory = Path(directory)
    values = read_config_json(directory)  # read once, size-capped
    if not _is_gpt2_config(values):
        raise ValueError(f"{directory}: not a HuggingFace GPT-2 directory (config.json with model_type \"gpt2\")")
    config_path, weights_path = directory / "config.json", directory / "model.safetensors"
    byte_level = (directory / "vocab.json").is_file() or not (directory / "tokenizer.json").is_file()
    for name in ("vocab.json", "merges.txt") if byte_level else ():
        if not (directory / name).is_file():
            raise ValueError(f"{directory / name}: no such file; a GPT-2 directory holds its byte-level BPE in "
                             "vocab.json and merges.txt (or its tokenizer in tokenizer.json)")
    config = config_from_hf_gpt2(values, source=str(config_path))  # before any weight is read
    state_dict = read_safetensors(directory, "GPT-2")
    try:
        weights = gpt2_state_dict_to_attnlab(state_dict, config.num_layers)
    except KeyError as error:
        raise ValueError(f"{weights_path}: the GPT-2 weights have no {error}") from None
    model = copy_converted_weights(DecoderLM, config, weights, str(weights_path), "the GPT-2 weights").eval()
    tokenizer = (ByteLevelBPETokenizer(directory / "vocab.json", directory / "merges.txt") if byte_level
                 else TokenizerJson(directory / "tokenizer.json"))
    if tokenizer.vocab_size > config.vocab_size:
        name = "vocab.json" if byte_level else "tokenizer.json"
        raise ValueError(f"{directory / name}: {tokenizer.vocab_size} tokens but config.json has vocab_size="
                         f"{config.vocab_size}")
    return model.to(device), tokenizer


__all__ = ["ByteLevelBPETokenizer", "TokenizerJson", "config_from_hf_gpt2", "from_hf_gpt2", "gpt2_state_dict_to_attnlab",
           "is_hf_gpt2_directory", "load_hf_gpt2"]
