"""attnlab models as HuggingFace ``transformers`` directories: the converters of
:mod:`~attnlab.interop.hf_gpt2`, :mod:`~attnlab.interop.hf_bert` and
:mod:`~attnlab.interop.hf_marian` run backwards (their key maps, read the other way).

* a decoder-only LM -> GPT-2 (``GPT2LMHeadModel``, ``AutoModelForCausalLM``): pre-LN,
  learned positions, plain causal attention, a final LayerNorm, the head tied to the token
  embedding, unscaled embeddings; a character tokenizer travels as a ``tokenizer.json``
  (one WordLevel token per character), a GPT-2 directory's byte-level BPE as its own files.
* a BERT -> ``BertModel`` (``BertForMaskedLM`` with the masked-LM head) + ``vocab.txt``.
* an encoder–decoder -> ``MarianMTModel`` + ``MarianTokenizer`` files: post-LN, no final
  LayerNorm, sinusoidal positions (the paper's interleaved layout is carried by permuting
  the model dimension, see :func:`_halves_permutation`), one shared vocabulary; attnlab's
  sentencepiece model serves as both ``source.spm`` and ``target.spm``.

Each exporter checks the config field by field and refuses, naming the difference, what
the target cannot compute (:func:`attnlab.interop.export.refuse_differences`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from attnlab.attention.patterns import CausalAttention, FullAttention, build_pattern
from attnlab.interop.export import Export, StateReader, json_bytes, refuse_differences

__all__ = ["bert_export", "char_tokenizer_json", "gpt2_export", "marian_export"]

# attnlab activation -> the name transformers' ACT2FN computes it under
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}


def _pattern_is(spec, kind: type) -> bool:
    return type(build_pattern(spec)) is kind


def _common_problems(model, layout: str) -> list[str]:
    problems = []
    if getattr(model, "quantized", None):
        problems.append(f"the model is {model.quantized}-quantised (export the float model)")
    if model.config.activation not in HF_ACTIVATIONS:
        problems.append(f"activation={model.config.activation!r} has no {layout} name")
    return problems


def _copy_files(source: Path, names) -> dict[str, bytes]:
    return {name: (source / name).read_bytes() for name in names if (source / name).is_file()}


# ---------------------------------------------------------------------------- GPT-2
def char_tokenizer_json(chars: list[str]) -> bytes:
    """A ``tokenizer.json`` (the ``tokenizers`` library's format, which ``AutoTokenizer`` and
    ``PreTrainedTokenizerFast`` read) that encodes exactly as attnlab's character tokenizer:
    every character (code point, newlines included) is one token, ids in ``chars``' order,
    no normalisation, no special tokens added; decoding joins the characters. A character
    outside the vocabulary is an error there too (WordLevel without its unknown token)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {char: index for index, char in enumerate(chars)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk> (none: every character is in the vocabulary)"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    text = "".join(chars)
    if tokenizer.encode(text, add_special_tokens=False).ids != list(range(len(chars))) or \
            tokenizer.decode(list(range(len(chars)))) != text:
        raise ValueError("the character tokenizer has no exact tokenizer.json form (a character the "
                         "splitter does not isolate)")
    return tokenizer.to_str().encode("utf-8")


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data):
            raise ValueError("truncated")
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not byte & 0x80:
            return value, i


def _proto_fields(data: bytes):
    """``(field number, value)`` of a serialised protobuf message: varints as ints, fixed32 as 4
    bytes, length-delimited fields as bytes (what a sentencepiece model is; no protobuf needed)."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        wire = key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, i = data[i:i + size], i + size
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i:i + size], i + size
        else:
            raise ValueError(f"protobuf wire type {wire}")
        yield key >> 3, value


def line_tokenizer_json(model_proto: bytes, newline_id: int, encode) -> bytes:
    """A ``tokenizer.json`` that encodes as attnlab's sentencepiece line tokenizer does: each
    line through sentencepiece's BPE (its precompiled ``nmt_nfkc`` normalisation, whitespace
    stripped and collapsed, a ``▁`` prefix per line, merges ranked by the merged piece's
    score, runs of unknown characters fused into one ``<unk>``) and the lines joined by
    ``newline_id`` (the EOS id, which becomes the token ``"\\n"``); decoding joins the lines
    back. ValueError when the model uses what this form does not carry (unigram, byte
    fallback, user-defined pieces, other normalisation flags), or when the result does not
    encode every piece of the vocabulary as ``encode`` (the line tokenizer's) does."""
    import struct

    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    pieces, trainer, normalizer = [], {}, {}
    try:
        for number, value in _proto_fields(model_proto):
            if number == 1:
                fields = dict(_proto_fields(value))
                pieces.append((fields[1].decode("utf-8"), struct.unpack("<f", fields.get(2, b"\0" * 4))[0],
                               fields.get(3, 1)))
            elif number in (2, 3):
                (trainer if number == 2 else normalizer).update(_proto_fields(value))
    except (ValueError, KeyError, UnicodeDecodeError, struct.error) as error:
        raise ValueError(f"tokenizer.model is not a readable sentencepiece model ({error})") from None
    normal, unknown, control = 1, 2, 3
    problems = []
    if trainer.get(3, 1) != 2:
        problems.append("a unigram sentencepiece model (only BPE is carried)")
    if trainer.get(35, 0) or trainer.get(24, 0):
        problems.append("byte fallback or whitespace as suffix")
    if not (normalizer.get(3, 1) and normalizer.get(4, 1) and normalizer.get(5, 1)) or normalizer.get(6):
        problems.append("normalisation flags other than sentencepiece's defaults")
    if any(kind not in (normal, unknown, control) for _, _, kind in pieces):
        problems.append("user-defined or unused pieces")
    unknowns = [piece for piece, _, kind in pieces if kind == unknown]
    if problems or len(unknowns) != 1 or not 0 <= newline_id < len(pieces) or pieces[newline_id][2] != control:
        raise ValueError("its sentencepiece model has no exact tokenizer.json form here: "
                         + (", ".join(problems) or "not attnlab's special pieces"))
    vocab = {("\n" if i == newline_id else piece): i for i, (piece, _, _) in enumerate(pieces)}
    known = {piece for piece, _, kind in pieces if kind == normal}
    merges = []
    for _, index, piece in sorted((-score, i, piece) for i, (piece, score, kind) in enumerate(pieces) if kind == normal):
        splits = [(vocab[piece[:k]], vocab[piece[k:]], piece[:k], piece[k:]) for k in range(1, len(piece))
                  if piece[:k] in known and piece[k:] in known]
        merges += [(left, right) for _, _, left, right in sorted(splits)]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unknowns[0], fuse_unk=True))
    charsmap = normalizer.get(2, b"")
    steps = [normalizers.Precompiled(charsmap)] if charsmap else []
    tokenizer.normalizer = normalizers.Sequence(steps + [normalizers.Strip(), normalizers.Replace(Regex(" {2,}"), " ")])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tokenizer.add_tokens([AddedToken("\n", normalized=False, special=False)])  # split first: one line at a time
    drop = [decoders.Replace(piece, "") for i, (piece, _, kind) in enumerate(pieces) if kind == control and i != newline_id]
    # sentencepiece drops the whitespace a line's pieces start with (the dummy prefix and any "▁"
    # pieces before the first text); <unk> decodes as " ⁇ ", kept out of the way (a noncharacter)
    # until then, since its space stays
    tokenizer.decoder = decoders.Sequence(drop + [decoders.Replace(unknowns[0], "\uffff"),
                                                  decoders.Replace("\u2581", " "), decoders.Fuse(),
                                                  decoders.Replace(Regex("\n +"), "\n"),
                                                  decoders.Replace(Regex("^ +"), ""),
                                                  decoders.Replace("\uffff", " \u2047 ")])
    samples = [piece.replace("\u2581", " ") for piece, _, kind in pieces if kind == normal]
    samples.append("\n".join(samples[:50]))
    if [e.ids for e in tokenizer.encode_batch(samples, add_special_tokens=False)] != [encode(t) for t in samples]:
        raise ValueError("its sentencepiece model has no exact tokenizer.json form here (a piece encodes differently)")
    return tokenizer.to_str().encode("utf-8")


def gpt2_export(pipeline) -> Export:
    """A decoder-only language model as a GPT-2 directory (see the module docstring)."""
    from attnlab.interop.hf_gpt2 import _LAYER_KEYS, _TRANSPOSED, is_hf_gpt2_directory

    model, tokenizer, source = pipeline.model, pipeline.tokenizer, Path(pipeline.directory)
    c = model.config
    problems = _common_problems(model, "GPT-2")
    if c.positional != "learned":
        problems.append(f"positional={c.positional!r}: GPT-2 adds a learned position table (wpe); sinusoidal, "
                        "rotary or no positions (NoPE) are not expressible")
    if not c.norm_first:
        problems.append("norm_first=false (post-LN): GPT-2's blocks are pre-LN")
    if not _pattern_is(c.attention, CausalAttention):
        problems.append(f"attention={c.attention!r}: GPT-2 attends to every earlier position (plain causal); "
                        "local, banded or relative attention is not expressible")
    if c.scale_embeddings:
        problems.append("scale_embeddings=true: GPT-2 does not multiply token embeddings by sqrt(d_model)")
    files: dict[str, bytes] = {}
    if is_hf_gpt2_directory(source):  # a GPT-2 directory read by attnlab: its tokenizer files as they are
        files.update(_copy_files(source, ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
                                          "special_tokens_map.json")))
    elif getattr(tokenizer, "chars", None) is not None:  # attnlab's character tokenizer
        try:
            files["tokenizer.json"] = char_tokenizer_json(tokenizer.chars)
        except ValueError as error:
            problems.append(str(error))
        files["tokenizer_config.json"] = json_bytes({
            "tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
            "model_max_length": c.max_positions})
    elif getattr(tokenizer, "newline_id", None) is not None and (source / "tokenizer.model").is_file():
        try:  # attnlab's line tokenizer: sentencepiece BPE per line, lines joined by the EOS id
            files["tokenizer.json"] = line_tokenizer_json((source / "tokenizer.model").read_bytes(),
                                                          tokenizer.newline_id, tokenizer.encode)
        except ValueError as error:
            problems.append(f"{source / 'tokenizer.model'}: {error}")
        files["tokenizer_config.json"] = json_bytes({
            "tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
            "model_max_length": c.max_positions})
    else:
        problems.append(f"its tokenizer ({type(tokenizer).__name__}) has no exact GPT-2 form (byte-level BPE or a "
                        "tokenizer.json)")
    state = StateReader(model)
    if not state.tied("decoder.head.weight", "decoder.embed.weight"):
        problems.append("an output projection untied from the token embedding: GPT-2 ties them")
    layout = "the GPT-2 layout (transformers' GPT2LMHeadModel)"
    refuse_differences(problems, layout)

    tensors = {"transformer.wte.weight": state["decoder.embed.weight"],
               "transformer.wpe.weight": state["decoder.positions.weight"],
               "transformer.ln_f.weight": state["decoder.stack.final_norm.weight"],
               "transformer.ln_f.bias": state["decoder.stack.final_norm.bias"]}
    for i in range(c.num_layers):
        for theirs, ours in _LAYER_KEYS.items():
            value = state[f"decoder.stack.layers.{i}.{ours}"]
            tensors[f"transformer.h.{i}.{theirs}"] = value.t() if theirs in _TRANSPOSED else value
    state.check_all_read(layout)
    config = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": c.vocab_size,
        "n_positions": c.max_positions, "n_ctx": c.max_positions, "n_embd": c.d_model, "n_layer": c.num_layers,
        "n_head": c.num_heads, "n_inner": c.d_ff, "activation_function": HF_ACTIVATIONS[c.activation],
        "resid_pdrop": c.dropout, "embd_pdrop": c.dropout, "attn_pdrop": c.attention_dropout,
        "layer_norm_epsilon": c.layer_norm_eps, "initializer_range": 0.02, "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False, "tie_word_embeddings": True,
        "bos_token_id": c.bos_id, "eos_token_id": c.eos_id, "use_cache": True,
        "dtype": str(tensors["transformer.wte.weight"].dtype).removeprefix("torch."),
    }
    files["config.json"] = json_bytes(config)
    return Export(tensors, files, "transformers.AutoModelForCausalLM (GPT2LMHeadModel) + AutoTokenizer")


# ---------------------------------------------------------------------------- BERT
def bert_export(pipeline, *, head=None) -> Export:
    """A BERT as ``BertModel`` (with the masked-LM head: ``BertForMaskedLM``, whose
    ``bert`` part ``BertModel`` also opens) + its WordPiece files.

    ``head`` exports a model that is a BERT plus a head of its own (a sequence classifier:
    one exporter function calling this one): ``head(state, config) -> (tensors,
    architecture, config fields)`` reads the head's weights from the
    :class:`~attnlab.interop.export.StateReader` (so every weight is accounted for) and
    names them as transformers does (``classifier.weight``, ...); the encoder's names then
    carry the ``bert.`` prefix, and ``config.json`` gets the architecture and the fields
    (``id2label``, ``num_labels``, ...)."""
    from attnlab.interop.hf_bert import _LAYER_KEYS, _MLM_KEYS, _POOLER_KEYS, _TOP_KEYS

    model, tokenizer, source = pipeline.model, pipeline.tokenizer, Path(pipeline.directory)
    c = model.config
    problems = _common_problems(model, "BERT")
    if not (source / "vocab.txt").is_file():
        problems.append(f"{source / 'vocab.txt'}: no WordPiece vocabulary to carry")
    layout = "the BERT layout (transformers' BertModel)"
    refuse_differences(problems, layout)

    state = StateReader(model)
    head_tensors, head_architecture, head_fields = head(state, c) if head is not None else ({}, None, {})
    # a model with a head: BertFor...'s names; a BertModel's own without the prefix
    prefix = "bert." if c.mlm_head or head is not None else ""
    tensors = {prefix + theirs: state[ours] for theirs, ours in _TOP_KEYS.items()}
    d = c.d_model
    for i in range(c.num_layers):
        layer = f"{prefix}encoder.layer.{i}."
        for part in ("weight", "bias"):
            qkv = state[f"stack.layers.{i}.self_attn.qkv_proj.{part}"]
            for index, name in enumerate(("query", "key", "value")):
                tensors[f"{layer}attention.self.{name}.{part}"] = qkv[index * d:(index + 1) * d]
            for theirs, ours in _LAYER_KEYS.items():
                tensors[f"{layer}{theirs}.{part}"] = state[f"stack.layers.{i}.{ours}.{part}"]
    if c.pooler:
        tensors.update({prefix + theirs: state[ours] for theirs, ours in _POOLER_KEYS.items()})
    if c.mlm_head:
        tensors.update({theirs: state[ours] for theirs, ours in _MLM_KEYS.items()})
    tensors.update(head_tensors)
    state.check_all_read(layout)
    architecture = head_architecture or ("BertForMaskedLM" if c.mlm_head else "BertModel")
    config = {
        "architectures": [architecture], "model_type": "bert", "vocab_size": c.vocab_size, "hidden_size": d,
        "num_hidden_layers": c.num_layers, "num_attention_heads": c.num_heads, "intermediate_size": c.d_ff,
        "hidden_act": HF_ACTIVATIONS.get(c.activation), "hidden_dropout_prob": c.dropout,
        "attention_probs_dropout_prob": c.attention_dropout, "max_position_embeddings": c.max_positions,
        "type_vocab_size": c.type_vocab_size, "layer_norm_eps": c.layer_norm_eps, "pad_token_id": c.pad_id,
        "position_embedding_type": "absolute", "initializer_range": 0.02, "tie_word_embeddings": True,
        "dtype": str(tensors[prefix + "embeddings.word_embeddings.weight"].dtype).removeprefix("torch."),
        **head_fields,
    }
    files = _copy_files(source, ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"))
    if "tokenizer_config.json" not in files:  # what attnlab read: do_lower_case true when the file is absent
        files["tokenizer_config.json"] = json_bytes({
            "tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": c.max_positions})
    files["config.json"] = json_bytes(config)
    notes = [] if c.pooler or c.mlm_head or head else ["no pooler: BertModel(add_pooling_layer=False) opens it"]
    return Export(tensors, files, f"transformers.{architecture} (AutoModel) + AutoTokenizer (BertTokenizer)", notes)


# ---------------------------------------------------------------------------- MarianMT
def _halves_permutation(d_model: int) -> Tensor:
    """The reordering of the model dimension that turns the paper's interleaved sinusoids
    (sin on even, cos on odd dimensions) into Marian's halves (sines first): new dimension
    j is old dimension ``perm[j]``. Applied to every weight's d_model axis (embeddings,
    LayerNorms, the projections' inputs and outputs), it gives the same network in another
    basis: attention and feed-forward products sum over the same terms, LayerNorm's mean
    and variance are permutation-invariant, and the tied output logits are unchanged."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def marian_export(pipeline) -> Export:
    """An encoder–decoder Transformer as a ``MarianMTModel`` directory + MarianTokenizer files."""
    from attnlab.interop.hf_marian import _CROSS_KEYS, _LAYER_KEYS, is_hf_marian_directory
    from attnlab.layers.positional import sinusoidal_table

    model, source = pipeline.model, Path(pipeline.directory)
    c = model.config
    problems = _common_problems(model, "MarianMT")
    if c.norm_first:
        problems.append("norm_first=true (pre-LN): Marian's layers are post-LN (LayerNorm after each residual sum)")
    if c.final_norm:
        problems.append("final_norm=true: Marian has no LayerNorm after the last encoder and decoder layers "
                        "(train with --set final_norm=false for the paper's exact layout)")
    if c.positional not in ("sinusoidal", "sinusoidal_halves"):
        problems.append(f"positional={c.positional!r}: Marian adds fixed sinusoidal positions")
    if c.d_model % 2:
        problems.append(f"d_model={c.d_model} is odd: Marian's sinusoid halves need an even width")
    if not _pattern_is(c.encoder_attention, FullAttention):
        problems.append(f"encoder_attention={c.encoder_attention!r}: Marian's encoder attends to every position")
    if not _pattern_is(c.decoder_attention, CausalAttention):
        problems.append(f"decoder_attention={c.decoder_attention!r}: Marian's decoder is plainly causal")
    if c.tgt_vocab_size not in (None, c.vocab_size) or not c.share_embeddings or not c.tie_output_projection:
        problems.append("separate source/target embeddings or an untied output projection: the export covers "
                        "Marian's one shared vocabulary and embedding (share_embeddings, tie_output_projection)")
    if c.layer_norm_eps != 1e-5:
        problems.append(f"layer_norm_eps={c.layer_norm_eps}: Marian's LayerNorms use 1e-5")
    marian_source = is_hf_marian_directory(source)
    # an attnlab directory holding a MarianMT model's tokenizer (fine-tuned from one, or saved by
    # save_pretrained): translation.json's "format": "marian"
    marian_tokenizer = not marian_source and getattr(pipeline, "translator", None) is not None \
        and pipeline.translator.info.get("format") == "marian"
    if not marian_source and not marian_tokenizer and not (source / "tokenizer.model").is_file():
        problems.append(f"{source / 'tokenizer.model'}: no sentencepiece model to carry as source.spm/target.spm")
    state = StateReader(model)
    tied = state.tied("decoder.embed.weight", "encoder.embed.weight") & state.tied("decoder.head.weight",
                                                                                 "encoder.embed.weight")
    if not tied and c.share_embeddings and c.tie_output_projection:
        problems.append("embeddings or output projection not one shared table: Marian ties all three")
    layout = "the MarianMT layout (transformers' MarianMTModel)"
    refuse_differences(problems, layout)

    d = c.d_model
    permute = c.positional == "sinusoidal"  # interleaved: carried in Marian's basis
    order = _halves_permutation(d)

    def rows(value: Tensor) -> Tensor:  # the d_model axis is the first (outputs, biases, norms)
        return value[order] if permute else value

    def columns(value: Tensor) -> Tensor:  # the d_model axis is the second (inputs)
        return value[:, order] if permute else value

    embedding = columns(state["encoder.embed.weight"])
    tensors = {"model.shared.weight": embedding,
               "final_logits_bias": (state["decoder.head.bias"] if c.output_bias
                                     else torch.zeros(c.vocab_size, dtype=embedding.dtype)).reshape(1, -1)}
    table = sinusoidal_table(c.max_positions, d, layout="halves").to(embedding.dtype)
    for side, count in (("encoder", c.num_encoder_layers), ("decoder", c.num_decoder_layers)):
        tensors[f"model.{side}.embed_positions.weight"] = table
        attentions = ["self_attn"] + (["encoder_attn"] if side == "decoder" else [])
        keys = dict(_LAYER_KEYS) if side == "encoder" else {**_LAYER_KEYS, **_CROSS_KEYS}
        for i in range(count):
            theirs, ours = f"model.{side}.layers.{i}.", f"{side}.stack.layers.{i}."
            for hf_name in attentions:
                name = "self_attn" if hf_name == "self_attn" else "cross_attn"
                weight, bias = state[f"{ours}{name}.qkv_proj.weight"], state[f"{ours}{name}.qkv_proj.bias"]
                for index, p in enumerate("qkv"):
                    tensors[f"{theirs}{hf_name}.{p}_proj.weight"] = columns(weight[index * d:(index + 1) * d])
                    tensors[f"{theirs}{hf_name}.{p}_proj.bias"] = bias[index * d:(index + 1) * d]
            for hf_name, name in keys.items():
                weight, bias = state[f"{ours}{name}.weight"], state[f"{ours}{name}.bias"]
                if hf_name.endswith("out_proj") or hf_name == "fc2":
                    weight, bias = rows(weight), rows(bias)
                elif hf_name == "fc1":
                    weight = columns(weight)
                else:  # a LayerNorm
                    weight, bias = rows(weight), rows(bias)
                tensors[f"{theirs}{hf_name}.weight"], tensors[f"{theirs}{hf_name}.bias"] = weight, bias
    state.check_all_read(layout)
    suppress = c.suppress_ids or []
    config = {
        "architectures": ["MarianMTModel"], "model_type": "marian", "vocab_size": c.vocab_size, "d_model": d,
        "encoder_layers": c.num_encoder_layers, "decoder_layers": c.num_decoder_layers,
        "encoder_attention_heads": c.num_heads, "decoder_attention_heads": c.num_heads,
        "encoder_ffn_dim": c.d_ff, "decoder_ffn_dim": c.d_ff, "activation_function": HF_ACTIVATIONS[c.activation],
        "max_position_embeddings": c.max_positions, "dropout": c.dropout, "attention_dropout": c.attention_dropout,
        "activation_dropout": c.activation_dropout, "scale_embedding": c.scale_embeddings,
        "normalize_before": False, "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True,
        "pad_token_id": c.pad_id, "eos_token_id": c.eos_id, "decoder_start_token_id": c.bos_id,
        "forced_eos_token_id": None, "is_encoder_decoder": True, "init_std": 0.02,
        "dtype": str(embedding.dtype).removeprefix("torch."),
    }
    generation = {"decoder_start_token_id": c.bos_id, "eos_token_id": c.eos_id, "pad_token_id": c.pad_id,
                  "bad_words_ids": [[i] for i in suppress] or None, "num_beams": 4, "max_length": 512}
    marian_settings = {"tokenizer_class": "MarianTokenizer", "separate_vocabs": False,
                       "model_max_length": c.max_positions, "eos_token": "</s>", "unk_token": "<unk>",
                       "pad_token": "<pad>"}
    if marian_source:  # the MarianMT directory attnlab read: its tokenizer and generation defaults as they are
        files = _copy_files(source, ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json",
                                     "special_tokens_map.json", "generation_config.json"))
    elif marian_tokenizer:  # its MarianTokenizer's files as it reads them, translation.json's decoding defaults
        tokenizer = pipeline.translator.tokenizer
        files = {name: content for name, content in tokenizer.files().items() if name != "tokenizer_config.json"}
        files["tokenizer_config.json"] = json_bytes({**marian_settings, "source_lang": tokenizer.source_lang})
        generation.update(pipeline.translator.info.get("generation") or {})
    else:
        import sentencepiece

        spm = (source / "tokenizer.model").read_bytes()
        processor = sentencepiece.SentencePieceProcessor(model_proto=spm)
        vocab = {processor.id_to_piece(i): i for i in range(processor.get_piece_size())}
        files = {"source.spm": spm, "target.spm": spm, "vocab.json": json_bytes(vocab),
                 "tokenizer_config.json": json_bytes(marian_settings)}
    files.setdefault("generation_config.json", json_bytes({k: v for k, v in generation.items() if v is not None}))
    files["config.json"] = json_bytes(config)
    notes = ["the model dimension is reordered (the paper's interleaved sinusoids -> Marian's halves): the same "
             "function, its weights in another basis"] if permute else []
    if not marian_source and not marian_tokenizer:
        notes.append("CTranslate2's TransformersConverter reads Marian directories in OPUS-MT's conventions only "
                     "(<pad> the last vocabulary entry, decoding from a zero embedding); this vocabulary has <pad> at "
                     f"id {c.pad_id} and decoding starts from id {c.bos_id}, so that converter refuses it")
    return Export(tensors, files, "transformers.MarianMTModel + MarianTokenizer", notes)
