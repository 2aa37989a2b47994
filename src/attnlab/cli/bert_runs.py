"""What the two BERT training verbs share (``attnlab train bert``, ``attnlab train
text-classification``), as :mod:`attnlab.cli.window_runs` does for the LM verbs: the options
``--init`` decides, the run's start (resumed, from ``--init`` or from scratch, through each
verb's parts), the Trainer's settings, the files written into OUT before training.

TRAINING-LIFECYCLE SEAM: the shared lifecycle (``--init`` for every train verb) replaces
:func:`prepare_run`'s ``--init`` branch (each verb's ``load_init``) when it lands.
"""

from __future__ import annotations

from pathlib import Path


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
    (:func:`attnlab.cli.window_runs.check_same_run`)."""
    from attnlab.cli.window_runs import check_same_run
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
