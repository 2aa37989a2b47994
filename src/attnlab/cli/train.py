"""``attnlab train translation``: vocabulary + Transformer + shared Trainer -> a model directory.

    attnlab train translation --data multi30k --src de --tgt en --preset multi30k --out runs/m30k
    attnlab train translation --train-src train.de --train-tgt train.en \\
        --valid-src valid.de --valid-tgt valid.en --src de --tgt en --out runs/mine
    torchrun --nproc_per_node=2 -m attnlab.cli.main train translation ...   # data-parallel
    attnlab train lm --out runs/shakespeare                                  # see attnlab.cli.train_lm

The final model is written to ``OUT/model`` (config.json, model.safetensors,
tokenizer.model, translation.json); ``OUT/checkpoints`` holds resumable checkpoints and
``OUT/metrics.jsonl`` the training log.
"""

HELP = "train a model (tasks: translation, lm, vit, music) and write a loadable model directory to OUT/model"


def add_arguments(parser) -> None:
    from attnlab.cli import train_lm

    tasks = parser.add_subparsers(dest="task", metavar="TASK", required=True)
    translation = tasks.add_parser("translation", help="encoder-decoder Transformer on parallel text",
                                   description=__doc__.split("\n\n")[0])
    _add_translation_arguments(translation)
    translation.set_defaults(run=run)
    lm = tasks.add_parser("lm", help=train_lm.HELP, description=train_lm.HELP)
    train_lm.add_arguments(lm)
    lm.set_defaults(run=train_lm.run)
    from attnlab.cli import vit

    vit_parser = tasks.add_parser("vit", help=vit.HELP, description=vit.HELP)
    vit.add_arguments(vit_parser)
    vit_parser.set_defaults(run=vit.run)
    from attnlab.cli import train_music

    music_parser = tasks.add_parser("music", help=train_music.HELP, description=train_music.HELP)
    train_music.add_arguments(music_parser)
    music_parser.set_defaults(run=train_music.run)


def _add_translation_arguments(parser) -> None:
    from attnlab.cli.options import DEVICE_HELP, add_device_argument, add_precision_argument

    data = parser.add_argument_group("data (a named data set, or your own aligned files)")
    data.add_argument("--data", help="named data set: multi30k or trans-de-en")
    data.add_argument("--data-root", help="where the named data set lives (overrides its default location)")
    data.add_argument("--src", default="de", help="source language code (default: de)")
    data.add_argument("--tgt", default="en", help="target language code (default: en)")
    data.add_argument("--train-src", help="your training source file (one sentence a line, plain or .gz)")
    data.add_argument("--train-tgt", help="your training target file, aligned with --train-src")
    data.add_argument("--valid-src", help="validation source file (optional)")
    data.add_argument("--valid-tgt", help="validation target file, aligned with --valid-src")
    data.add_argument("--max-train-pairs", type=int, help="use only the first N training pairs")
    data.add_argument("--vocab-size", type=int, default=8000, help="joint sentencepiece vocabulary (default: 8000)")
    data.add_argument("--tokenizer-type", choices=("bpe", "unigram"), default="bpe")
    data.add_argument("--max-length", type=int, default=128,
                      help="drop training pairs with a side longer than this many subwords (default: 128)")
    model = parser.add_argument_group("model and optimisation")
    model.add_argument("--preset", default="transformer_small",
                       help="model preset (attnlab presets); vocabulary and special ids come from the tokenizer")
    model.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="override a preset field, e.g. --set dropout=0.3 (repeatable)")
    model.add_argument("--max-tokens", type=int, default=4096, help="padded tokens per batch (default: 4096)")
    model.add_argument("--max-steps", type=int, default=10000, help="optimizer updates (default: 10000)")
    model.add_argument("--warmup", type=int, default=4000, help="Noam warm-up steps (default: 4000)")
    model.add_argument("--lr-scale", type=float, default=1.0, help="factor on the Noam learning rate (default: 1)")
    model.add_argument("--label-smoothing", type=float, default=0.1, help="epsilon (default: 0.1)")
    model.add_argument("--grad-accum", type=int, default=1, help="micro-batches per update (default: 1)")
    model.add_argument("--clip", type=float, default=None, help="clip the gradient norm to this (default: off)")
    add_precision_argument(model)
    model.add_argument("--seed", type=int, default=1)
    add_device_argument(model, help=DEVICE_HELP + "; under torchrun with nccl each process takes its own GPU")
    model.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice, one per core)")
    run_group = parser.add_argument_group("run")
    run_group.add_argument("--out", required=True, help="output directory (the model goes to OUT/model)")
    run_group.add_argument("--max-minutes", type=float,
                           help="wall-clock budget: stop (and checkpoint) after the update that passes it")
    run_group.add_argument("--val-every", type=int, default=500, help="validate every N steps (0: never)")
    run_group.add_argument("--save-every", type=int, default=1000, help="checkpoint every N steps (0: only at the end)")
    run_group.add_argument("--keep", type=int, default=5, help="checkpoints to keep (default: 5)")
    run_group.add_argument("--average-last", type=int, default=1,
                           help="final model = average of the last K checkpoints (default: 1, the last)")
    run_group.add_argument("--log-every", type=int, default=50, help="log every N steps (default: 50)")
    run_group.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints")
    run_group.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    import os

    from attnlab.cli.options import parse_overrides, resolve_device, resolve_precision
    from attnlab.cli.translate import set_threads
    from attnlab.translation import TranslationTrainOptions, train_translation

    set_threads(args.threads)
    device = resolve_device(args.device)
    options = TranslationTrainOptions(
        out=args.out, src_lang=args.src, tgt_lang=args.tgt, data=args.data, data_root=args.data_root,
        train_src=args.train_src, train_tgt=args.train_tgt, valid_src=args.valid_src, valid_tgt=args.valid_tgt,
        max_train_pairs=args.max_train_pairs, preset=args.preset, vocab_size=args.vocab_size,
        tokenizer_type=args.tokenizer_type, max_length=args.max_length, max_tokens=args.max_tokens,
        max_steps=args.max_steps, warmup=args.warmup, lr_scale=args.lr_scale, label_smoothing=args.label_smoothing,
        grad_accum=args.grad_accum, clip=args.clip, bf16=resolve_precision(args, device), compile=args.compile, val_every=args.val_every or None,
        save_every=args.save_every or None, keep=args.keep, average_last=args.average_last,
        log_every=args.log_every, resume=args.resume, seed=args.seed, device=device,
        progress_bar=not args.no_progress, max_minutes=args.max_minutes, model_overrides=parse_overrides(args.set),
    )
    model_dir = train_translation(options)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, one line, not one per process
        print(model_dir)
    return 0
