"""Pretrained translation models: HuggingFace MarianMT (the OPUS-MT ``opus-mt-*`` models)
in attnlab's encoder–decoder :class:`~attnlab.models.transformer.Transformer`, and loading
of a MarianMT directory as ``huggingface-cli download Helsinki-NLP/opus-mt-de-en`` leaves
it (``config.json``, ``model.safetensors`` or ``pytorch_model.bin``, ``source.spm``,
``target.spm``, ``vocab.json``, ``tokenizer_config.json``, ``generation_config.json``).

A Marian model is the paper's post-LN Transformer with: embeddings scaled by sqrt(d_model)
(``scale_embedding``), sinusoidal positions with the sines in the first half and the
cosines in the second (``positional="sinusoidal_halves"``, a table of
``max_position_embeddings`` rows), no final LayerNorm after either stack, swish (SiLU)
activations, one embedding shared by encoder, decoder and output projection, a bias on
the logits (``final_logits_bias``), and decoding that starts from the pad token
(``decoder_start_token_id``) and never proposes it (``bad_words_ids``). HuggingFace keeps
separate query/key/value projections; attnlab's ``qkv_proj`` is their concatenation in
q|k|v order (``nn.Linear`` layouts agree, nothing is transposed). Key map (``model.``
prefix on the HuggingFace side; per layer i):

===============================================  ============================================
HuggingFace                                      attnlab
===============================================  ============================================
shared (= encoder/decoder.embed_tokens, lm_head)  encoder.embed (= decoder.embed, decoder.head)
final_logits_bias (1, V)                         decoder.head.bias (V,)
tie_word_embeddings=false: encoder.embed_tokens, encoder.embed, decoder.embed, decoder.head.weight
decoder.embed_tokens, lm_head                    (three tables, as transformers 5 unties them)
encoder.layers.i.self_attn.{q,k,v}_proj          encoder.stack.layers.i.self_attn.qkv_proj (cat)
encoder.layers.i.self_attn.out_proj              encoder.stack.layers.i.self_attn.out_proj
encoder.layers.i.self_attn_layer_norm            encoder.stack.layers.i.self_attn_norm
encoder.layers.i.fc1 / fc2                       encoder.stack.layers.i.ffn.linear1 / linear2
encoder.layers.i.final_layer_norm                encoder.stack.layers.i.ffn_norm
decoder.layers.i.encoder_attn.{q,k,v}_proj       decoder.stack.layers.i.cross_attn.qkv_proj (cat)
decoder.layers.i.encoder_attn.out_proj           decoder.stack.layers.i.cross_attn.out_proj
decoder.layers.i.encoder_attn_layer_norm         decoder.stack.layers.i.cross_attn_norm
(decoder self-attention, FFN, norms as encoder)  decoder.stack.layers.i....
{encoder,decoder}.embed_positions (if saved)     checked against attnlab's table, not copied
===============================================  ============================================
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor

from attnlab.files import read_config_json
from attnlab.interop.weights import (FOREIGN_BUFFERS, copy_converted_weights, foreign_config, foreign_flag,
                                     foreign_int, read_safetensors)
from attnlab.interop.weights import read_foreign_json as _read_json
from attnlab.limits import MAX_BEAM
from attnlab.models.base import MAX_SIZE, check_weights
from attnlab.layers.positional import sinusoidal_table
from attnlab.models.transformer import Transformer, TransformerConfig

_ACTIVATIONS = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh",
                "gelu_pytorch_tanh": "gelu_tanh"}
_LAYER_KEYS = {"self_attn.out_proj": "self_attn.out_proj", "self_attn_layer_norm": "self_attn_norm",
               "fc1": "ffn.linear1", "fc2": "ffn.linear2", "final_layer_norm": "ffn_norm"}
_CROSS_KEYS = {"encoder_attn.out_proj": "cross_attn.out_proj", "encoder_attn_layer_norm": "cross_attn_norm"}
MAX_VOCAB_BYTES = 64 << 20  # vocab.json: opus-mt's 58k pieces take about 1.3 MB
GENERATION_FIELDS = ("num_beams", "max_length", "bad_words_ids", "decoder_start_token_id", "length_penalty")


def _getter(values: Mapping | object):
    if isinstance(values, Mapping):
        return lambda name, default=None: values.get(name, default)
    return lambda name, default=None: getattr(values, name, default)


def _suppress_ids(bad_words_ids, source: str) -> list[int] | None:
    if not bad_words_ids:
        return None
    if not isinstance(bad_words_ids, list) or not all(
            isinstance(words, list) and len(words) == 1 and isinstance(words[0], int) for words in bad_words_ids):
        raise ValueError(f"{source}: bad_words_ids={bad_words_ids!r}: only single-token entries ([[id], ...]) "
                         "are supported")
    return sorted({words[0] for words in bad_words_ids})


def config_from_hf_marian(hf_config: Mapping | object, *, generation: Mapping | None = None,
                          source: str = "config") -> TransformerConfig:
    """The :class:`TransformerConfig` of a ``transformers.MarianConfig`` or its ``config.json``
    dict. ``generation`` (``generation_config.json``'s dict, else the config's own fields)
    gives ``bad_words_ids``, which become ``suppress_ids``."""
    get = _getter(hf_config)
    model_type = get("model_type")
    if model_type not in ("marian", None):
        raise ValueError(f"{source}: model_type={model_type!r} is not a MarianMT model")
    for flag, default in (("share_encoder_decoder_embeddings", True), ("tie_word_embeddings", True),
                          ("scale_embedding", False), ("normalize_before", False), ("add_final_layer_norm", False)):
        foreign_flag(get(flag, default), flag, source)
    if not get("share_encoder_decoder_embeddings", True):
        raise ValueError(f"{source}: share_encoder_decoder_embeddings=false (separate source and target "
                         "vocabularies) is not supported; attnlab reads joint-vocabulary Marian models")
    activation = _ACTIVATIONS.get(get("activation_function", "swish")) if isinstance(
        get("activation_function", "swish"), str) else None
    if activation is None:
        raise ValueError(f"{source}: unsupported activation_function={get('activation_function')!r}; "
                         f"supported: {sorted(_ACTIVATIONS)}")
    for ours, (enc, dec) in {"num_heads": ("encoder_attention_heads", "decoder_attention_heads"),
                             "d_ff": ("encoder_ffn_dim", "decoder_ffn_dim")}.items():
        if get(enc) != get(dec):
            raise ValueError(f"{source}: {enc}={get(enc)} differs from {dec}={get(dec)}; attnlab's encoder and "
                             f"decoder share {ours}")
    if get("normalize_before", False) or get("add_final_layer_norm", False):
        raise ValueError(f"{source}: pre-LN Marian variants (normalize_before / add_final_layer_norm) are not "
                         "supported")
    generation = dict(generation or {})
    bad_words = generation.get("bad_words_ids", get("bad_words_ids"))
    pad = get("pad_token_id")
    values = dict(vocab_size=get("vocab_size"), d_model=get("d_model"), num_heads=get("encoder_attention_heads"),
                  d_ff=get("encoder_ffn_dim"), num_encoder_layers=get("encoder_layers"),
                  num_decoder_layers=get("decoder_layers"), max_positions=get("max_position_embeddings"),
                  positional="sinusoidal_halves", norm_first=False, final_norm=False, activation=activation,
                  dropout=get("dropout", 0.1), attention_dropout=get("attention_dropout", 0.0),
                  activation_dropout=get("activation_dropout", 0.0), layer_norm_eps=1e-5,
                  share_embeddings=bool(get("tie_word_embeddings", True)),
                  tie_output_projection=bool(get("tie_word_embeddings", True)),
                  scale_embeddings=bool(get("scale_embedding", False)), output_bias=True,
                  pad_id=pad, bos_id=generation.get("decoder_start_token_id", get("decoder_start_token_id", pad)),
                  eos_id=get("eos_token_id"), suppress_ids=_suppress_ids(bad_words, source))
    missing = sorted(_HF_NAMES.get(name, name) for name, value in values.items()
                     if value is None and name != "suppress_ids")
    if missing:
        raise ValueError(f"{source}: missing MarianMT config field(s) {missing}")
    return foreign_config(TransformerConfig, values, source, _HF_NAMES)  # errors name config.json's fields


# attnlab's TransformerConfig field -> the MarianMT config.json field it comes from
_HF_NAMES = {"num_heads": "encoder_attention_heads", "d_ff": "encoder_ffn_dim", "num_encoder_layers": "encoder_layers",
             "num_decoder_layers": "decoder_layers", "max_positions": "max_position_embeddings",
             "attention_dropout": "attention_dropout", "pad_id": "pad_token_id", "bos_id": "decoder_start_token_id",
             "eos_id": "eos_token_id", "suppress_ids": "bad_words_ids", "activation": "activation_function"}


def marian_state_dict_to_attnlab(state_dict: Mapping[str, Tensor], config: TransformerConfig, *,
                                 source: str = "from_hf_marian") -> dict[str, Tensor]:
    """Rename a MarianMT state dict (with or without the ``model.`` prefix) to attnlab's
    names and fuse the query/key/value projections. Saved position tables are checked
    against attnlab's (ValueError if they differ), not copied."""
    weights = {key.removeprefix("model."): value for key, value in state_dict.items()}

    def take(key: str) -> Tensor:
        if key not in weights:
            raise ValueError(f"{source}: the MarianMT weights have no {key!r}")
        return weights[key]

    def embedding(side: str) -> Tensor:
        # Tied models may store only model.shared; untied ones (tie_word_embeddings=false:
        # transformers >= 5 then unties the encoder's and decoder's tables too) their own.
        names = ("shared.weight", f"{side}.embed_tokens.weight")
        for name in names if config.share_embeddings else names[::-1]:
            if name in weights:
                return weights[name]
        raise ValueError(f"{source}: the MarianMT weights have no 'model.shared.weight'")

    out = {"encoder.embed.weight": embedding("encoder")}
    # Like HuggingFace, a file without final_logits_bias means zeros.
    out["decoder.head.bias"] = weights.get("final_logits_bias", torch.zeros(config.vocab_size)).reshape(-1)
    if not config.share_embeddings:
        out["decoder.embed.weight"] = embedding("decoder")
    if not config.tie_output_projection:
        out["decoder.head.weight"] = take("lm_head.weight")
    for side, count in (("encoder", config.num_encoder_layers), ("decoder", config.num_decoder_layers)):
        attentions = {"self_attn": "self_attn"} if side == "encoder" else {"self_attn": "self_attn",
                                                                             "encoder_attn": "cross_attn"}
        keys = dict(_LAYER_KEYS) if side == "encoder" else {**_LAYER_KEYS, **_CROSS_KEYS}
        for i in range(count):
            theirs, ours = f"{side}.layers.{i}.", f"{side}.stack.layers.{i}."
            for part in ("weight", "bias"):
                for hf_name, name in attentions.items():
                    out[f"{ours}{name}.qkv_proj.{part}"] = torch.cat(
                        [take(f"{theirs}{hf_name}.{p}_proj.{part}") for p in ("q", "k", "v")])
                for hf_name, name in keys.items():
                    out[f"{ours}{name}.{part}"] = take(f"{theirs}{hf_name}.{part}")
        if f"{side}.layers.{count}.fc1.weight" in weights:
            raise ValueError(f"{source}: the weights have more {side} layers than the config's {count}")
        table = weights.get(f"{side}.embed_positions.weight")
        if table is not None:
            expected = sinusoidal_table(table.shape[0], table.shape[1], layout="halves")
            if table.shape != (config.max_positions, config.d_model) or not torch.allclose(
                    table.float(), expected, atol=1e-5):
                raise ValueError(f"{source}: {side}.embed_positions is not Marian's sinusoidal table for "
                                 f"max_position_embeddings={config.max_positions}, d_model={config.d_model}")
    return out


def from_hf_marian(hf_model_or_state_dict, config: TransformerConfig | None = None) -> Transformer:
    """Build a :class:`Transformer` with the weights of a HuggingFace ``MarianMTModel``
    (or a state dict plus ``config``). Returns the model in eval mode; its logits equal the
    HuggingFace model's (``decoder_input_ids`` starting with ``decoder_start_token_id``)."""
    if isinstance(hf_model_or_state_dict, Mapping):
        if config is None:
            raise ValueError("from_hf_marian: pass config= when converting a bare state dict")
        state_dict = hf_model_or_state_dict
    else:
        state_dict = hf_model_or_state_dict.state_dict()
        if config is None:
            generation = getattr(hf_model_or_state_dict, "generation_config", None)
            config = config_from_hf_marian(hf_model_or_state_dict.config,
                                           generation=None if generation is None else generation.to_dict())
    weights = marian_state_dict_to_attnlab(state_dict, config)
    return copy_converted_weights(Transformer, config, weights, "from_hf_marian", "the MarianMT weights")


class MarianTokenizer:
    """MarianMT's tokenizer (HuggingFace's ``MarianTokenizer``, joint vocabulary): the source
    sentencepiece model (``source.spm``) splits a sentence into pieces, ``vocab.json`` maps
    pieces to ids (unknown pieces to ``<unk>``); the target model (``target.spm``) joins the
    output pieces. A leading language code (``>>fr<<``, multilingual models) is one token.
    Sentences are punctuation-normalised with sacremoses' ``MosesPunctNormalizer`` when
    sacremoses is installed, as HuggingFace's tokenizer does (otherwise unchanged).

    The interface :class:`~attnlab.translation.Translator` uses: ``vocab_size``,
    ``encode_batch`` (ids without EOS), ``decode`` (special tokens dropped), ``pieces``;
    fine-tuning (``attnlab train translation --init``) also ``encode_pairs``: targets split by
    ``target.spm``, as HuggingFace's ``tokenizer(text_target=...)`` does.
    """

    special_tokens = ("</s>", "<unk>", "<pad>")

    def __init__(self, source_spm: str | os.PathLike, target_spm: str | os.PathLike, vocab: Mapping[str, int], *,
                 source_lang: str | None = None):
        import sentencepiece

        self.processors = []
        for path in (source_spm, target_spm):
            processor = sentencepiece.SentencePieceProcessor()
            try:
                processor.Load(str(path))
            except (OSError, RuntimeError) as error:
                raise ValueError(f"{path}: not a readable sentencepiece model ({error})") from None
            self.processors.append(processor)
        self.source, self.target = self.processors
        self.vocab = dict(vocab)
        for token in self.special_tokens:
            if token not in self.vocab:
                raise ValueError(f"vocab.json has no {token} token")
        self.id_to_piece = {index: piece for piece, index in self.vocab.items()}
        if len(self.id_to_piece) != len(self.vocab) or set(self.id_to_piece) != set(range(len(self.vocab))):
            raise ValueError("vocab.json: ids must be 0..N-1, each once")
        self.unk_id, self.eos_id, self.pad_id = (self.vocab[t] for t in ("<unk>", "</s>", "<pad>"))
        self.special_ids = {self.vocab[t] for t in self.special_tokens}
        self.source_lang = source_lang
        self.normalize = _punctuation_normalizer(source_lang)

    def files(self) -> dict[str, bytes]:
        """``source.spm``, ``target.spm`` (the sentencepiece models as read, byte for byte),
        ``vocab.json`` and ``tokenizer_config.json``: what :meth:`save` writes and :meth:`load`
        reads (a fine-tuning run carries them in its checkpoints and model)."""
        from attnlab.files import strict_json_bytes

        return {"source.spm": self.source.serialized_model_proto(),
                "target.spm": self.target.serialized_model_proto(),
                "vocab.json": strict_json_bytes(self.vocab, indent=None),
                "tokenizer_config.json": strict_json_bytes({"source_lang": self.source_lang, "separate_vocabs": False})}

    def save(self, directory: str | os.PathLike) -> None:
        """Write :meth:`files` into ``directory`` (each atomically)."""
        from attnlab.files import atomic_write_bytes

        for name, content in self.files().items():
            atomic_write_bytes(Path(directory) / name, content)

    @classmethod
    def load(cls, directory: str | os.PathLike) -> MarianTokenizer:
        """Read ``source.spm``, ``target.spm``, ``vocab.json`` (+ ``tokenizer_config.json``)."""
        directory = Path(directory)
        for name in ("source.spm", "target.spm", "vocab.json"):
            if not (directory / name).is_file():
                raise ValueError(f"{directory / name}: no such file; a MarianMT directory holds source.spm, "
                                 "target.spm and vocab.json")
        settings = _read_json(directory / "tokenizer_config.json") if (directory / "tokenizer_config.json").is_file() \
            else {}
        source_lang = settings.get("source_lang")
        if source_lang is not None and not isinstance(source_lang, str):
            raise ValueError(f"{directory / 'tokenizer_config.json'}: source_lang={source_lang!r} is not a string")
        if foreign_flag(settings.get("separate_vocabs", False), "separate_vocabs",
                        str(directory / "tokenizer_config.json")):
            raise ValueError(f"{directory / 'tokenizer_config.json'}: separate_vocabs=true is not supported "
                             "(attnlab reads joint-vocabulary Marian models)")
        vocab = _read_json(directory / "vocab.json", max_bytes=MAX_VOCAB_BYTES)
        if not all(isinstance(index, int) and not isinstance(index, bool) for index in vocab.values()):
            raise ValueError(f"{directory / 'vocab.json'}: expected an object of piece -> integer id")
        try:
            return cls(directory / "source.spm", directory / "target.spm", vocab,
                       source_lang=settings.get("source_lang"))
        except ValueError as error:
            raise ValueError(f"{directory}: {error}") from None

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str, *, target: bool = False) -> list[int]:
        """Token ids of one sentence, without the EOS the translator appends; ``target``: a
        target-side sentence, split by ``target.spm`` (a training pair's reference)."""
        text = self.normalize(text) if text else ""
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[: end + 2]], text[end + 2:]
        pieces = code + (self.target if target else self.source).encode(text, out_type=str)
        return [self.vocab.get(piece, self.unk_id) for piece in pieces]

    def encode_batch(self, texts: Sequence[str], *, target: bool = False) -> list[list[int]]:
        return [self.encode(text, target=target) for text in texts]

    def encode_pairs(self, pairs: Iterable[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
        """``(source ids, target ids)`` of each ``(source, target)`` pair (e.g. a ``ParallelCorpus``),
        without EOS: the source by ``source.spm``, the target by ``target.spm``."""
        return [(self.encode(source), self.encode(target, target=True)) for source, target in pairs]

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.id_to_piece.get(int(i), "<unk>") for i in ids]

    def decode(self, ids: Sequence[int]) -> str:
        """The target text of ``ids``: special tokens (EOS, pad, unk) dropped, pieces joined
        by the target sentencepiece model."""
        pieces = [self.id_to_piece[int(i)] for i in ids if int(i) not in self.special_ids and int(i) in self.id_to_piece]
        return self.target.decode_pieces(pieces).replace("\u2581", " ").strip()


def _punctuation_normalizer(source_lang: str | None):
    try:
        from sacremoses import MosesPunctNormalizer
    except ImportError:
        return lambda text: text
    return MosesPunctNormalizer(source_lang).normalize


def is_hf_marian_directory(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` holds a HuggingFace ``config.json`` with ``model_type: marian``."""
    values = read_config_json(directory)  # None: not ours to judge, the model loader names the problem
    return values is not None and values.get("model_type") == "marian"


def _load_weights(directory: Path) -> dict[str, Tensor]:
    """``model.safetensors``, or else ``pytorch_model.bin`` through ``torch.load(weights_only=True)``
    (tensors only: no code runs while it is read)."""
    safetensors_path, bin_path = directory / "model.safetensors", directory / "pytorch_model.bin"
    if safetensors_path.is_file():
        return read_safetensors(directory, "MarianMT")
    if bin_path.is_file():
        try:
            state_dict = torch.load(bin_path, map_location="cpu", weights_only=True)
        except Exception as error:  # pickle's and torch's many exception types: one message
            raise ValueError(f"{bin_path}: not a readable weights-only PyTorch file ({type(error).__name__}: "
                             f"{str(error).splitlines()[0] if str(error) else ''})") from None
        if not isinstance(state_dict, dict) or not all(isinstance(v, Tensor) for v in state_dict.values()):
            raise ValueError(f"{bin_path}: expected a state dict of tensors")
        check_weights(state_dict, str(bin_path), buffers=FOREIGN_BUFFERS)
        return state_dict
    raise ValueError(f"{directory}: holds neither model.safetensors nor pytorch_model.bin")


def read_generation_defaults(directory: str | os.PathLike) -> dict:
    """The decoding settings a MarianMT directory declares (``num_beams``, ``max_length``, ...):
    ``generation_config.json`` where present, else the same fields of ``config.json``. Each
    value is checked (type and range: ``num_beams`` 1 to :data:`attnlab.limits.MAX_BEAM`)
    and an error names the file it came from and its field."""
    directory = Path(directory)
    config = _read_json(directory / "config.json")
    path = directory / "generation_config.json"
    generation = _read_json(path) if path.is_file() else {}
    values = {}
    for name in GENERATION_FIELDS:
        source = path if name in generation else directory / "config.json"
        value = generation.get(name, config.get(name))
        if value is not None:
            values[name] = _generation_value(name, value, str(source))
    return values


def check_generation_defaults(values: Mapping, source: str) -> None:
    """Check decoding settings as :func:`read_generation_defaults` does (``translation.json``'s
    ``generation`` of a MarianMT model attnlab saved); ValueError naming ``source`` and the field."""
    for name, value in values.items():
        if name in GENERATION_FIELDS:
            _generation_value(name, value, source)


def _generation_value(name: str, value, source: str):
    """One decoding setting of a MarianMT file, checked; ValueError naming ``source`` and ``name``."""
    if name == "num_beams":
        value = foreign_int(value, name, source, minimum=1)
        if value > MAX_BEAM:
            raise ValueError(f"{source}: num_beams={value} exceeds the largest beam attnlab searches ({MAX_BEAM})")
    elif name == "max_length":
        value = foreign_int(value, name, source, minimum=1)
        if value > MAX_SIZE:
            raise ValueError(f"{source}: max_length={value} exceeds the cap of {MAX_SIZE:,d} a loaded file may ask for")
    elif name == "decoder_start_token_id":
        value = foreign_int(value, name, source)
    elif name == "length_penalty":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{source}: length_penalty={value!r} is not a finite number")
    elif name == "bad_words_ids":
        _suppress_ids(value, source)
    return value


def load_hf_marian(directory: str | os.PathLike, *, device: str = "cpu") -> tuple[Transformer, MarianTokenizer, dict]:
    """Load a HuggingFace MarianMT directory (``huggingface-cli download Helsinki-NLP/opus-mt-de-en``):
    returns ``(model, tokenizer, generation defaults)``. Reads JSON, sentencepiece models,
    safetensors, or ``pytorch_model.bin`` with ``weights_only=True``; any missing or
    unreadable file raises ValueError naming it."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"{directory}: not a directory")
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise ValueError(f"{config_path}: no such file")
    generation = read_generation_defaults(directory)
    config = config_from_hf_marian(_read_json(config_path), generation=generation, source=str(config_path))
    # the weights are checked as every loader's are (floating point, finite: check_weights)
    weights = marian_state_dict_to_attnlab(_load_weights(directory), config, source=str(directory))
    model = copy_converted_weights(Transformer, config, weights, str(directory), "the MarianMT weights")
    tokenizer = MarianTokenizer.load(directory)
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(f"{directory / 'vocab.json'}: {tokenizer.vocab_size} tokens but config.json has "
                         f"vocab_size={config.vocab_size}")
    if (tokenizer.pad_id, tokenizer.eos_id) != (config.pad_id, config.eos_id):
        raise ValueError(f"{directory}: vocab.json's <pad>/</s> ids ({tokenizer.pad_id}, {tokenizer.eos_id}) differ "
                         f"from config.json's pad_token_id/eos_token_id ({config.pad_id}, {config.eos_id})")
    return model.to(device), tokenizer, generation


__all__ = ["MarianTokenizer", "config_from_hf_marian", "from_hf_marian", "is_hf_marian_directory", "load_hf_marian",
           "marian_state_dict_to_attnlab", "read_generation_defaults", "check_generation_defaults"]
