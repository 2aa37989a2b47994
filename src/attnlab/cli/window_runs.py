"""What the window-trained language-model verbs share (``attnlab train lm``, ``attnlab
train music``): their options, the checks and settings a run starts with, and their
Trainer over random windows of one token stream."""

from __future__ import annotations


def add_run_arguments(parser, *, set_example: str, batch_size: int, max_steps: int, lr: float, warmup: int) -> None:
    """The options every window-trained LM verb shares (``train lm``, ``train music``):
    batch, schedule, budget, preset overrides, validation/checkpoint cadence, device, seed, output."""
    parser.add_argument("--batch-size", type=int, default=batch_size, help=f"windows per update (default: {batch_size})")
    from attnlab.cli.options import (add_precision_argument, add_run_group, add_schedule_arguments, add_set_argument,
                                     bounded_int)

    add_schedule_arguments(parser, max_steps=max_steps, lr=lr, warmup=warmup, lr_help="peak learning rate, cosine schedule")
    add_set_argument(parser, set_example)

    add_precision_argument(parser)
    run = add_run_group(parser, every=250, seed=1)
    run.add_argument("--val-batches", type=bounded_int(1, 10**6), default=40, metavar="N",
                     help="validation batches (default: 40)")


def start_run(args):
    """The checks and settings every window-trained LM verb starts with, before reading
    data: ``(warmup, device, bf16, out, checkpoint to resume or None)``."""
    import sys
    from pathlib import Path

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


def window_trainer(args, model, loss_fn, train_ids, valid_ids, *, context: int, warmup: int, bf16: bool, betas,
                   eps: float, model_files=(), run_info=None):
    """The Trainer of a window-trained LM verb (:func:`add_run_arguments`' options): random
    windows of ``train_ids``, the first ``--val-batches`` consecutive windows of ``valid_ids``,
    AdamW with a cosine schedule to a tenth of ``--lr``, gradients clipped at 1."""
    from attnlab.cli.options import checkpoint_minutes
    from attnlab.data.text import TextWindows, consecutive_windows
    from attnlab.training.trainer import TrainConfig, Trainer

    config = TrainConfig(out_dir=str(args.out), max_steps=args.max_steps, schedule="cosine", peak_lr=args.lr,
                         min_lr=args.lr / 10, warmup_steps=warmup, betas=betas, eps=eps,
                         clip_grad_norm=1.0, log_every=25, validate_every=args.val_every or None,
                         checkpoint_every=args.save_every or None, seed=args.seed,
                         progress_bar=not args.no_progress, max_minutes=args.max_minutes, bf16=bf16,
                         compile=args.compile, checkpoint_every_minutes=checkpoint_minutes(args))
    return Trainer(model, loss_fn, TextWindows(train_ids, batch_size=args.batch_size, context=context,
                                               seed=args.seed), config,
                   valid_batches=consecutive_windows(valid_ids, batch_size=args.batch_size, context=context,
                                                     max_batches=args.val_batches),
                   model_files=model_files, run_info=run_info)


def check_same_run(checkpoint, run_info: dict) -> None:
    """Refuse to resume ``checkpoint`` on other data or another model (the vocabulary and
    windows would silently change meaning)."""
    from attnlab.training import load_training_state

    saved = load_training_state(checkpoint).get("run_info")
    if not isinstance(saved, dict):
        return  # a checkpoint from before run_info was kept: nothing to compare with
    flags = {"text": "--text", "valid_text": "--valid-text", "tokenizer": "--tokenizer", "vocab_size": "--vocab-size",
             "context": "--context", "preset": "--preset", "set": "--set"}
    changed = [flags.get(key, key) for key in run_info if key in saved and saved[key] != run_info[key]]
    if changed:
        raise ValueError(f"--resume: {', '.join(changed)} differ(s) from the run saved in {checkpoint}; resuming "
                         "on other data or another model would silently change what the ids mean. Give the same "
                         "options as that run, or train into a new --out")
