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
  reads them back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["BERT_FAMILIES", "SPECIAL_TOKENS", "TOKENIZER_FILES", "load_bert_directory", "learn_wordpiece",
           "tokenizer_files"]

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
    from attnlab.models.registry import load_model

    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"{flag} {directory}: no such directory")
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


# -- what the two BERT training verbs (train bert, train text-classification) share ------
def refuse_with_init(args, flags: dict[str, str]) -> None:
    """``flags`` (``{"--vocab-size": "vocab_size", ...}``) given with ``--init``, whose
    directory decides them, are refused naming the flag."""
    for flag, name in flags.items():
        if args.init and getattr(args, name):
            raise ValueError(f"{flag}: with --init the directory decides this (its layers and vocabulary); "
                             f"leave {flag} out")


def resumed_run(checkpoint: Path):
    """``(config, tokenizer, tokenizer files)`` of a checkpoint a BERT run continues."""
    from attnlab.interop.hf_bert import load_wordpiece
    from attnlab.models.registry import load_config

    config = load_config(checkpoint)
    files = {name: (checkpoint / name).read_bytes() for name in TOKENIZER_FILES if (checkpoint / name).is_file()}
    return config, load_wordpiece(checkpoint, config), files


def describe_model(model, origin: str, unit: str, args, device: str, bf16: bool, lr: float) -> str:
    from attnlab.cli.options import describe_device

    c = model.config
    return (f"model: {origin}, {model.num_parameters():,d} parameters ({c.num_layers} layers, d_model={c.d_model}, "
            f"{c.num_heads} heads); {args.batch_size} {unit} per update, peak lr {lr:g}; device: "
            f"{describe_device(device)}" + (", bf16 autocast" if bf16 else ", float32"))


def train_config(args, out: Path, *, warmup: int, bf16: bool, lr: float):
    """The Trainer's settings of both BERT verbs: AdamW (no decay on biases, norms and
    embeddings) with ``--weight-decay``, linear warm-up then cosine decay to a tenth of
    ``lr``, gradients clipped at 1 (BERT's recipe, with its eps 1e-6)."""
    from attnlab.cli.options import checkpoint_minutes
    from attnlab.training.trainer import TrainConfig

    return TrainConfig(out_dir=str(out), max_steps=args.max_steps, schedule="cosine", peak_lr=lr, min_lr=lr / 10,
                       warmup_steps=warmup, betas=(0.9, 0.999), eps=1e-6, optimizer="adamw",
                       weight_decay=args.weight_decay, clip_grad_norm=1.0, log_every=25,
                       validate_every=args.val_every or None, checkpoint_every=args.save_every or None,
                       seed=args.seed, progress_bar=not args.no_progress, bf16=bf16, compile=args.compile,
                       checkpoint_every_minutes=checkpoint_minutes(args))


def write_run_files(out: Path, files: dict[str, bytes], *, also: tuple[str, ...] = ()) -> None:
    """Under the run's lock, before training: refuse symlinks at every name the run writes
    (the trainer's, ``files``, ``model`` and ``also``), then write ``files`` into OUT."""
    from attnlab.files import atomic_write_bytes, refuse_symlinks
    from attnlab.training.trainer import TRAINER_OUTPUTS

    refuse_symlinks(out, (*TRAINER_OUTPUTS, *files, "model", *also))
    for name, content in files.items():
        atomic_write_bytes(out / name, content)


def prepare_run(parts, args, device: str, previous: Path | None, **resume_data):
    """``(prepared data, model, note)`` of a BERT training verb from its ``parts`` (its module:
    ``load_init``, ``data``, ``build_model``, ``adapt_after_init``): a resumed run's
    vocabulary and layers from its checkpoint (``resume_data(checkpoint, config)`` adds
    what else ``data`` takes from it); else ``--init``'s, adapted (``note`` says how); else
    built from scratch. The caller compares a resumed run's ``run_info``."""
    from attnlab.models.registry import model_class_for

    init = parts.load_init(args.init, device) if args.init else None  # checked before anything is read or written
    if previous is not None:
        config, tokenizer, files = resumed_run(previous)
        extra = {name: read(previous, config) for name, read in resume_data.items()}
        prepared = parts.data(args, tokenizer=tokenizer, tokenizer_files=files, max_positions=config.max_positions,
                              **extra)
        return prepared, model_class_for(config)(config), None
    if init is not None:
        model, tokenizer = init
        prepared = parts.data(args, tokenizer=tokenizer, tokenizer_files=tokenizer_files(tokenizer),
                              max_positions=model.config.max_positions)
        return (prepared, *parts.adapt_after_init(parts.build_model(args, prepared, model), args, prepared))
    prepared = parts.data(args)
    return prepared, parts.build_model(args, prepared), None
