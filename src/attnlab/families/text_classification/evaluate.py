"""``attnlab evaluate-text-classifier --model DIR [--data FILE]``: a text classifier on a
labelled file (the format ``train text-classification`` reads; without ``--data``, the model's
own held-out rows, as its ``text_classification.json`` records them): accuracy, macro-F1,
per-class precision and recall, and with ``--out DIR`` results.json and confusion_matrix.png.
``attnlab evaluate --model DIR [--data FILE]`` of a text classifier runs this verb."""

from __future__ import annotations

HELP = "score a text classifier on a labelled TSV/CSV/JSONL file: accuracy, macro-F1, per-class precision/recall"


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_force_argument, add_limit_argument, add_runtime_arguments, bounded_int

    parser.add_argument("--model", required=True, help="a model directory written by attnlab train text-classification")
    parser.add_argument("--data", metavar="FILE", help="labelled .tsv/.csv (header: text, label[, text_pair]) or "
                                                      ".jsonl file (default: the model's own held-out data, as its "
                                                      "text_classification.json records it)")
    parser.add_argument("--out", help="write results.json and confusion_matrix.png here (made if missing; other "
                                      "files in it are left alone)")
    parser.add_argument("--batch-size", type=bounded_int(1, 4096), default=32, help="texts per batch (default: 32)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_force_argument(parser, "results.json and confusion_matrix.png in --out")
    add_limit_argument(parser, "rows of --data")
    add_runtime_arguments(parser)


def run(args) -> int:
    from pathlib import Path

    from attnlab.cli.options import apply_threads, require_packages, resolve_device
    from attnlab.families.text_classification.data import read_labelled
    from attnlab.families.text_classification.task import (EVALUATION_FILES, evaluate, load_text_classifier, summary,
                                                           write_evaluation)
    from attnlab.files import check_output_files

    if args.out:  # before any work: the two files are replaced only with --force
        check_output_files(args.out, EVALUATION_FILES, force=args.force, flag="--out")
    require_packages("evaluate-text-classifier", "tokenizers")
    apply_threads(args)
    model, tokenizer, labels, pairs = load_text_classifier(args.model, device=resolve_device(args.device))
    if args.data is None:  # the model's own held-out rows, said
        from attnlab.families.text_classification.train import DATA_FILE, own_held_out

        own = own_held_out(args.model)
        if own is None:
            raise ValueError(f"--data: give a labelled file to score; {args.model} has no {DATA_FILE} (a model trained "
                             "before it was kept) to find its own held-out data")
        data, what = own
        print(f"scoring {what}")
        args.data = data.path
    else:
        data = read_labelled(args.data, flag="--data")
    if (data.pairs is not None) != pairs:
        raise ValueError(f"--data {args.data}: {'text pairs' if data.pairs is not None else 'single texts'}, but the "
                         f"model reads {'text pairs' if pairs else 'single texts'}")
    known = set(labels)
    for label, number in zip(data.labels, data.lines):
        if label not in known:
            raise ValueError(f"--data {args.data}, line {number}: the label {label!r} is not one of the model's "
                             f"({', '.join(labels[:10])}{', ...' if len(labels) > 10 else ''})")
    rows = range(min(len(data), args.limit)) if args.limit is not None else None
    if rows is not None and len(rows) < len(data):
        print(f"scoring the first {len(rows):,d} of the {len(data):,d} rows of {args.data} (--limit)")
    import sys

    from tqdm import tqdm

    with tqdm(total=len(rows) if rows is not None else len(data), desc="scoring", unit="text", file=sys.stderr,
              leave=False, disable=args.no_progress) as bar:
        scores, confusion = evaluate(model, tokenizer, data, labels, rows=rows, batch_size=args.batch_size,
                                     progress=bar.update)
    print(summary(scores))
    if args.out:
        write_evaluation(scores, confusion, labels, Path(args.out), data=str(args.data))
        print(f"wrote {Path(args.out) / 'results.json'} and {Path(args.out) / 'confusion_matrix.png'}")
    return 0
