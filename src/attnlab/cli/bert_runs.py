"""What the two BERT training verbs share (``attnlab train bert``, ``attnlab train
text-classification``): the options ``--init`` decides, the run's start (resumed, from
``--init`` or from scratch, through each verb's parts), the Trainer's settings, the files
written into OUT before training.

TRAINING-LIFECYCLE SEAM: these verbs were written beside the shared lifecycle
(cli/training_run.py, which landed meanwhile) as parts a ``TrainingTask`` can call
(``load_init``, ``data``, ``build_model``, ``adapt_after_init``, ``loss``, ``score``);
moving them onto it replaces this module (and gives them ``--lora``; see
tests/families/test_registry.py's NOT_ON_THE_LIFECYCLE).
"""

from __future__ import annotations

from pathlib import Path


def add_bert_run_arguments(parser, *, init_help: str, unit: str, max_steps: int, init_lr: float, every: int):
    """The options both BERT training verbs share, after each verb's data options:
    ``--vocab-size``/``--cased`` (from scratch), ``--init``, ``--preset``, ``--set``,
    ``--batch-size``, the schedule (``--lr`` defaulting to ``init_lr`` with --init, 5e-4 from
    scratch), ``--weight-decay``, precision and the run group; returns the run group."""
    from attnlab.cli.options import (add_precision_argument, add_run_group, add_schedule_arguments, add_set_argument,
                                     bounded_float, bounded_int)

    vocabulary = parser.add_argument_group("vocabulary (from scratch)")
    vocabulary.add_argument("--vocab-size", type=bounded_int(16, 2**20), metavar="N",
                            help="WordPiece vocabulary learned from the training text, special tokens included "
                                 "(default: 8000; with --init the directory's vocabulary is used)")
    vocabulary.add_argument("--cased", action="store_true", help="keep upper case in the learned vocabulary")
    model = parser.add_argument_group("model and optimisation")
    model.add_argument("--init", metavar="DIR", help=init_help)
    model.add_argument("--preset", default="bert_mini", help="the BERT preset from scratch (default: bert_mini)")
    add_set_argument(model, "num_layers=2")
    model.add_argument("--batch-size", type=int, default=32, help=f"{unit} per update (default: 32)")
    add_schedule_arguments(model, max_steps=max_steps, warmup=100)
    model.add_argument("--lr", type=bounded_float(0.0), help=f"peak learning rate, linear warm-up then cosine decay "
                                                             f"(default: {init_lr:g} with --init, 5e-4 from scratch)")
    model.add_argument("--weight-decay", type=bounded_float(0.0, 1.0), default=0.01,
                       help="AdamW weight decay (default: 0.01, BERT's)")
    add_precision_argument(model)
    return add_run_group(parser, every=every, seed=1)


def peak_lr(args, init_lr: float) -> float:
    """``--lr``, or its default: ``init_lr`` with ``--init``, 5e-4 from scratch."""
    return args.lr if args.lr is not None else (init_lr if args.init else 5e-4)


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


def start_run(args):
    """The checks and settings a BERT run starts with, before reading data: ``(warmup, device,
    bf16, out, checkpoint to resume or None)``; a warm-up longer than the run is cut to a
    tenth of it, and said."""
    import sys

    from attnlab.cli.options import apply_threads, check_positive, resolve_device, resolve_precision
    from attnlab.training.outputs import check_run_output

    check_positive(args, ("max_steps", "batch_size"))
    warmup = args.warmup
    if warmup > args.max_steps:
        warmup = max(1, args.max_steps // 10)
        print(f"note: --warmup {args.warmup} exceeds --max-steps {args.max_steps}: warming up for {warmup} "
              "updates (a tenth of the run) instead", file=sys.stderr)
    device = resolve_device(args.device)
    bf16 = resolve_precision(args, device)
    out = Path(args.out)
    previous = check_run_output(out, resume=args.resume, force=args.force)
    apply_threads(args)
    return warmup, device, bf16, out, previous


RUN_FLAGS = {"text": "--text", "valid_text": "--valid-text", "train": "--train", "valid": "--valid",
             "vocab_size": "--vocab-size", "context": "--context", "max_length": "--max-length",
             "windows": "--windows", "labels": "--train (its labels)", "preset": "--preset", "set": "--set",
             "init": "--init"}


def check_same_run(checkpoint: Path, run_info: dict) -> None:
    """Refuse to resume ``checkpoint`` on other data or another model (the vocabulary, windows
    and labels would silently change meaning), naming the options that differ."""
    from attnlab.training import load_training_state

    saved = load_training_state(checkpoint).get("run_info")
    if not isinstance(saved, dict):
        return
    changed = [RUN_FLAGS.get(key, key) for key in run_info if key in saved and saved[key] != run_info[key]]
    if changed:
        raise ValueError(f"--resume: {', '.join(changed)} differ(s) from the run saved in {checkpoint}; resuming "
                         "on other data or another model would silently change what the ids mean. Give the same "
                         "options as that run, or train into a new --out")


def refuse_with_init(args, flags: dict[str, str]) -> None:
    """``flags`` (``{"--vocab-size": "vocab_size", ...}``) given with ``--init``, whose
    directory decides them, are refused naming the flag."""
    for flag, name in flags.items():
        if args.init and getattr(args, name):
            raise ValueError(f"{flag}: with --init the directory decides this (its layers and vocabulary); "
                             f"leave {flag} out")


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
    built from scratch. A resumed run on other data or options is refused
    (:func:`check_same_run`)."""
    from attnlab.models.registry import model_class_for
    from attnlab.tasks.bert import resumed_run, tokenizer_files

    init = parts.load_init(args.init, device) if args.init else None  # checked before anything is read or written
    if previous is not None:
        config, tokenizer, files = resumed_run(previous)
        extra = {name: read(previous, config) for name, read in resume_data.items()}
        prepared = parts.data(args, tokenizer=tokenizer, tokenizer_files=files, max_positions=config.max_positions,
                              **extra)
        check_same_run(previous, prepared.run_info)
        return prepared, model_class_for(config)(config), None
    if init is not None:
        model, tokenizer = init
        prepared = parts.data(args, tokenizer=tokenizer, tokenizer_files=tokenizer_files(tokenizer),
                              max_positions=model.config.max_positions)
        return (prepared, *parts.adapt_after_init(parts.build_model(args, prepared, model), args, prepared))
    prepared = parts.data(args)
    return prepared, parts.build_model(args, prepared), None


def start_bert_run(parts, args, *, verb: str, unit: str, init_lr: float, scoring: str, model_files,
                   **resume_data):
    """Everything both BERT verbs do before training, in order, nothing written: the command's
    budget, the options checked (``tokenizers`` installed, what ``--init`` decides, ``--out``),
    the data, vocabulary and model (:func:`prepare_run`), the lines saying how the run is
    set up, and the Trainer (``model_files(prepared)``: the files OUT and every checkpoint
    keep). Returns ``SimpleNamespace(budget, say, device, out, prepared, model, trainer)``."""
    import sys
    from types import SimpleNamespace

    from attnlab.cli.options import check_positive, require_packages
    from attnlab.training.phases import budget_plan, command_budget
    from attnlab.training.trainer import Trainer

    budget = command_budget(args.max_minutes)
    check_positive(args, ("batch_size",))
    require_packages(verb, "tokenizers")
    refuse_with_init(args, {"--vocab-size": "vocab_size", "--cased": "cased", "--set": "set"})
    say = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    warmup, device, bf16, out, previous = start_run(args)
    prepared, model, note = prepare_run(parts, args, device, previous, **resume_data)
    if prepared.tokenizer.vocab_size > model.config.vocab_size:
        raise ValueError(f"the vocabulary has {prepared.tokenizer.vocab_size} tokens, more than the model's "
                         f"vocab_size={model.config.vocab_size}")
    plan = budget_plan(budget, scoring=scoring)
    if plan:
        say(plan)
    say(prepared.description)
    if note:
        say(f"--init {args.init}: {note}")
    model.to(device)
    lr = peak_lr(args, init_lr)
    say(describe_model(model, f"--init {args.init}" if args.init else args.preset, unit, args, device, bf16, lr))
    trainer = Trainer(model, parts.loss, parts.batches(prepared), train_config(args, out, warmup=warmup, bf16=bf16,
                                                                                lr=lr),
                      valid_batches=prepared.valid_batches, model_files=[out / name for name in model_files(prepared)],
                      run_info=prepared.run_info)
    return SimpleNamespace(budget=budget, say=say, device=device, out=out, prepared=prepared, model=model,
                           trainer=trainer)
