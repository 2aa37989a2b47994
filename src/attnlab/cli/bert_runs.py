"""What the two BERT training verbs share on the training-run lifecycle (``attnlab train
bert``, ``attnlab train text-classification``): :class:`BertTask`, the
:class:`~attnlab.cli.training_run.TrainingTask` both subclass (as window_runs.WindowTask is
for the text-window verbs).

Each verb supplies its parts (families/bert/train.py, families/text_classification/train.py:
``load_init``, ``data``, ``scratch_config``, ``adapt_after_init``, ``loss``, ``score``); this class calls them at
the lifecycle's points. ``--init DIR`` opens any BERT directory (a HuggingFace BERT such as
all-MiniLM-L6-v2, ``train bert``'s or ``train text-classification``'s output) through
:func:`attnlab.tasks.bert.load_init`; the verb's ``adapt_after_init`` turns it into the model it
trains (an MLM head added, a new classification head), and what it adds is reported as the
lifecycle's new parameters (initialised as a fresh model's, trainable beside ``--lora``'s
adapters). ``--resume`` (the same data only), ``start.json``, the before/after held-out figure
and the fine-tuning defaults (a tenth of ``--lr``'s default, a 5 % warm-up) are the lifecycle's.
"""

from __future__ import annotations

import sys
from pathlib import Path

from attnlab.cli.training_run import TrainingTask, option_given

LR = 5e-4  # --lr's default from scratch; with --init the lifecycle takes a tenth of it (5e-5, BERT's fine-tuning range)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class BertTask(TrainingTask):
    """A BERT training verb on the lifecycle; ``verb`` is the verb's module (its parts)."""

    verb = None  # the verb's module: load_init, data, scratch_config, adapt_after_init, loss, batches, score
    unit_of_batch = "windows"  # what a batch holds (--batch-size's help, the model line)
    max_steps = 2000
    every = 250
    data_fields = ("vocab_size", "max_positions", "pad_id", "num_labels", "mlm_head")
    flag_names = {"text": "--text", "valid_text": "--valid-text", "train": "--train", "valid": "--valid",
                  "vocab_size": "--vocab-size", "context": "--context", "max_length": "--max-length",
                  "windows": "--windows", "labels": "--train (its labels)", "preset": "--preset", "set": "--set"}

    # -- flags and checks ---------------------------------------------------------------
    def add_data_arguments(self, parser) -> None:
        raise NotImplementedError

    def add_arguments(self, parser) -> None:
        """The verb's data options, then ``--vocab-size``/``--cased`` (from scratch), ``--preset``,
        ``--set``, ``--batch-size``, the schedule, ``--weight-decay``, precision and the run
        group (``--init`` and ``--lora`` are the lifecycle's)."""
        from attnlab.cli.options import (add_precision_argument, add_run_group, add_schedule_arguments,
                                         add_set_argument, bounded_float, bounded_int)

        self.add_data_arguments(parser)
        vocabulary = parser.add_argument_group("vocabulary (from scratch)")
        vocabulary.add_argument("--vocab-size", type=bounded_int(16, 2**20), metavar="N",
                                help="WordPiece vocabulary learned from the training text, special tokens included "
                                     "(default: 8000; with --init the directory's vocabulary is used)")
        vocabulary.add_argument("--cased", action="store_true", help="keep upper case in the learned vocabulary")
        model = parser.add_argument_group("model and optimisation")
        model.add_argument("--preset", default="bert_mini", help="the BERT preset from scratch (default: bert_mini)")
        add_set_argument(model, "num_layers=2")
        model.add_argument("--batch-size", type=int, default=32, help=f"{self.unit_of_batch} per update (default: 32)")
        add_schedule_arguments(model, max_steps=self.max_steps, warmup=100)
        model.add_argument("--lr", type=bounded_float(0.0), default=LR,
                           help=f"peak learning rate, linear warm-up then cosine decay (default: {LR:g}; with --init "
                                f"{LR / 10:g})")
        model.add_argument("--weight-decay", type=bounded_float(0.0, 1.0), default=0.01,
                           help="AdamW weight decay (default: 0.01, BERT's)")
        add_precision_argument(model)
        self.add_run_arguments(add_run_group(parser, every=self.every, seed=1))

    def add_run_arguments(self, group) -> None:
        """The verb's own run options (added to the run group)."""

    def check(self, args) -> None:
        from attnlab.cli.options import check_positive, require_packages

        check_positive(args, ("max_steps", "batch_size"))
        require_packages(f"train {self.name}", "tokenizers")
        for flag, name in (("--vocab-size", "vocab_size"), ("--cased", "cased"), ("--set", "set")):
            if args.init and getattr(args, name):
                raise ValueError(f"{flag}: with --init the directory decides this (its layers and vocabulary); "
                                 f"leave {flag} out")
        if args.warmup > args.max_steps and (not args.init or option_given(args, "warmup")):
            warmup = max(1, args.max_steps // 10)
            _say(f"note: --warmup {args.warmup} exceeds --max-steps {args.max_steps}: warming up for {warmup} "
                 "updates (a tenth of the run) instead")
            args.warmup = warmup

    def overrides(self, args):
        return {}  # --set is applied by the verb's scratch config (with --init it is refused)

    # -- --init and --resume -------------------------------------------------------------
    def open_init(self, path: Path):
        """Any BERT directory (tasks/bert.py): ``(model, vocabulary)``."""
        model, tokenizer = self.verb.load_init(path)
        return model, {"tokenizer": tokenizer, "max_positions": model.config.max_positions, "labels": None}

    def vocabulary(self, pipeline):
        """A checkpoint's (--resume): its tokenizer, positions and (a classifier's) labels."""
        return {"tokenizer": pipeline.tokenizer, "max_positions": pipeline.model.config.max_positions,
                "labels": list(pipeline.labels) if hasattr(pipeline, "labels") else None}

    # -- data, model, trainer -------------------------------------------------------------
    def files(self, prepared) -> dict[str, bytes]:
        """What OUT/model keeps beside the weights."""
        return dict(prepared.tokenizer_files)

    def data(self, run):
        from attnlab.tasks.bert import tokenizer_files

        args, known = run.args, run.vocabulary
        if known is None:
            prepared = self.verb.data(args)
        else:
            extra = {"labels": known["labels"]} if known.get("labels") is not None and run.start is None else {}
            prepared = self.verb.data(args, tokenizer=known["tokenizer"],
                                       tokenizer_files=tokenizer_files(known["tokenizer"]),
                                       max_positions=known["max_positions"], **extra)
        run.files.update(self.files(prepared))
        result = {"prepared": prepared, "new": (), "note": None}
        if run.start is not None:  # DIR's model made the one this verb trains (what it adds is new)
            before = {name: tuple(value.shape) for name, value in run.start.model.named_parameters()}
            run.start.model, result["note"] = self.verb.adapt_after_init(run.start.model, args, prepared)
            # the parameters it added (or replaced with another shape: a head of other labels)
            result["new"] = tuple(sorted({name.split(".")[0] + "." for name, value in run.start.model.named_parameters()
                                          if before.get(name) != tuple(value.shape)}))
        return result

    def run_info(self, run, data):
        return dict(data["prepared"].run_info)  # the lifecycle adds --init's weights

    def config(self, run, data):
        prepared = data["prepared"]
        if run.start is not None:
            return run.args.preset, {}
        return self.verb.scratch_config(run.args, prepared), {}

    def check_config(self, run, config, data) -> None:
        vocabulary = data["prepared"].tokenizer.vocab_size
        if vocabulary > config.vocab_size:
            raise ValueError(f"the vocabulary has {vocabulary} tokens, more than the model's "
                             f"vocab_size={config.vocab_size}")

    def new_parameters(self, run, data, old_config, new_config):
        return data["new"]

    def describe(self, run, model, data) -> None:
        from attnlab.cli.options import describe_device

        args = run.args
        _say(data["prepared"].description)
        if data["note"]:
            _say(f"--init {args.init}: {data['note']}")
        c = model.config
        _say(f"model: {f'--init {args.init}' if args.init else args.preset}, {model.num_parameters():,d} parameters "
             f"({c.num_layers} layers, d_model={c.d_model}, {c.num_heads} heads); {args.batch_size} "
             f"{self.unit_of_batch} per update, peak lr {args.lr:g}; device: {describe_device(run.device)}"
             + (", bf16 autocast" if run.bf16 else ", float32"))

    def trainer(self, run, model, data, run_info):
        """AdamW (no decay on biases, norms and embeddings) with ``--weight-decay``, linear
        warm-up then cosine decay to a tenth of ``--lr``, gradients clipped at 1 (BERT's
        recipe, with its eps 1e-6)."""
        from attnlab.cli.options import checkpoint_minutes
        from attnlab.training.trainer import TrainConfig, Trainer

        args, prepared = run.args, data["prepared"]
        config = TrainConfig(out_dir=str(run.out), max_steps=args.max_steps, schedule="cosine", peak_lr=args.lr,
                             min_lr=args.lr / 10, warmup_steps=args.warmup, betas=(0.9, 0.999), eps=1e-6,
                             optimizer="adamw", weight_decay=args.weight_decay, clip_grad_norm=1.0, log_every=25,
                             validate_every=args.val_every or None, checkpoint_every=args.save_every or None,
                             seed=args.seed, progress_bar=not args.no_progress, bf16=run.bf16, compile=args.compile,
                             checkpoint_every_minutes=checkpoint_minutes(args))
        return Trainer(model, self.verb.loss, self.verb.batches(prepared), config,
                       valid_batches=prepared.valid_batches, model_files=run.model_files(), run_info=run_info)


def scratch_config(args, tokenizer, max_positions: int, **fields):
    """From scratch: ``--preset`` (a BERT preset) with the learned vocabulary, its [PAD], the
    run's positions, ``fields`` and ``--set``; a ValueError naming ``--preset`` otherwise."""
    import attnlab
    from attnlab.cli.options import parse_overrides

    preset = attnlab.get_preset(args.preset) if args.preset in attnlab.list_presets() else None
    if preset is None or preset.family != "bert":
        berts = [name for name in attnlab.list_presets() if attnlab.get_preset(name).family == "bert"]
        raise ValueError(f"--preset {args.preset!r} is not a BERT preset; choose one of {', '.join(berts)}")
    values = {"vocab_size": tokenizer.vocab_size, "max_positions": max_positions, "pad_id": tokenizer.pad_id,
              **parse_overrides(args.set), **fields}
    return preset.replace(**values)
