"""What the BERT families share: the ``bert`` family (``train bert``, ``embed``,
``evaluate-bert``) and the text classifier (``train text-classification``,
``classify-text``) both start runs from a BERT directory, learn WordPiece vocabularies
from text and keep them beside their weights.

* :func:`load_bert_directory`: any BERT-type directory — a HuggingFace BERT (such as
  all-MiniLM-L6-v2), an attnlab ``bert`` model (``train bert``'s) or a ``bert_classifier``
  (``train text-classification``'s) — as ``(model, WordPieceTokenizer)``; anything else is
  refused naming the flag and what the directory holds;
* :func:`learn_wordpiece`: a WordPiece vocabulary learned from lines of text with the
  ``tokenizers`` library (BERT's special tokens first);
* :func:`tokenizer_files`: the files a model directory keeps its vocabulary in
  (``vocab.txt``, ``tokenizer_config.json``), as :func:`attnlab.interop.hf_bert.load_wordpiece`
  reads them back;
* :func:`onnx_example`: the example inputs of both families' ONNX graphs (their
  ``onnx.py``), ``ids, attention_mask, token_type_ids`` with the last row padded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["BERT_FAMILIES", "SPECIAL_TOKENS", "TOKENIZER_FILES", "load_bert_directory", "load_init", "learn_wordpiece",
           "onnx_example", "tokenizer_files"]

BERT_FAMILIES = ("bert", "bert_classifier")
"""The attnlab config families whose directories hold a BERT encoder and a WordPiece vocabulary."""

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json")


def load_bert_directory(directory: str | os.PathLike, *, device: str = "cpu", flag: str = "--init"):
    """``(model, tokenizer)`` of a BERT-type directory (see the module docstring); a
    ValueError naming ``flag`` for a directory of another family, or none."""
    from attnlab.families import used_with
    from attnlab.files import read_config_json
    from attnlab.interop.hf_bert import is_hf_bert_directory, load_hf_bert, load_wordpiece
    from attnlab.models.registry import load_model, require_model_directory

    directory = require_model_directory(directory, flag)
    try:
        if is_hf_bert_directory(directory):
            return load_hf_bert(directory, device=device)
        values = read_config_json(directory) or {}
        family = values.get("family")
        if family not in BERT_FAMILIES:
            what = (f"holds a {family!r} model{used_with(family)}" if isinstance(family, str) else
                    f"holds a HuggingFace {values['model_type']!r} model" if isinstance(values.get("model_type"), str)
                    else "holds no model config.json")
            raise ValueError(f"{flag} {directory}: {what}, not a BERT; give a HuggingFace BERT directory (such as "
                             "all-MiniLM-L6-v2) or one that attnlab train bert / train text-classification wrote")
        model = load_model(directory, device=device)
        return model, load_wordpiece(directory, model.config)
    except ValueError as error:
        message = str(error)
        raise ValueError(message if message.startswith(flag) else f"{flag}: {message}") from None


def load_init(directory: str | os.PathLike, device: str = "cpu"):
    """``--init DIR`` of the BERT training verbs (each verb's ``load_init`` part): ``(model,
    tokenizer)`` of any BERT directory, another family's refused naming ``--init``; the
    training-run lifecycle opens ``--init`` with it (cli/bert_runs.py, ``BertTask.open_init``)."""
    return load_bert_directory(directory, device=device, flag="--init")


def learn_wordpiece(lines: Iterable[str], directory: str | os.PathLike, *, vocab_size: int, lowercase: bool = True,
                    max_length: int = 512):
    """Learn a WordPiece vocabulary of at most ``vocab_size`` tokens (the special tokens
    first: [PAD] = 0) from ``lines``, write ``directory/vocab.txt`` and
    ``tokenizer_config.json`` (atomically) and return it as a
    :class:`~attnlab.interop.hf_bert.WordPieceTokenizer` truncating at ``max_length``."""
    from tokenizers import BertWordPieceTokenizer

    from attnlab.files import atomic_write_bytes
    from attnlab.interop.hf_bert import WordPieceTokenizer

    learner = BertWordPieceTokenizer(lowercase=lowercase)
    learner.train_from_iterator(lines, vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                special_tokens=list(SPECIAL_TOKENS))
    vocabulary = sorted(learner.get_vocab().items(), key=lambda item: item[1])
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(directory / "vocab.txt", "".join(f"{token}\n" for token, _ in vocabulary).encode("utf-8"))
    atomic_write_bytes(directory / "tokenizer_config.json", _tokenizer_config(lowercase))
    return WordPieceTokenizer(directory / "vocab.txt", lowercase=lowercase, max_length=max_length)


def _tokenizer_config(lowercase: bool) -> bytes:
    return (json.dumps({"do_lower_case": bool(lowercase), "tokenizer_class": "BertTokenizer"}, indent=1)
            + "\n").encode()


def tokenizer_files(tokenizer) -> dict[str, bytes]:
    """``{"vocab.txt": ..., "tokenizer_config.json": ...}`` of a WordPiece tokenizer: what a
    model directory holds so that :func:`~attnlab.interop.hf_bert.load_wordpiece` (and
    HuggingFace's ``BertTokenizer``) read the same vocabulary and lower-casing back."""
    return {"vocab.txt": Path(tokenizer.vocab_file).read_bytes(),
            "tokenizer_config.json": _tokenizer_config(tokenizer.lowercase)}



def onnx_example(model):
    """``example(batch, length, generator)``: random ``ids`` (never padding),
    ``attention_mask`` and ``token_type_ids`` (zeros) for a BERT encoder's ONNX graph, the
    last row's last two tokens padded (the padding-mask path is the one the trace records)."""
    import torch

    from attnlab.interop.onnx_export import pad_last_row, token_ids

    ids = token_ids(model)

    def example(batch, length, generator):
        tokens = ids(batch, length, generator)
        mask = pad_last_row(tokens, getattr(model.config, "pad_id", 0))
        return {"ids": tokens, "attention_mask": mask, "token_type_ids": torch.zeros_like(tokens)}
    return example
