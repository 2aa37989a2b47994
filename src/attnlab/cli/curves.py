"""``attnlab curves RUN [RUN ...] -o curves.png``: the training and held-out curves of one or
more training runs, read from their ``metrics.jsonl``, one colour per run (e.g. a run from
scratch beside a fine-tuned one), against updates or minutes of updates."""

HELP = "draw the training and held-out curves of training runs (their metrics.jsonl) into a PNG"


def add_arguments(parser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN",
                        help="a training run's --out directory (or its metrics.jsonl); several side by side")
    parser.add_argument("-o", "--out", required=True, metavar="PNG", help="the PNG to write")
    parser.add_argument("--x", choices=("updates", "minutes"), default="updates",
                        help="x axis: updates, or minutes of updates (the update time the trainer measured; "
                             "validation, checkpoints and pauses before a --resume are not counted); default: updates")
    parser.add_argument("--metric", action="append", metavar="NAME",
                        help="what to draw: a training record's field and its held-out valid_NAME (loss, nll, ppl, "
                             "accuracy, ... as the run logged them); repeat for one panel each (default: loss)")
    parser.add_argument("--force", action="store_true", help="replace the PNG if it exists (atomically)")


def run(args) -> int:
    import sys

    from attnlab.files import check_output_file
    from attnlab.viz.curves import plot_curves, read_run_curves

    out = check_output_file(args.out, force=args.force, flag="-o", suffixes=(".png",))
    metrics = list(dict.fromkeys(args.metric or ["loss"]))
    runs = [read_run_curves(run) for run in args.runs]
    for curves in runs:
        missing = [metric for metric in metrics if metric not in curves.metrics()]
        if missing:
            raise ValueError(f"{curves.path}: no {missing[0]!r} to draw (--metric); it has "
                             f"{', '.join(sorted(curves.metrics())) or 'no metric'}")
        if args.x == "minutes" and curves.minutes is None:
            raise ValueError(f"{curves.path}: its training records do not all say tokens and tokens_per_s, so the "
                             "minutes of updates are not known; use --x updates")
        for note in curves.notes:
            print(f"note: {note}", file=sys.stderr)
    for curves in runs:  # every value drawn is a number (a bad one is named by file and line), before writing
        for metric in metrics:
            curves.series(metric, args.x)
    plot_curves(runs, out, metrics=metrics, x=args.x)
    for curves in runs:
        train, valid = curves.series(metrics[0], args.x)
        last = f"last training {metrics[0]} {train[-1][1]:.4g}" if train else "no training records"
        held = f", last held-out {valid[-1][1]:.4g}" if valid else ""
        steps = max(list(curves.train) + list(curves.valid))
        print(f"{curves.name}: {steps:,} updates, {last}{held}")
    print(out)
    return 0
