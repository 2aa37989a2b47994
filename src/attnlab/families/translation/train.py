"""``attnlab train translation``: vocabulary + Transformer + shared Trainer -> a model directory.

    attnlab train translation --data multi30k --src de --tgt en --preset multi30k --out runs/m30k
    attnlab train translation --train-src train.de --train-tgt train.en \\
        --valid-src valid.de --valid-tgt valid.en --src de --tgt en --out runs/mine
    torchrun --nproc_per_node=2 -m attnlab.cli.main train translation ...   # data-parallel

The final model is written to ``OUT/model`` (config.json, model.safetensors,
tokenizer.model, translation.json; started with ``--init`` from a MarianMT directory, that
model's tokenizer files source.spm, target.spm, vocab.json in place of tokenizer.model, and
``"format": "marian"`` in translation.json); ``OUT/checkpoints`` holds resumable checkpoints and
``OUT/metrics.jsonl`` the training log.
"""

import dataclasses
import json
import sys
from pathlib import Path

from attnlab.cli.training_run import TrainingTask, add_training_arguments, run_training

DESCRIPTION = __doc__.split("\n\n")[0]
TOKENIZER_INFO = ("format", "generation")
"""``translation.json``'s fields that belong to the tokenizer (a MarianMT model's: ``"format": "marian"``
and its decoding defaults): a run started with --init keeps them."""
HELP = "train an encoder-decoder Transformer on parallel text (a named data set or your own aligned files)"


class TranslationTask(TrainingTask):
    """``attnlab train translation`` on the lifecycle (:mod:`attnlab.cli.training_run`):
    corpora -> joint vocabulary (rank 0 learns it, every rank gets its bytes) -> Transformer
    -> the shared Trainer with a Noam schedule -> OUT/model (the average of the last
    ``--average-last`` checkpoints). :func:`~attnlab.families.translation.task.train_translation`
    runs the same from the Python API."""

    name = family = "translation"
    summary_keys = ("loss", "ppl", "valid_loss", "valid_ppl")
    held_out = ("valid_ppl", "validation perplexity")
    lr_flag = "lr_scale"
    peak_scales_with_warmup = True  # Noam: the peak is lr_scale * d_model**-0.5 * warmup**-0.5
    data_fields = ("vocab_size", "tgt_vocab_size", "pad_id", "bos_id", "eos_id")
    flag_names = {"data": "--data/--train-src/--train-tgt", "training pairs": "--max-train-pairs (training pairs)",
                  "languages": "--src/--tgt", "max_length": "--max-length", "max_tokens": "--max-tokens",
                  "pairs_sha256": "the training pairs' contents"}

    def add_arguments(self, parser) -> None:
        _add_translation_arguments(parser)

    def options(self, args):
        """The run's :class:`~attnlab.families.translation.task.TranslationTrainOptions`."""
        from attnlab.cli.options import options_from_args, resolve_precision
        from attnlab.families.translation.task import TranslationTrainOptions, default_max_tokens

        if getattr(args, "api_options", None) is not None:
            return args.api_options
        device = args.device_name
        return options_from_args(
            TranslationTrainOptions, args, bf16=resolve_precision(args, device), device=device,
            val_every=args.val_every or None, save_every=args.save_every or None, progress_bar=not args.no_progress,
            model_overrides=self.overrides(args), max_tokens=args.max_tokens or default_max_tokens(device))

    def overrides(self, args):
        if getattr(args, "api_options", None) is not None:
            return dict(args.api_options.model_overrides)
        return super().overrides(args)

    def check(self, args) -> None:
        from attnlab.cli.options import resolve_device
        from attnlab.families.translation.task import _check_train_options

        args.device_name = resolve_device(args.device)
        options = self.options(args)
        if options.max_tokens <= options.max_length + 1:
            raise ValueError(f"--max-tokens={options.max_tokens} must exceed --max-length={options.max_length} + 1")
        if options.average_last < 1:
            raise ValueError(f"--average-last={options.average_last} must be at least 1")
        _check_train_options(options)
        if options.data is not None:  # a named set: German to English unless said otherwise
            options = dataclasses.replace(options, src_lang=options.src_lang or "de", tgt_lang=options.tgt_lang or "en")
        args.translation = options

    def vocabulary(self, pipeline):
        """The start's tokenizer (a sentencepiece ``Tokenizer``, or a MarianMT model's
        :class:`~attnlab.interop.hf_marian.MarianTokenizer`) and what ``translation.json`` keeps
        with it: a MarianMT model's ``format`` and decoding defaults (``generation``)."""
        translator = pipeline.translator
        return translator.tokenizer, {key: translator.info[key] for key in TOKENIZER_INFO if key in translator.info}

    def data(self, run):
        import itertools

        from attnlab.data.tokenizer import TOKENIZER_FILE, Tokenizer
        from attnlab.families.translation.task import TASK_FILE, load_training_corpora
        from attnlab.training.distributed import gather_bytes

        options, context = run.args.translation, run.context
        say = _say if context.is_main else (lambda message: None)
        train, valid = load_training_corpora(options)
        say(f"data: {train.description}: {len(train)} training pairs"
            + (f" ({train.skipped_empty} empty lines skipped)" if train.skipped_empty else "")
            + (f"; {len(valid)} validation pairs" if valid is not None else "; no validation set"))
        if run.vocabulary is None:  # rank 0 learns the joint vocabulary, from the training side only
            learned = b""
            if context.is_main:
                learned = Tokenizer.train(itertools.chain(train.sources, train.targets), vocab_size=options.vocab_size,
                                          model_type=options.tokenizer_type, seed=options.seed).to_bytes()
            tokenizer, kept = Tokenizer(gather_bytes(learned, context)[0]), {}
            say(f"vocabulary: {tokenizer.vocab_size} {options.tokenizer_type} pieces -> {run.out / TOKENIZER_FILE}")
        else:
            tokenizer, kept = run.vocabulary
            if run.previous is not None:
                say(f"vocabulary: reusing the one of {run.previous}")
        run.files.update(tokenizer.files())  # tokenizer.model, or MarianMT's source.spm, target.spm, vocab.json
        held_out = [str(Path(f).resolve()) if f else None for f in (options.valid_src, options.valid_tgt)]
        task = {**kept, "task": "translation", "src_lang": options.src_lang, "tgt_lang": options.tgt_lang,
                "data": options.data, "train": train.description,  # evaluate's default: the held-out files
                "valid_src": held_out[0], "valid_tgt": held_out[1]}
        run.files[TASK_FILE] = (json.dumps(task, indent=2) + "\n").encode()
        return {"train": train, "valid": valid, "tokenizer": tokenizer}

    def run_info(self, run, data):
        import hashlib

        options, train = run.args.translation, data["train"]
        digest = hashlib.sha256()
        for source, target in train.pairs:
            digest.update(f"{source}\t{target}\n".encode())
        return {"data": train.description, "training pairs": len(train),
                "languages": f"{options.src_lang}-{options.tgt_lang}", "max_length": options.max_length,
                "max_tokens": options.max_tokens, "pairs_sha256": digest.hexdigest()}

    def unknown_share(self, run, data):
        tokenizer, train = data["tokenizer"], data["train"]
        ids = [i for pair in tokenizer.encode_pairs(train.pairs[:20000]) for side in pair for i in side]
        return sum(1 for i in ids if i == tokenizer.unk_id) / max(1, len(ids)), "pieces"

    def config(self, run, data):
        tokenizer, options = data["tokenizer"], run.args.translation
        if run.start is not None:
            return options.preset, {}  # DIR's vocabulary and special ids
        return options.preset, {"vocab_size": tokenizer.vocab_size, "tgt_vocab_size": None,
                                "pad_id": tokenizer.pad_id, "bos_id": tokenizer.bos_id, "eos_id": tokenizer.eos_id}

    def check_config(self, run, config, data):
        from attnlab.data import TranslationBatches
        from attnlab.families.translation.task import encode_and_filter

        options, tokenizer, context = run.args.translation, data["tokenizer"], run.context
        say = _say if context.is_main else (lambda message: None)
        _check_lengths(options, config)
        examples, dropped = encode_and_filter(tokenizer, data["train"], options.max_length)
        if not examples:
            raise ValueError(f"no training pair is within --max-length={options.max_length} tokens")
        if dropped.dropped:
            say(f"length filter: dropped {dropped.dropped} training pairs (empty {dropped.too_short}, longer than "
                f"{options.max_length} tokens {dropped.too_long})")
        # the model's own special ids: a MarianMT model's decoder starts from its pad token
        special = {"pad_id": config.pad_id, "bos_id": config.bos_id, "eos_id": config.eos_id}
        data["train_batches"] = TranslationBatches(examples, options.max_tokens, seed=options.seed, **special)
        data["valid_batches"] = None
        if data["valid"] is not None and options.val_every:
            valid, _ = encode_and_filter(tokenizer, data["valid"], options.max_length)
            data["valid_batches"] = TranslationBatches(valid, options.max_tokens, shuffle=False,
                                                       **special) if valid else None

    def describe(self, run, model, data):
        import torch

        options, context = run.args.translation, run.context
        if not context.is_main:
            return
        _say(f"model: {run.args.init or options.preset}, {model.num_parameters():,d} parameters; "
             f"{len(data['train_batches'])} batches of <= {options.max_tokens} tokens per epoch"
             + (f" x {context.world_size} processes" if context.world_size > 1 else ""))
        device = torch.device(context.device if context.device is not None else options.device)
        _say("device: " + (f"{device} ({torch.cuda.get_device_name(device)})" if device.type == "cuda"
                           else f"cpu ({torch.get_num_threads()} threads)")
             + (", bf16 autocast" if options.bf16 else ", float32") + (", compiled" if options.compile else "")
             + (", variable-length attention (no padding)" if options.varlen else ""))

    def trainer(self, run, model, data, run_info):
        from attnlab.families.translation.task import translation_loss
        from attnlab.training import TrainConfig, Trainer

        options = run.args.translation
        if run.start is not None:  # the fine-tuning defaults the lifecycle chose (or the given flags)
            options = dataclasses.replace(options, lr_scale=run.args.lr_scale, warmup=run.args.warmup)
        config = TrainConfig(
            out_dir=str(run.out), max_steps=options.max_steps, schedule="noam", d_model=model.config.d_model,
            lr_scale=options.lr_scale, warmup_steps=options.warmup, grad_accum_steps=options.grad_accum,
            clip_grad_norm=options.clip, bf16=options.bf16, compile=options.compile, log_every=options.log_every,
            validate_every=options.val_every if data["valid_batches"] is not None else None,
            checkpoint_every=options.save_every, keep_last=max(options.keep, options.average_last), seed=options.seed,
            progress_bar=options.progress_bar, max_minutes=options.max_minutes,
            checkpoint_every_minutes=options.save_every_minutes or None)
        return Trainer(model, translation_loss(options.label_smoothing, model.config.pad_id, varlen=options.varlen),
                       data["train_batches"], config, valid_batches=data["valid_batches"],
                       model_files=run.model_files(), context=run.context, run_info=run_info)

    def save(self, run, model, trainer):
        from attnlab.families.translation.task import MODEL_SUBDIR
        from attnlab.training import average_checkpoints_to_directory, list_checkpoints

        checkpoints = list_checkpoints(run.out / "checkpoints")[-run.args.translation.average_last:]
        self._averaged = len(checkpoints)
        return average_checkpoints_to_directory(checkpoints, run.out / MODEL_SUBDIR, replace=run.args.force) \
            or run.out / MODEL_SUBDIR

    def saved_note(self, run):
        return f" (average of {self._averaged} checkpoints)" if getattr(self, "_averaged", 1) > 1 else ""


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _check_lengths(options, config) -> None:
    """``--max-length`` within the model's positions where they end (a learned table, or
    Marian's fixed one): a pair is its tokens plus EOS on either side; ``--varlen`` only where
    the decoder starts from a token other than padding (it finds the real tokens by it)."""
    from attnlab.layers.positional import build_positional

    positions = build_positional(config.positional, config.d_model, config.max_positions)
    bound = getattr(positions, "max_positions", None)
    if bound is not None and options.max_length + 1 > bound:
        raise ValueError(f"--max-length={options.max_length}: a pair of {options.max_length} tokens plus EOS exceeds "
                         f"the model's max_positions={bound}; give --max-length {bound - 1} or less")
    if options.varlen and config.bos_id == config.pad_id:
        raise ValueError("--varlen: this model's decoder starts from its padding token (pad_id = bos_id = "
                         f"{config.pad_id}, as a MarianMT model's does), which packed sequences would drop; train "
                         "without --varlen")


def _add_translation_arguments(parser) -> None:
    from attnlab.cli.options import (DEVICE_HELP, RUN_FORCE, add_device_argument, add_force_argument,
                                     add_named_data_arguments, add_precision_argument, add_threads_argument)

    # The argument dests are TranslationTrainOptions' field names (run() builds it from them);
    # tests/families/translation/test_translation_cli.py checks that the defaults here are the dataclass's.
    data = parser.add_argument_group("data (a named data set, or your own aligned files)")
    add_named_data_arguments(data, what="named data set: multi30k or trans-de-en", languages=(
        "default: de for a named set; with your own files, what you give is recorded (translation.json), so "
        "evaluate scores the model only on its own language pair", "default: en for a named set; with your own "
        "files, what you give is recorded"))
    data.add_argument("--train-src", help="your training source file (one sentence a line, plain or .gz)")
    data.add_argument("--train-tgt", help="your training target file, aligned with --train-src")
    data.add_argument("--valid-src", help="validation source file (optional)")
    data.add_argument("--valid-tgt", help="validation target file, aligned with --valid-src")
    data.add_argument("--max-train-pairs", type=int, help="use only the first N training pairs")
    data.add_argument("--vocab-size", type=int, default=8000, help="joint sentencepiece vocabulary (default: 8000)")
    data.add_argument("--tokenizer-type", choices=("bpe", "unigram"), default="bpe")
    data.add_argument("--max-length", type=int, default=128,
                      help="drop training pairs with a side longer than this many subwords (default: 128)")
    from attnlab.cli.options import SEED, add_set_argument

    model = parser.add_argument_group("model and optimisation")
    model.add_argument("--preset", default="transformer_small",
                       help="model preset (attnlab presets); vocabulary and special ids come from the tokenizer")
    add_set_argument(model, "dropout=0.3")
    model.add_argument("--max-tokens", type=int,
                       help="padded tokens per batch and side (default: 4096 on a CPU, 25600 on a GPU)")
    model.add_argument("--max-steps", type=int, default=10000, help="optimizer updates (default: 10000)")
    model.add_argument("--warmup", type=int, default=4000, help="Noam warm-up steps (default: 4000)")
    model.add_argument("--lr-scale", type=float, default=1.0, help="factor on the Noam learning rate (default: 1)")
    model.add_argument("--label-smoothing", type=float, default=0.1, help="epsilon (default: 0.1)")
    model.add_argument("--grad-accum", type=int, default=1, help="micro-batches per update (default: 1)")
    model.add_argument("--clip", type=float, default=None, help="clip the gradient norm to this (default: off)")
    add_precision_argument(model)
    model.add_argument("--varlen", action="store_true",
                       help="compute only the real tokens of each padded batch: attention on packed "
                            "variable-length sequences (on a GPU in bf16: the pad-free flash kernel); the same loss")
    model.add_argument("--seed", type=SEED, default=1,
                       help="the run's random seed: new weights, data order, dropout (default: 1)")
    add_device_argument(model, help=DEVICE_HELP + "; under torchrun with nccl each process takes its own GPU")
    add_threads_argument(model)
    run_group = parser.add_argument_group("run")
    run_group.add_argument("--out", required=True, help="output directory (the model goes to OUT/model)")
    run_group.add_argument("--max-minutes", type=float,
                           help="wall-clock budget of the whole command (data, vocabulary, training)")
    run_group.add_argument("--val-every", type=int, default=500, help="validate every N steps (0: never)")
    run_group.add_argument("--save-every", type=int, default=1000, help="checkpoint every N steps (0: only at the end)")
    from attnlab.cli.options import add_checkpoint_minutes_argument

    add_checkpoint_minutes_argument(run_group)
    run_group.add_argument("--keep", type=int, default=5, help="checkpoints to keep (default: 5)")
    run_group.add_argument("--average-last", type=int, default=1,
                           help="final model = average of the last K checkpoints (default: 1, the last)")
    run_group.add_argument("--log-every", type=int, default=50, help="log every N steps (default: 50)")
    run_group.add_argument("--resume", action="store_true",
                           help="continue from OUT/checkpoints (after Ctrl-C, a kill or a budget: the same command "
                                "plus --resume)")
    add_force_argument(run_group, RUN_FORCE)
    run_group.add_argument("--no-progress", action="store_true", help="no progress bar")


TASK = TranslationTask()


def add_arguments(parser) -> None:
    add_training_arguments(parser, TASK)


def run(args) -> int:
    return run_training(TASK, args)


def train_translation(options) -> Path:
    """Train a translation model as ``options`` say and return the final model directory:
    the run ``attnlab train translation`` makes (the lifecycle of
    :mod:`attnlab.cli.training_run` with :class:`~attnlab.families.translation.train.TranslationTask`).

    Rank 0 learns the vocabulary (or the run keeps the one of ``--resume``'s checkpoint or of
    ``init``) and writes every file; under torchrun every rank gets the vocabulary's bytes.
    See the module docstring for what ends up where."""
    import argparse

    from attnlab.cli.training_run import train_run
    from attnlab.families.translation.task import MODEL_SUBDIR, default_max_tokens

    if options.max_tokens is None:
        options = dataclasses.replace(options, max_tokens=default_max_tokens(options.device))
    parser = argparse.ArgumentParser(prog="train_translation")
    add_training_arguments(parser, TASK)
    args = parser.parse_args(["--out", str(options.out)])
    for name in (f.name for f in dataclasses.fields(options)):
        if hasattr(args, name):
            setattr(args, name, getattr(options, name))
    args.val_every, args.save_every = options.val_every or 0, options.save_every or 0
    args.no_progress, args.precision, args.bf16 = not options.progress_bar, "bf16" if options.bf16 else "fp32", False
    args.api_options = options
    model_dir = train_run(TASK, args)
    return model_dir if model_dir is not None else Path(options.out) / MODEL_SUBDIR


