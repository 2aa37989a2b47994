"""``attnlab train translation``: vocabulary + Transformer + shared Trainer -> a model directory.

    attnlab train translation --data multi30k --src de --tgt en --preset multi30k --out runs/m30k
    attnlab train translation --train-src train.de --train-tgt train.en \\
        --valid-src valid.de --valid-tgt valid.en --src de --tgt en --out runs/mine
    torchrun --nproc_per_node=2 -m attnlab.cli.main train translation ...   # data-parallel

The final model is written to ``OUT/model`` (config.json, model.safetensors,
tokenizer.model, translation.json); ``OUT/checkpoints`` holds resumable checkpoints and
``OUT/metrics.jsonl`` the training log.
"""

DESCRIPTION = __doc__.split("\n\n")[0]
HELP = "train an encoder-decoder Transformer on parallel text (a named data set or your own aligned files)"


def add_arguments(parser) -> None:
    _add_translation_arguments(parser)


def _add_translation_arguments(parser) -> None:
    from attnlab.cli.options import (DEVICE_HELP, RUN_FORCE, add_device_argument, add_force_argument,
                                     add_named_data_arguments, add_precision_argument, add_threads_argument)

    # The argument dests are TranslationTrainOptions' field names (run() builds it from them);
    # tests/families/translation/test_translation_cli.py checks that the defaults here are the dataclass's.
    data = parser.add_argument_group("data (a named data set, or your own aligned files)")
    add_named_data_arguments(data, src_default="de", tgt_default="en")
    data.add_argument("--train-src", help="your training source file (one sentence a line, plain or .gz)")
    data.add_argument("--train-tgt", help="your training target file, aligned with --train-src")
    data.add_argument("--valid-src", help="validation source file (optional)")
    data.add_argument("--valid-tgt", help="validation target file, aligned with --valid-src")
    data.add_argument("--max-train-pairs", type=int, help="use only the first N training pairs")
    data.add_argument("--vocab-size", type=int, default=8000, help="joint sentencepiece vocabulary (default: 8000)")
    data.add_argument("--tokenizer-type", choices=("bpe", "unigram"), default="bpe")
    data.add_argument("--max-length", type=int, default=128,
                      help="drop training pairs with a side longer than this many subwords (default: 128)")
    from attnlab.cli.options import add_set_argument

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
    model.add_argument("--seed", type=int, default=1)
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


def run(args) -> int:
    import os

    from attnlab.cli.options import options_from_args, parse_overrides, resolve_device, resolve_precision
    from attnlab.families.translation.translate import set_threads
    from attnlab.families.translation.task import TranslationTrainOptions, train_translation

    set_threads(args.threads)
    device = resolve_device(args.device)
    options = options_from_args(
        TranslationTrainOptions, args, bf16=resolve_precision(args, device), device=device,
        val_every=args.val_every or None, save_every=args.save_every or None, progress_bar=not args.no_progress,
        model_overrides=parse_overrides(args.set),
    )
    model_dir = train_translation(options)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, one line, not one per process
        print(model_dir)
    return 0
