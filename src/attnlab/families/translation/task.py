"""Translation as a training task: corpora -> joint vocabulary -> batches -> Trainer -> model directory.

(``attnlab train translation`` and :func:`train_translation` run the one training lifecycle,
attnlab.cli.training_run, with the translation family's TranslationTask: families/translation/train.py.)

This module only ties together pieces that live elsewhere (``attnlab.data`` reads and
batches, ``attnlab.models`` builds the Transformer, ``attnlab.training`` runs the loop).

Layout of an output directory ``out`` after ``train_translation``::

    out/tokenizer.model         the joint sentencepiece vocabulary (training side only)
    out/translation.json        languages and data the model was trained on
    out/metrics.jsonl           one JSON line per log / validation (Trainer)
    out/checkpoints/step_N/     resumable checkpoints; each is also a loadable model directory
    out/model/                  the final model: config.json + model.safetensors +
                                tokenizer.model + translation.json (attnlab.load_model,
                                attnlab.translation.Translator.load, ``attnlab translate``)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.attention import build_pattern
from attnlab.data import ParallelCorpus, Tokenizer, filter_by_length, get_parallel_dataset, read_parallel
from attnlab.models.registry import get_preset
from attnlab.training import TrainConfig, label_smoothed_cross_entropy

__all__ = [
    "MODEL_SUBDIR",
    "TASK_FILE",
    "TranslationTrainOptions",
    "encode_and_filter",
    "load_training_corpora",
    "translation_loss",
]

MODEL_SUBDIR = "model"
TASK_FILE = "translation.json"


@dataclass
class TranslationTrainOptions:
    """Everything ``attnlab train translation`` accepts, as plain data.

    Data comes either from a named data set (``data``, with ``data_root`` overriding its
    location) or from the user's files (``train_src``/``train_tgt``, optionally
    ``valid_src``/``valid_tgt``). ``max_train_pairs`` keeps only the first N training
    pairs (quick experiments and tests).
    """

    out: str
    src_lang: str | None = None  # None: "de" for a named set; your own files: unknown unless given (recorded as null)
    tgt_lang: str | None = None
    data: str | None = None
    data_root: str | None = None
    data_dir: str | None = None
    train_src: str | None = None
    train_tgt: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    max_train_pairs: int | None = None
    preset: str = "transformer_small"
    vocab_size: int = 8000
    tokenizer_type: str = "bpe"
    max_length: int = 128
    max_tokens: int | None = None  # None: default_max_tokens(device)
    max_steps: int = 10000
    warmup: int = 4000
    lr_scale: float = 1.0
    label_smoothing: float = 0.1
    grad_accum: int = 1
    clip: float | None = None
    bf16: bool = False
    compile: bool = False
    varlen: bool = False
    val_every: int | None = 500
    save_every: int | None = 1000
    save_every_minutes: float | None = 10.0
    keep: int = 5
    average_last: int = 1
    log_every: int = 50
    resume: bool = False
    force: bool = False  # replace what OUT/model holds (attnlab.training.outputs.check_run_output)
    seed: int = 1
    device: str = "cpu"
    progress_bar: bool = True
    max_minutes: float | None = None
    model_overrides: dict[str, Any] = field(default_factory=dict)
    init: str | None = None  # start from this model directory (fine-tuning; attnlab.cli.training_run)
    max_unknown: float = 1.0  # with init: the most training text (percent) its tokenizer may not represent


CPU_MAX_TOKENS = 4096
GPU_MAX_TOKENS = 25600


def default_max_tokens(device: str) -> int:
    """Padded tokens per side of a training batch when ``--max-tokens`` is not given: 4,096
    on a CPU, 25,600 on a GPU (the paper's ~25k per step; small batches leave a GPU waiting
    on kernel launches, docs/benchmarks.md)."""
    return GPU_MAX_TOKENS if str(device).startswith("cuda") else CPU_MAX_TOKENS


def translation_loss(label_smoothing: float = 0.1, pad_id: int = 0, *, varlen: bool = False):
    """``loss_fn(model, batch)`` for the Trainer: label-smoothed cross-entropy summed over
    the non-padding target tokens, with the plain NLL as a log (→ perplexity). ``varlen``:
    the model computes only the real tokens (``Transformer.forward(..., varlen=True)``);
    the same loss."""

    def loss_fn(model, batch):
        if varlen:
            logits = model(batch["src"], batch["tgt_in"], varlen=True)  # (T_real, V); model may be the DDP wrapper
            target = batch["tgt_out"].reshape(-1)[batch["tgt_in"].reshape(-1) != pad_id]  # in the same order
        else:
            logits, target = model(batch["src"], batch["tgt_in"]), batch["tgt_out"]  # (B, T, V), (B, T)
        loss = label_smoothed_cross_entropy(logits, target, epsilon=label_smoothing, ignore_index=pad_id)
        return loss.loss_sum, loss.num_tokens, {"nll": loss.nll_sum}

    return loss_fn


def load_training_corpora(options: TranslationTrainOptions) -> tuple[ParallelCorpus, ParallelCorpus | None]:
    """The training corpus and the validation corpus (``None`` when there is none)."""
    own_files = options.train_src is not None or options.train_tgt is not None
    if own_files == (options.data is not None):
        raise ValueError("give either --data NAME or --train-src and --train-tgt (not both, not neither)")
    if own_files:
        if options.train_src is None or options.train_tgt is None:
            raise ValueError("--train-src and --train-tgt go together")
        if (options.valid_src is None) != (options.valid_tgt is None):
            raise ValueError("--valid-src and --valid-tgt go together")
        train = _read_files(options.train_src, options.train_tgt)
        valid = _read_files(options.valid_src, options.valid_tgt) if options.valid_src else None
    else:
        train = _named(options, "train")
        valid = _named(options, "valid")
    if options.max_train_pairs is not None:
        if options.max_train_pairs < 1:
            raise ValueError(f"max_train_pairs={options.max_train_pairs} must be positive")
        train = ParallelCorpus(train.pairs[: options.max_train_pairs], train.skipped_empty,
                               description=f"{train.description} (first {options.max_train_pairs})")
    return train, valid


def _read_files(src: str, tgt: str) -> ParallelCorpus:
    for path in (src, tgt):
        if not Path(path).is_file():
            raise ValueError(f"{path}: no such file")
    return read_parallel(src, tgt)


def _named(options: TranslationTrainOptions, split: str) -> ParallelCorpus:
    try:
        return get_parallel_dataset(options.data, split, options.src_lang, options.tgt_lang, root=options.data_root,
                                    data_dir=options.data_dir)
    except FileNotFoundError as error:  # the message says how to get the data
        raise ValueError(str(error)) from None


def encode_and_filter(tokenizer: Tokenizer, corpus: ParallelCorpus, max_length: int):
    """Subword ids of every pair, without pairs that are empty or longer than ``max_length``.

    Returns ``(examples, LengthFilterResult)``.
    """
    encoded = tokenizer.encode_pairs(corpus)
    result = filter_by_length([len(s) for s, _ in encoded], [len(t) for _, t in encoded], max_length=max_length)
    return [encoded[i] for i in result.kept], result


def _check_train_options(options: TranslationTrainOptions) -> None:
    """Every option that can be checked without data, checked before minutes go into the
    vocabulary: the preset and its overrides, and the training settings."""
    if options.keep < 1:
        raise ValueError(f"--keep={options.keep} must be at least 1")
    config = get_preset(options.preset, **options.model_overrides)
    if options.varlen:
        for side in ("encoder_attention", "decoder_attention"):
            spec = getattr(config, side)
            if not getattr(build_pattern(spec), "varlen", False):
                raise ValueError(f"--varlen: the {side.split('_')[0]}'s attention pattern {spec!r} cannot attend "
                                 "packed variable-length sequences (full and causal can)")
    TrainConfig(out_dir=str(options.out), max_steps=options.max_steps, schedule="noam", d_model=config.d_model,
                lr_scale=options.lr_scale, warmup_steps=options.warmup, grad_accum_steps=options.grad_accum,
                clip_grad_norm=options.clip, log_every=options.log_every, validate_every=options.val_every,
                checkpoint_every=options.save_every, keep_last=max(options.keep, options.average_last),
                max_minutes=options.max_minutes, tune_malloc=False,
                checkpoint_every_minutes=options.save_every_minutes or None)
